"""A sweep on Ray Tune: its trials, its checks of bad input, and a trial killed mid-run that comes
back from its own checkpoints."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from experiments.sweep import SweepError, main, parse_grid, trials

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


@pytest.mark.parametrize("item", ["ent_coef", "ent_coef=", "ent_coef=0.1,", "bogus=1",
                                  "seed=1,2", "log_dir=x"])
def test_a_bad_grid_is_refused(item):
    with pytest.raises(SweepError):
        parse_grid([item])


@pytest.mark.parametrize("sweep_flags, command", [
    (["--grid", "bogus=1"], TINY),
    ([], [*TINY, "--seed", "3"]),  # the sweep sets the seed
    ([], [*TINY, "--n_envs", "-1"]),  # run.py's own check, before anything starts
    ([], []),
])
def test_bad_input_is_one_line_and_status_2_with_nothing_written(tmp_path, capsys, sweep_flags,
                                                                 command):
    storage = tmp_path / "sweep"
    code = main([*sweep_flags, "--storage", str(storage), "--", *command])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith("experiments.sweep: error:"), err
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


def _wait_for(condition, timeout: float, what: str):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = condition()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


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
        _wait_for(lambda: list((run_dir / "policy").glob("policy-*.pt")), 240,
                  "the trial's first policy checkpoint")
        before = _labels(run_dir)
        pid = _wait_for(lambda: _run_py_pid(run_dir), 10, "the trial's run.py")
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
        _wait_for(lambda: list((run_dir / "policy").glob("policy-*.pt")), 240,
                  "the trial's first policy checkpoint")
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
        _wait_for(lambda: (runs / "seed0" / "policy" / "policy-000000030000.pt").exists()
                  and list((runs / "seed1" / "policy").glob("policy-*.pt")), 300,
                  "the first trial's end and the second's first checkpoint")
        driver.send_signal(signal.SIGINT)
        out, _ = driver.communicate(timeout=120)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert not (runs / "seed1" / "policy" / "policy-000000030000.pt").exists(), out
    r = subprocess.run([*command, "--resume", str(storage)], cwd=ROOT, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "2 of 2 trials done" in r.stdout, r.stdout
    assert len((runs / "seed0" / "command.txt").read_text().splitlines()) == 1
    second = (runs / "seed1" / "command.txt").read_text().splitlines()
    assert len(second) == 2 and "--resume" in second[1], second
    assert (runs / "seed1" / "policy" / "policy-000000030000.pt").exists()
