"""A sweep on Ray Tune: its trials, its checks of bad input, a trial killed mid-run that comes
back from its own checkpoints, and the scripts' sweeps that stop each run at a level."""
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from experiments.runlog import level_reached
from experiments.sweep import SweepError, Trial, main, parse_grid, run_sweep, trials
from tests.helpers import wait_until

ROOT = Path(__file__).resolve().parent.parent
TINY = ["train_policy_with_preferences", "MovingDotNoFrameskip-v0", "--synthetic_prefs",
        "--n_initial_prefs", "40", "--n_initial_epochs", "2", "--n_envs", "4",
        "--ensemble_size", "2", "--policy_ckpt_interval", "25", "--policy_ckpts_kept", "0"]


def test_every_setting_of_the_grid_runs_with_every_seed():
    grid = parse_grid(["ent_coef=0.01,0.02", "predictor_pace_unit=member,ensemble"])
    runs = trials([0, 1], grid)
    assert len(runs) == 8 and len({t.name for t in runs}) == 8
    assert runs[0].name == "ent_coef=0.01-predictor_pace_unit=member-seed0"
    argv = runs[-1].argv(["train_policy_with_preferences", "PongNoFrameskip-v4"], Path("/s/x"))
    assert argv == ["train_policy_with_preferences", "PongNoFrameskip-v4", "--seed", "1",
                    "--ent_coef", "0.02", "--predictor_pace_unit", "ensemble",
                    "--log_dir", "/s/x"]


def test_an_on_off_setting_in_the_grid_becomes_its_flag_or_its_off_switch():
    on, off = trials([0], parse_grid(["revive_dead_policy=on,off"]))
    assert on.argv([], Path("d"))[2:4] == ["--revive_dead_policy", "--log_dir"]
    assert off.argv([], Path("d"))[2:4] == ["--no_revive_dead_policy", "--log_dir"]


def test_a_named_setting_names_its_run_and_replaces_the_commands_switch():
    """The ablations' "adaptive L2" against a baseline with --no_adaptive_l2: run.py refuses the
    two together, so the setting's switch replaces the command's."""
    t = Trial(2, setting="adaptive L2", setting_flags=("--adaptive_l2",))
    assert t.name == "adaptive_L2-seed2"
    assert t.argv(["train_policy_with_preferences", "MovingDotNoFrameskip-v0", "--no_adaptive_l2",
                   "--ent_coef", "0.01"], Path("d")) == [
        "train_policy_with_preferences", "MovingDotNoFrameskip-v0", "--ent_coef", "0.01",
        "--adaptive_l2", "--seed", "2", "--log_dir", "d"]


def test_a_trial_whose_run_exists_resumes_it_with_its_own_flags_again(tmp_path):
    t = Trial(0, setting="pairs-250",
              setting_flags=("--load_prefs_dir", "labels", "--million_timesteps", "2"))
    d = tmp_path / t.name
    assert t.run_argv(TINY, d)[-2:] == ["--log_dir", str(d)]
    d.mkdir()
    (d / "settings.json").write_text("{}")
    assert t.run_argv(TINY, d) == ["--resume", str(d), "--million_timesteps", "2", "--seed", "0"]


def fake_run(d: Path, returns: list[float], ended: bool = False, labels: float = 40.0) -> None:
    """A run directory as a MovingDot run leaves it: its settings, its start 100 s ago, one
    episode per 100 agent steps and, when `ended`, its last checkpoint at its agent steps."""
    from datetime import datetime, timedelta, timezone

    from runtime.scalars import ScalarWriter

    (d / "policy").mkdir(parents=True)
    (d / "settings.json").write_text(json.dumps({"million_timesteps": 0.001}))
    start = datetime.now(timezone.utc) - timedelta(seconds=100)
    (d / "machines.txt").write_text(start.strftime("%Y-%m-%dT%H:%M:%SZ") + "\tcpu\n")
    store = ScalarWriter(str(d / "tb" / "labels"))
    store.add_scalar("labels/total", labels, 0)
    store.close()
    a2c = ScalarWriter(str(d / "tb"))
    for k, value in enumerate(returns, 1):
        a2c.add_scalar("charts/SPS", 100.0, 100 * k)
        a2c.add_scalar("charts/episodic_return", value, 100 * k)
    a2c.close()
    if ended:
        (d / "policy" / "policy-000000001000.pt").touch()


def test_where_a_run_reached_its_level_is_read_from_its_directory(tmp_path):
    fake_run(tmp_path / "run", [0.0, 5.0, 5.0])
    r = level_reached(tmp_path / "run", 5.0, window=2)
    assert r["reached"] and r["steps"] == 300 and r["labels"] == 40
    assert 98 <= r["wall_s"] <= 102  # from the run's start: its labelling and pretraining too
    assert level_reached(tmp_path / "run", 10.0, window=2) is None  # neither there nor ended
    (tmp_path / "run" / "policy" / "policy-000000001000.pt").touch()
    r = level_reached(tmp_path / "run", 10.0, window=2)
    assert not r["reached"] and r["last_steps"] == 300 and r["last_return"] == 5.0
    assert level_reached(tmp_path / "none", 5.0) is None


def test_after_a_stop_the_driver_and_a_restarted_trial_wait_for_the_run_to_save(tmp_path,
                                                                                capsys):
    """A run still saving holds its directory: the driver waits for it (and says which it
    left, past its patience), and a trial started again waits before resuming it."""
    import io
    import threading

    from experiments.sweep import wait_for_saves
    from experiments.sweep_tune import _wait_for_earlier_process
    from launch.rundir import RunDirLock

    saving, idle = tmp_path / "saving", tmp_path / "idle"
    saving.mkdir(), idle.mkdir()
    held = RunDirLock(saving)
    threading.Timer(1.0, held.release).start()
    wait_for_saves([saving, idle], timeout_s=30)
    out = capsys.readouterr().out
    assert out.startswith("sweep: waiting for 1 run to save") and "still held" not in out, out
    held = RunDirLock(saving)
    wait_for_saves([saving], timeout_s=0.5)
    assert f"{saving} is still held by pid {os.getpid()}" in capsys.readouterr().out
    threading.Timer(1.0, held.release).start()
    console = io.StringIO()
    _wait_for_earlier_process(saving, console)
    assert console.getvalue().startswith(f"waiting for pid {os.getpid()} ")
    _wait_for_earlier_process(idle, console)  # nobody there: at once


def test_the_progress_line_counts_trials_stopped_by_the_sweeps_stop_apart_from_done():
    from types import SimpleNamespace

    from experiments.sweep_tune import status_line

    def trial(i, status, last=None):
        config = {"trial": {"seed": i, "flags": []}}
        return SimpleNamespace(trial_id=str(i), status=status, config=config, last_result=last)

    trials = [trial(0, "TERMINATED", {"exit_status": 0}), trial(1, "TERMINATED"),
              trial(2, "RUNNING"), trial(3, "PENDING"), trial(4, "ERROR"),
              trial(5, "TERMINATED", {"exit_status": 2})]  # refused: not retried
    latest = {"1": {"agent_steps": 2e5, "labels": 900, "return": -3.4},
              "2": {"agent_steps": 1.2e6, "labels": 900, "return": float("nan"),
                    "target_steps": 6e6, "steps_per_s": 400.0}}
    assert status_line(trials, latest) == ("sweep: 1 running, 1 queued, 1 done, 2 failed, "
                                           "1 stopped | seed2: 1.20M/6M steps, 900 labels, "
                                           "return -, 3 h 20 min left")
    latest["2"].update(target_steps=float("nan"), steps_per_s=float("nan"))  # not known yet
    assert status_line(trials, latest).endswith("| seed2: 1.20M steps, 900 labels, return -")
    assert "stopped" not in status_line(trials[:1], {})


@pytest.mark.parametrize("items,reason", [
    (["ent_coef"], "write NAME=VALUE"), (["ent_coef="], "write NAME=VALUE"),
    (["ent_coef=0.1,"], "write NAME=VALUE"), (["bogus=1"], "run.py has no flag --bogus"),
    (["seed=1,2"], "the sweep sets --seed itself"), (["log_dir=x"], "the sweep sets --log_dir"),
    (["lr=1e-3", "lr=2e-3"], "--lr is in the grid already"),
    (["synthetic_prefs=1,0"], "--synthetic_prefs is a switch")])
def test_a_bad_grid_is_refused(items, reason):
    with pytest.raises(SweepError, match=re.escape(reason)):
        parse_grid(items)


def test_a_grid_turns_a_switch_off_with_its_off_switch_or_by_leaving_it_out(tmp_path):
    from experiments.sweep import trials

    command = [*TINY, "--synthetic_prefs"]
    off, on = (t.argv(command, tmp_path) for t in trials([0], parse_grid(["synthetic_prefs=off,on"])))
    assert "--synthetic_prefs" not in off and "--no_synthetic_prefs" not in off
    assert on.count("--synthetic_prefs") >= 1
    adaptive = trials([0], parse_grid(["adaptive_l2=off"]))[0].argv(TINY, tmp_path)
    assert "--no_adaptive_l2" in adaptive  # a switch with its own off half says it


@pytest.mark.parametrize("sweep_flags, command, reason", [
    (["--grid", "bogus=1"], TINY, "run.py has no flag --bogus"),
    ([], [*TINY, "--seed", "3"], "--seed is set by the sweep"),  # the sweep sets the seed
    ([], [*TINY, "--n_envs", "-1"],  # run.py's own check, before anything starts
     "trial seed0: --n_envs must be positive"),
    ([], [], "give a run.py command line"),
    (["--cpus_per_trial", "100000"], TINY,  # more than this machine has: queued for ever
     "--cpus_per_trial 100000: this machine has"),
    (["--cpus_per_trial", "0"], TINY, "--cpus_per_trial must be positive"),
    (["--window", "0"], TINY, "--window must be at least 1"),
    (["--max_failures", "-5"], TINY, "--max_failures must be at least -1"),
])
def test_bad_input_is_one_line_and_status_2_with_nothing_written(tmp_path, capsys, sweep_flags,
                                                                 command, reason):
    storage = tmp_path / "sweep"
    code = main([*sweep_flags, "--storage", str(storage), "--", *command])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith("python -m experiments.sweep: error:"), err
    assert reason in err, err
    assert not storage.exists()


def test_a_sweep_is_continued_with_resume_not_started_twice(tmp_path, capsys):
    storage = tmp_path / "sweep"
    assert main(["--storage", str(storage), "--dry_run", "--", *TINY]) == 0
    assert not storage.exists()  # a dry run writes nothing
    storage.mkdir()
    (storage / "sweep.json").write_text("{}")
    assert main(["--storage", str(storage), "--", *TINY]) == 2
    assert "--resume" in capsys.readouterr().err
    assert main(["--resume", str(tmp_path / "none")]) == 2
    assert "no sweep there" in capsys.readouterr().err
    (tmp_path / "file").write_text("")
    assert main(["--resume", str(tmp_path / "file")]) == 2
    assert "a file, not a sweep's folder" in capsys.readouterr().err
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    for text in ("not json", "[]", '{"x": 1}'):  # a file cut short, or not a sweep's
        (damaged / "sweep.json").write_text(text)
        assert main(["--resume", str(damaged)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "sweep.json is damaged" in err, err
    # a resume runs the sweep as it was started: a new value is refused, not silently dropped,
    # also where it is the flag's default
    assert main(["--resume", str(storage), "--cpus_per_trial", "1", "--seeds", "4"]) == 2
    assert "leave out --seeds, --cpus_per_trial" in capsys.readouterr().err
    assert main(["--resume", str(storage), "--seeds", "0", "--window=10"]) == 2
    assert "leave out --seeds, --window" in capsys.readouterr().err
    assert main(["--resume", str(storage), "--progress_s", "5"]) == 2  # Tune keeps its own
    assert "leave out --progress_s" in capsys.readouterr().err
    # a file where the sweep's folder would go: one line, nothing written
    assert main(["--storage", str(tmp_path / "file"), "--", *TINY]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--storage {tmp_path / 'file'}" in err, err
    # a shortened flag is not taken for another (`--seed` is run.py's, not `--seeds`)
    with pytest.raises(SystemExit):
        main(["--seed", "1", "--storage", str(tmp_path / "s2"), "--dry_run", "--", *TINY])
    assert "unrecognized arguments: --seed" in capsys.readouterr().err


def test_a_sweep_stopped_before_any_run_began_reports_nothing(tmp_path, capsys):
    from experiments.sweep import SweepSpec, report

    (tmp_path / "runs").mkdir()
    report(SweepSpec(TINY, [0], [], 2.0, 0.0, -1), tmp_path)  # no runs yet: no table, no error
    assert capsys.readouterr().out == "" and not (tmp_path / "sweep.png").exists()


def _run_py_pid(run_dir: Path) -> int | None:
    out = subprocess.run(["pgrep", "-f", f"run.py .*{run_dir}"], capture_output=True, text=True)
    pids = [int(p) for p in out.stdout.split()]
    return min(pids) if pids else None


def _labels(run_dir: Path) -> int:
    from pref_interface.store import PreferenceStore

    with PreferenceStore(run_dir / "prefs.sqlite", create=False) as store:
        return len(store)


@pytest.mark.slow  # about a minute on 2 idle cores: Ray's start and two starts of a tiny run
def test_a_trial_killed_mid_run_comes_back_from_its_own_checkpoints(tmp_path):
    """SIGKILL to a trial's whole run (as when its node is lost): Tune starts the trial again,
    which resumes its run directory; no label is lost and the run ends at its target."""
    storage = tmp_path / "sweep"
    run_dir = storage / "runs" / "seed0"
    driver = subprocess.Popen(
        [sys.executable, "-m", "experiments.sweep", "--storage", str(storage),
         "--cpus_per_trial", "1", "--progress_s", "5", "--", *TINY,
         "--million_timesteps", "0.004"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_until(lambda: list((run_dir / "policy").glob("policy-*.pt")), 240,
                   "the trial's first policy checkpoint", poll_s=0.5)
        before = _labels(run_dir)
        pid = wait_until(lambda: _run_py_pid(run_dir), 10, "the trial's run.py", poll_s=0.5)
        os.killpg(pid, signal.SIGKILL)
        out, _ = driver.communicate(timeout=300)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode == 0, out
    assert "1 of 1 trials done" in out, out
    commands = (run_dir / "command.txt").read_text().splitlines()
    assert len(commands) >= 2 and "--resume" in commands[-1], commands
    assert _labels(run_dir) >= before
    newest = sorted((run_dir / "policy").glob("policy-*.pt"))[-1]
    assert newest.name == "policy-000000004000.pt"
    spec = json.loads((storage / "sweep.json").read_text())
    assert spec["seeds"] == [0] and spec["command"][-1] == "0.004"



@pytest.mark.slow  # two to three minutes on 2 cores
@pytest.mark.timeout(600)
def test_a_trial_whose_node_is_lost_goes_on_on_another_node(tmp_path):
    """A cluster of a head with no CPU and one worker node; once the trial has a checkpoint a
    second node joins and the first is removed: the trial ends on the second, from its own run
    directory (two starts recorded, the second a resume)."""
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    first = cluster.add_node(num_cpus=1)
    storage = tmp_path / "sweep"
    run_dir = storage / "runs" / "seed0"
    driver = subprocess.Popen(
        [sys.executable, "-m", "experiments.sweep", "--storage", str(storage), "--address",
         cluster.address, "--cpus_per_trial", "1", "--progress_s", "5", "--", *TINY,
         "--million_timesteps", "0.03"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_until(lambda: list((run_dir / "policy").glob("policy-*.pt")), 240,
                   "the trial's first policy checkpoint", poll_s=0.5)
        cluster.add_node(num_cpus=1)
        cluster.remove_node(first)
        out, _ = driver.communicate(timeout=300)
    finally:
        if driver.poll() is None:
            driver.kill()
        cluster.shutdown()
    assert driver.returncode == 0, out
    commands = (run_dir / "command.txt").read_text().splitlines()
    assert len(commands) == 2 and "--resume" in commands[1], commands
    assert sorted((run_dir / "policy").glob("policy-*.pt"))[-1].name == "policy-000000030000.pt"


@pytest.mark.slow  # two to three minutes on 2 cores
@pytest.mark.timeout(600)
def test_a_stopped_sweep_goes_on_with_resume_and_keeps_its_finished_trials(tmp_path):
    """Ctrl-C to the driver once the first trial has ended and the second has started; then
    `--resume STORAGE` ends the second from its own run directory and leaves the first alone."""
    storage = tmp_path / "sweep"
    runs = storage / "runs"
    command = [sys.executable, "-m", "experiments.sweep"]
    driver = subprocess.Popen(
        [*command, "--seeds", "0", "1", "--storage", str(storage), "--cpus_per_trial", "2",
         "--progress_s", "5", "--", *TINY, "--million_timesteps", "0.03"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_until(lambda: (runs / "seed0" / "policy" / "policy-000000030000.pt").exists()
                   and list((runs / "seed1" / "policy").glob("policy-*.pt")), 300,
                   "the first trial's end and the second's first checkpoint", poll_s=0.5)
        driver.send_signal(signal.SIGINT)
        out, _ = driver.communicate(timeout=120)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert not (runs / "seed1" / "policy" / "policy-000000030000.pt").exists(), out
    # the stopped run saved and printed its summary: its worker's end did not kill it outright
    assert "run stopped by" in (storage / "console" / "seed1.txt").read_text(), out
    assert driver.returncode == 130, out  # stopped by Ctrl-C, as run.py says it
    assert "1 done, 0 failed, 1 stopped" in out, out
    assert ("1 of 2 trials done, 1 not ended; continue them, each from its run directory, with: "
            f"python -m experiments.sweep --resume {storage}") in out, out
    assert "Tuner.restore" not in out, out  # Tune's own advice, for its API, is not shown
    r = subprocess.run([*command, "--resume", str(storage)], cwd=ROOT, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "2 of 2 trials done" in r.stdout, r.stdout
    assert len((runs / "seed0" / "command.txt").read_text().splitlines()) == 1
    second = (runs / "seed1" / "command.txt").read_text().splitlines()
    assert len(second) == 2 and "--resume" in second[1], second
    assert (runs / "seed1" / "policy" / "policy-000000030000.pt").exists()


@pytest.mark.slow  # about a minute on 2 cores: Ray's start twice and a tiny run
@pytest.mark.timeout(600)
def test_a_scripts_sweep_stops_a_run_at_its_level_and_does_not_start_it_again(tmp_path):
    """`run_sweep` as the scripts call it: a named setting's run, stopped once its first episode
    is in (a level every episode reaches), and left alone by the same sweep run again."""
    trial = Trial(0, setting="two members", setting_flags=("--ensemble_size", "2"))
    command = [*TINY[:TINY.index("--ensemble_size")], "--million_timesteps", "0.1"]
    run_dir = tmp_path / "two_members-seed0"
    for _ in range(2):
        assert run_sweep(command, [trial], tmp_path / "sweep", runs_dir=tmp_path,
                         cpus_per_trial=1, poll_s=1.0, progress_s=5, stop_at=(-1e6, 1)) == 0
        r = level_reached(run_dir, -1e6, window=1)
        assert r["reached"] and r["steps"] <= 2_000, r
        newest = sorted((run_dir / "policy").glob("policy-*.pt"))[-1]
        assert int(newest.stem.split("-")[1]) < 100_000  # stopped there, before its steps
    commands = (run_dir / "command.txt").read_text().splitlines()
    assert len(commands) == 1 and "--ensemble_size 2 --seed 0" in commands[0], commands
    assert (tmp_path / "sweep" / "console" / "two_members-seed0.txt").is_file()


def test_a_trial_asking_for_more_gpus_than_this_machine_has_is_refused(monkeypatch, tmp_path,
                                                                      capsys):
    import torch

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    assert main(["--gpus_per_trial", "1", "--storage", str(tmp_path / "s"), "--dry_run", "--",
                 *TINY]) == 2
    assert "this machine has 0 GPUs" in capsys.readouterr().err
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)  # the trials' lines name the GPU
    assert main(["--gpus_per_trial", "1", "--storage", str(tmp_path / "s"), "--dry_run", "--",
                 *TINY]) == 0
    assert capsys.readouterr().out.count("--device cuda --reward_predictor_device cuda") == 1


def test_a_script_running_a_sweep_names_itself_in_the_sweeps_errors(monkeypatch, tmp_path,
                                                                   capsys):
    import torch

    from experiments import milestone

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    assert milestone.main(["moving_dot", "--seeds", "0", "--runs_dir", str(tmp_path),
                           "--gpus_per_trial", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("python -m experiments.milestone: error: ") and "0 GPUs" in err, err
    assert err.count("\n") == 1, err
