"""Learning from preferences: MovingDot's true return rises far above random play's.

The README's first command, stopped as soon as the mean true return of its last 64 episodes is 10
above random play's (experiments/learning_reliability.py, which also runs the same check for many
seeds: docs/results.md has how often it passes). Seed 1 is one of the seeds that get there
soonest (docs/experiments.md, "The dot's position kept per clip"). Where a run ends varies more
(a run that learns can drift later); `python -m experiments.milestone moving_dot` reports that
across seeds."""
import json

import pytest

from experiments.learning_reliability import LEARNED_LEVEL, moving_dot_learns
from launch.rundir import epochs_pretrained


@pytest.mark.timeout(600)
def test_synthetic_preferences_teach_moving_dot_to_approach_the_centre(tmp_path):
    d = tmp_path / "run"
    result = moving_dot_learns(seed=1, run_dir=d)
    assert result["reached"], f"never reached {LEARNED_LEVEL}: {result}"
    # From nothing, the one mode gathered and pretrained first, each phase with its curves.
    epochs = json.loads((d / "settings.json").read_text())["n_initial_epochs"]
    assert epochs_pretrained(d) == epochs
    tags = {p.parent.name for p in d.glob("tb/**/events.out.tfevents.*")}
    assert {"tb", "gather", "pretrain", "reward_predictor", "labels"} <= tags
