"""Stopping a run: SIGTERM, SIGHUP and Ctrl-C stop every mode and the wrapper alike (work
saved, summary, exit status 128 + the signal, no process or shared memory left), and a
child killed at any instant cannot wedge the stop. `benchmarks.stop_under_signals` does the same
many times at random moments."""
import multiprocessing as mp
import os
import random
import signal
import threading
import time

import pytest

from benchmarks.stop_under_signals import one_try
from launch.stopping import StopFlag, how_it_ended


def _wait_on(flag, waiting) -> None:
    waiting.set()
    flag.wait()


def test_a_process_killed_while_waiting_on_the_stop_flag_cannot_block_setting_it():
    # multiprocessing.Event fails this: its set() waits for the killed waiter to wake.
    ctx = mp.get_context("spawn")
    flag = StopFlag(ctx)
    waiting = ctx.Event()
    waiter = ctx.Process(target=_wait_on, args=(flag, waiting))
    waiter.start()
    assert waiting.wait(60)
    time.sleep(0.2)  # set just before wait(), which itself cannot say so: time to get into it
    os.kill(waiter.pid, signal.SIGKILL)
    waiter.join()
    setter = threading.Thread(target=flag.set, daemon=True)
    setter.start()
    setter.join(5.0)
    assert not setter.is_alive() and flag.is_set() and flag.wait(0.0)


def test_a_stop_held_back_is_raised_even_when_the_held_start_fails(monkeypatch):
    # The stop was asked for: an error of the start it waited behind must not swallow it, nor
    # leave it pending to stop a later start that nobody asked to stop.
    from launch import stopping

    monkeypatch.setattr(stopping, "_received", [])
    monkeypatch.setattr(stopping, "_deferred", False)
    with pytest.raises(KeyboardInterrupt):
        with stopping.signals_held():
            stopping._interrupt(signal.SIGHUP, None)  # as when another thread takes the signal
            raise OSError("the child could not start")
    with stopping.signals_held():
        pass


def test_a_sighup_ignored_by_the_parent_stays_ignored_as_under_nohup(stop_handlers_restored):
    from launch import stopping

    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    stopping.stop_main_process_on_signals()
    assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    assert signal.getsignal(signal.SIGTERM) is stopping._interrupt
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    stopping.stop_main_process_on_signals()
    assert signal.getsignal(signal.SIGHUP) is stopping._interrupt


def test_the_summary_names_what_stopped_the_run():
    assert how_it_ended(0) == "finished"
    assert how_it_ended(1) == "stopped: a process failed"
    assert how_it_ended(130) == "stopped by Ctrl-C"
    assert how_it_ended(143) == "stopped by SIGTERM"
    assert how_it_ended(129) == "stopped by SIGHUP"


@pytest.mark.parametrize("phase, sig, to_group, status", [
    ("gather", signal.SIGTERM, True, 143),
    ("pretrain", signal.SIGHUP, False, 129),  # the main process alone, as `kill -HUP PID`
    ("train", signal.SIGTERM, True, 143),
])
def test_a_stop_signal_in_any_phase_saves_the_work_and_leaves_nothing(phase, sig, to_group,
                                                                       status, tmp_path,
                                                                       sighup_by_default):
    t = one_try(tmp_path, phase, random.Random(phase), sig=sig, to_group=to_group)
    assert t.clean, (t.left, t.shm_left, t.stop_s, t.stderr)
    assert t.exit_status == status, t.stderr
    assert f"run stopped by {signal.Signals(sig).name}" in t.stderr, t.stderr
    assert (tmp_path / "run" / "prefs.sqlite").is_file()
    if phase == "train":
        assert list((tmp_path / "run" / "policy").glob("policy-*.pt")), t.stderr
        assert f"python run.py --resume {tmp_path / 'run'}" in t.stderr
        assert "watch the policy:" in t.stderr
    else:  # stopped before the policy's first update: no policy to watch yet
        assert "watch the policy:" not in t.stderr and not list(
            (tmp_path / "run" / "policy").glob("*.pt")), t.stderr


def test_a_child_killed_outright_stops_the_others_cleanly(tmp_path):
    t = one_try(tmp_path, "train", random.Random(1), kill_child="a2c")
    assert t.exit_status == 1 and "process 'a2c' failed" in t.stderr, t.stderr
    assert "run stopped: a process failed" in t.stderr
    assert not t.left and not t.shm_left and t.stop_s <= 15.0, (t.left, t.shm_left, t.stop_s)


def test_a_stop_signal_to_one_child_alone_stops_the_run_as_that_signal(tmp_path):
    """`kill PID` of the process `ps` shows as a2c: the run saves, ends as stopped by SIGTERM
    (not as finished) and says how to resume it."""
    t = one_try(tmp_path, "train", random.Random(4), kill_child="a2c",
                child_signal=signal.SIGTERM)
    assert t.clean, (t.left, t.shm_left, t.stop_s, t.stderr)
    assert t.exit_status == 143 and "run stopped by SIGTERM" in t.stderr, t.stderr
    assert f"python run.py --resume {tmp_path / 'run'}" in t.stderr
    assert list((tmp_path / "run" / "policy").glob("policy-*.pt")), t.stderr


@pytest.mark.parametrize("phase", [pytest.param("pretrain", marks=pytest.mark.slow), "train"])
def test_the_wrapper_stops_on_sigterm_as_run_py_does(phase, tmp_path):
    """The caller's script ends with run.py's status and summary, and no traceback."""
    t = one_try(tmp_path, phase, random.Random(2), wrapper=True)
    assert t.clean, (t.left, t.shm_left, t.stop_s, t.stderr)
    assert t.exit_status == 143 and "Traceback" not in t.stderr, t.stderr
    assert "run stopped by SIGTERM" in t.stderr, t.stderr
    assert "resume:            PreferenceVecEnv(env, resume=" in t.stderr, t.stderr


@pytest.mark.slow  # 25 s; the supervisor's side of a killed child is tested above with run.py
def test_the_wrapper_ends_the_callers_loop_when_a_child_is_killed(tmp_path):
    t = one_try(tmp_path, "train", random.Random(3), wrapper=True,
                kill_child="reward_predictor")
    assert t.exit_status == 1 and "a process of the preference loop failed" in t.stderr, t.stderr
    assert not t.left and not t.shm_left and t.stop_s <= 15.0, (t.left, t.shm_left, t.stop_s)


@pytest.mark.slow  # 25 s; run.py's side of a signalled child is tested above
def test_the_wrapper_ends_the_callers_loop_when_a_child_alone_is_signalled(tmp_path):
    t = one_try(tmp_path, "train", random.Random(5), wrapper=True, kill_child="reward_predictor",
                child_signal=signal.SIGTERM)
    assert t.clean, (t.left, t.shm_left, t.stop_s, t.stderr)
    assert t.exit_status == 143 and "Traceback" not in t.stderr, t.stderr
    assert "run stopped by SIGTERM" in t.stderr, t.stderr


def test_signals_are_counted_afresh_for_a_later_run_in_the_same_process(monkeypatch):
    from launch import stopping

    monkeypatch.setattr(stopping, "_received", [signal.SIGINT])
    assert stopping.signal_received() and stopping.interrupted_status() == 130
    stopping.forget_signals()
    assert not stopping.signal_received()


def test_the_leftover_check_sees_what_a_run_killed_outright_left_in_dev_shm(tmp_path):
    """SIGKILL to every process of a run leaves its semaphores in /dev/shm, and the check that the
    stop tests rely on finds them (and only its own: it is run beside other tests)."""
    from benchmarks.stop_under_signals import RunUnderTest, shm_entries, shm_left

    before = shm_entries()
    run = RunUnderTest(tmp_path, epochs=3)
    try:
        assert run.wait_for("gather") and run.made
    finally:
        os.killpg(run.pgid, signal.SIGKILL)
        run.proc.wait()
    time.sleep(0.5)  # the killed processes gone (their resource tracker too)
    leaked = shm_left(before, run.made)
    for name in leaked:
        os.unlink(f"/dev/shm/{name}")
    assert leaked and all(n.startswith("sem.") for n in leaked)


def test_a_stop_while_the_run_is_set_up_is_one_line_and_the_signals_status(monkeypatch, capsys,
                                                                          stop_handlers_restored):
    """Parsing and the preflight checks take seconds (torch's import, a checkpoint read): a
    Ctrl-C then ends run.py in one line, with nothing started and nothing to save."""
    import run
    from launch import stopping

    def interrupted(argv):
        raise KeyboardInterrupt

    monkeypatch.setattr(stopping, "_received", [])
    monkeypatch.setattr(run, "parse_args", interrupted)
    assert run.main(["train_policy_with_original_rewards", "MovingDot-v0"]) == 130
    assert capsys.readouterr().err == "run.py: stopped before the run started\n"
