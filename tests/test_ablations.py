"""The ablation benchmark: each setting is a trial run.py takes, each run's result is read from
its run directory once it has ended, and a run that fails to start says why instead of counting
as a seed that never reached the level."""
import json

import pytest

from experiments import ablations
from experiments.time_to_level import run_until_level
from experiments.sweep import check_command
from launch.cli import build_parser
from tests.test_sweep import fake_run


def test_every_setting_is_a_trial_run_py_accepts(tmp_path):
    trials = [ablations.trial(name, 0) for name in ablations.SETTINGS]
    check_command([*ablations.BASE, "--million_timesteps", "0.3"], tmp_path, trials)
    args = build_parser().parse_args(ablations.trial("adaptive L2", 0).argv(ablations.BASE,
                                                                          tmp_path / "d"))
    assert args.adaptive_l2  # the setting, not the baseline's --no_adaptive_l2


def test_each_ended_run_is_kept_and_not_run_again(tmp_path, monkeypatch):
    """Seed 0 of the baseline reaches 19.6, the ensemble of 1 ends without; the noise-free run
    has not ended (the sweep was stopped), so it has no row and is asked for again."""
    swept = []

    def fake_sweep(command, trials, storage, runs_dir, stop_at, **options):
        swept.append([t.name for t in trials])
        for t in trials:
            if not (runs_dir / t.name).exists():
                fake_run(runs_dir / t.name, {"baseline": [20.0] * 64,
                                             "ensemble of 1": [0.0, 1.0]}.get(t.setting, [0.0]),
                         ended=t.setting == "ensemble of 1")
        return 1

    monkeypatch.setattr(ablations, "OUT", tmp_path)
    monkeypatch.setattr(ablations, "run_sweep", fake_sweep)
    argv = ["--seeds", "0", "--settings", "baseline", "ensemble of 1", "no noise model",
            "--out", str(tmp_path / "ablations.png")]
    assert ablations.main(argv) == 1
    rows = json.loads((tmp_path / "results.json").read_text())
    assert [(r["setting"], r["reached"]) for r in rows] == [("baseline", True),
                                                            ("ensemble of 1", False)]
    assert rows[0]["reached"] and rows[0]["steps"] == 6400 and rows[0]["labels"] == 40
    assert (tmp_path / "ablations.png").stat().st_size > 0
    ablations.main(argv)
    assert swept == [["baseline-seed0", "ensemble_of_1-seed0", "no_noise_model-seed0"],
                     ["no_noise_model-seed0"]]


def test_a_run_that_fails_to_start_is_an_error_with_its_reason(tmp_path):
    with pytest.raises(RuntimeError, match="status 2: .*NoSuchGame"):
        run_until_level(["run.py", "train_policy_with_original_rewards", "NoSuchGame-v4",
                         "--log_dir", str(tmp_path / "run")], tmp_path / "run", 1.0, poll_s=0.1)
