"""The supervisor: a crashing child's error is printed and the others are stopped within
seconds (status 1); a stop as a child starts stops it too; progress; a child's own environment."""
import json
import multiprocessing as mp
import os
import signal
import socket
import threading
import time
from pathlib import Path

import pytest

from launch.supervisor import EXIT_CRASHED, Supervisor
from tests.supervised_targets import (count_to, crash_after, fail_half_way_through_a_message,
                                      ignore_the_stop, ignore_the_stop_with_a_short_orphan_wait,
                                      report_malloc, send_an_unreadable_traceback,
                                      work_until_stopped)


class _SignalledAsItStarts(mp.context.SpawnProcess):
    def start(self):
        os.kill(os.getpid(), signal.SIGHUP)  # held back until the child has started
        super().start()


class _SignallingContext(mp.context.SpawnContext):
    Process = _SignalledAsItStarts


@pytest.mark.parametrize("other_thread", [False, True])
def test_a_stop_signal_as_a_child_starts_cannot_leave_that_child_running(other_thread,
                                                                         monkeypatch,
                                                                         sighup_by_default,
                                                                         stop_handlers_restored):
    # The signal held while the child starts lands as the supervisor lets it through, or at
    # once where another thread of the process takes it; either way the child must be known to
    # the supervisor when the stop is raised, or nothing would ever stop it (the run trained on).
    from launch import stopping

    monkeypatch.setattr(stopping, "_received", [])
    done = threading.Event()
    thread = threading.Thread(target=done.wait, daemon=True)
    if other_thread:
        thread.start()  # its signals are not held: the kernel gives it the signal
    try:
        stopping.stop_main_process_on_signals()
        sup = Supervisor(_SignallingContext())
        finished = sup.ctx.Value("i", 0)
        with pytest.raises(KeyboardInterrupt):
            sup.start("worker", work_until_stopped, sup.stop_event, finished)
    finally:
        done.set()
    assert list(sup.procs) == ["worker"] and stopping.interrupted_status() == 129
    sup.stop(15.0)
    assert finished.value == 1 and not sup.procs["worker"].is_alive()


def test_a_crashed_child_stops_the_others_and_the_run_fails(capsys):
    ctx = mp.get_context("spawn")
    sup = Supervisor(ctx)
    finished = ctx.Value("i", 0)
    sup.start("worker", work_until_stopped, sup.stop_event, finished)
    sup.start("crasher", crash_after, 1.0)
    t0 = time.monotonic()
    code = sup.wait()
    assert code == EXIT_CRASHED
    assert time.monotonic() - t0 < 15
    assert not any(p.is_alive() for p in sup.procs.values())
    assert finished.value == 1  # the healthy child was asked to stop, not killed
    err = capsys.readouterr().err
    assert "process 'crasher' failed" in err and "the child broke on purpose" in err


@pytest.mark.parametrize("target, said", [
    (fail_half_way_through_a_message, None),  # reading the queue itself would wait for ever
    (send_an_unreadable_traceback, "could not be read"),
])
def test_a_traceback_half_sent_or_unreadable_holds_up_neither_the_failure_nor_the_others_stop(
        target, said, capsys):
    ctx = mp.get_context("spawn")
    sup = Supervisor(ctx)
    finished = ctx.Value("i", 0)
    sup.start("worker", work_until_stopped, sup.stop_event, finished)
    sup.start("bad", target, sup.errors)
    t0 = time.monotonic()
    assert sup.wait() == EXIT_CRASHED
    assert time.monotonic() - t0 < 15
    assert finished.value == 1 and not any(p.is_alive() for p in sup.procs.values())
    err = capsys.readouterr().err
    assert "process 'bad' failed (exit 1)" in err and (said is None or said in err)


def test_a_stop_signal_to_one_child_alone_stops_the_run_as_that_signal_not_as_finished():
    # e.g. `kill PID` of the process `ps` shows as a2c: every child saves and ends, and the run
    # ends with the signal's status (resumable, retried by a sweep), as when run.py gets it
    ctx = mp.get_context("spawn")
    sup = Supervisor(ctx)
    finished, started, also = ctx.Value("i", 0), ctx.Value("i", 0), ctx.Value("i", 0)
    sup.start("worker", work_until_stopped, sup.stop_event, finished, started)
    sup.start("signalled", work_until_stopped, sup.stop_event, also, started)
    deadline = time.monotonic() + 60
    while started.value < 2 and time.monotonic() < deadline:  # its handler is in place
        time.sleep(0.05)
    os.kill(sup.procs["signalled"].pid, signal.SIGTERM)
    assert sup.wait() == 128 + signal.SIGTERM
    assert finished.value == also.value == 1
    assert all(p.exitcode == 0 for p in sup.procs.values())


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_every_child_holds_the_run_directory_until_it_ends(method, tmp_path):
    """The main process killed outright drops its lock, while its children go on saving into
    the directory: a resume must not take the directory before they end."""
    from launch.rundir import RunDirLock, run_dir_holder

    lock = RunDirLock(tmp_path)
    ctx = mp.get_context(method)
    sup = Supervisor(ctx, lock.fileno())
    finished, started = ctx.Value("i", 0), ctx.Value("i", 0)
    sup.start("worker", work_until_stopped, sup.stop_event, finished, started)
    deadline = time.monotonic() + 60
    while started.value < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    lock.release()  # as the kernel does for a killed main process
    assert run_dir_holder(tmp_path) == f"pid {os.getpid()} on {socket.gethostname()}"
    sup.stop(15.0)
    assert finished.value == 1 and run_dir_holder(tmp_path) is None


def test_a_child_stuck_after_a_stop_signal_ends_itself_should_nobody_end_it():
    # its supervisor, which would end it after the grace, may have been killed outright
    ctx = mp.get_context("spawn")
    sup = Supervisor(ctx)
    started = ctx.Value("i", 0)
    sup.start("stuck", ignore_the_stop_with_a_short_orphan_wait, sup.stop_event, started)
    deadline = time.monotonic() + 60
    while started.value < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(sup.procs["stuck"].pid, signal.SIGTERM)
    sup.procs["stuck"].join(30)
    assert sup.procs["stuck"].exitcode == 128 + signal.SIGTERM


def test_a_child_stuck_after_the_stop_is_terminated_after_the_grace(capsys):
    ctx = mp.get_context("spawn")
    sup = Supervisor(ctx)
    finished, started = ctx.Value("i", 0), ctx.Value("i", 0)
    sup.start("worker", work_until_stopped, sup.stop_event, finished, started)
    sup.start("stuck", ignore_the_stop, sup.stop_event, started)
    # stop once both are up: a spawn slowed by a loaded machine must not eat the grace
    assert sup.wait(until=lambda: started.value == 2, grace_s=2.0) == 0
    assert not any(p.is_alive() for p in sup.procs.values())
    assert finished.value == 1
    assert "stopping stuck" in capsys.readouterr().err


@pytest.mark.parametrize("tty", [True, False])
def test_a_wait_whose_end_is_known_is_a_bar_on_a_terminal_and_a_line_in_a_log(tty, monkeypatch,
                                                                               capsys):
    import sys

    from launch.supervisor import Progress

    ctx = mp.get_context("spawn")
    sup = Supervisor(ctx)
    done = ctx.Value("i", 0)
    sup.start("counter", count_to, 8, done)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: tty)
    progress = Progress("labels", 8, "label", lambda: (done.value, "val acc 80%"))
    assert sup.wait(progress=progress) == 0
    err = capsys.readouterr().err
    if tty:  # tqdm's bar: count, total and the status beside it, its last count drawn
        assert "labels:" in err and "/8 [" in err and "val acc 80%" in err, err
        assert "8/8 [" in err, err
    else:  # a log gets the line every 30 s (here once, at the start) and one at the end
        lines = err.strip().splitlines()
        assert lines[0] == "labels 0/8 | val acc 80%" and len(lines) == 2, err
        assert lines[1].startswith("labels 8/8 | ") and lines[1].endswith(" | val acc 80%"), err


def test_a_resumed_runs_bar_starts_where_the_run_left_off():
    """Its rate counts only the steps of this start, not the jump to where it left off."""
    from launch.supervisor import Progress, _progress_bar

    bar = _progress_bar(Progress("agent steps", 20_000, "step", lambda: (15_000, "")))
    try:
        assert bar.n == bar.initial == 15_000
    finally:
        bar.close()


def test_a_logged_progress_line_gives_the_rate_since_the_line_before_and_the_time_left(
        monkeypatch):
    from launch import supervisor

    done, clock = [0], [100.0]
    monkeypatch.setattr(supervisor.time, "monotonic", lambda: clock[0])
    progress = supervisor.Progress("agent steps", 6000, "step", lambda: (done[0], "ep 3"))
    assert progress.line() == "agent steps 0/6,000 | ep 3"
    done[0], clock[0] = 3000, 130.0
    assert progress.line() == "agent steps 3,000/6,000 | 100 steps/s | 0 min 30 s left | ep 3"
    # The time left is at the mean rate of the last ten minutes: 4,500 steps in 60 s, 1,500 to go.
    done[0], clock[0] = 4500, 160.0
    assert progress.line() == "agent steps 4,500/6,000 | 50 steps/s | 0 min 20 s left | ep 3"
    done[0], clock[0] = 6000, 170.0
    assert progress.line() == "agent steps 6,000/6,000 | 150 steps/s | ep 3"
    # A run paused for an hour is slow in the line after it, not ten minutes later.
    progress = supervisor.Progress("agent steps", 1_000_000, "step", lambda: (done[0], ""))
    done[0], clock[0] = 0, 0.0
    progress.line()
    done[0], clock[0] = 1000, 3610.0  # 10 s of 100 steps/s after 3,600 s paused
    assert progress.line().endswith(" | 0.28 steps/s | 1001 h 46 min left")
    for k in range(1, 22):  # then 30 s lines at 100 steps/s
        done[0], clock[0] = 1000 + 3000 * k, 3610.0 + 30 * k
        last = progress.line()
    assert last == "agent steps 64,000/1,000,000 | 100 steps/s | 2 h 36 min left"


def test_the_trainer_starts_with_malloc_tunables_that_glibc_honours(tmp_path, monkeypatch):
    from runtime.process_setup import TRAINER_MALLOC_TUNABLES, trainer_malloc_environ

    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    ctx = mp.get_context("spawn")
    sup = Supervisor(ctx)
    sup.start("tuned", report_malloc, str(tmp_path / "tuned.json"),
              environ=trainer_malloc_environ())
    sup.start("plain", report_malloc, str(tmp_path / "plain.json"))
    assert sup.wait() == 0
    assert "GLIBC_TUNABLES" not in os.environ  # only the child had it
    tuned, plain = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("tuned", "plain"))
    assert tuned["tunables"] == TRAINER_MALLOC_TUNABLES and plain["tunables"] is None
    thp = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    if thp.is_file() and "[never]" not in thp.read_text():  # the kernel gives 2 MB pages
        assert tuned["huge_kb"] >= 32 * 1024, tuned  # most of the 64 MB block
        assert plain["huge_kb"] < tuned["huge_kb"], plain
    # A user's own tunables are left alone.
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.arena_max=1")
    assert trainer_malloc_environ() == {}

