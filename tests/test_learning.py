"""Learning from preferences: MovingDot's true return rises well above a random policy's.

Marked slow (not in the default suite; `pytest -m slow` runs it): the outcome of one run varies too
much for a pass/fail check. About one run in five ends near random play or below (docs/experiments.md,
"MovingDot's entropy bonus and fall-back"); `python -m experiments.milestone moving_dot` prints the
figures across seeds instead."""
import subprocess
import sys
from pathlib import Path

import pytest

from a2c.checkpoint import load_policy
from a2c.policies import make_policy
from envs.scores import MOVING_DOT_RANDOM
from experiments.milestone import MILESTONES
from tests.test_a2c import evaluate

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_synthetic_preferences_teach_moving_dot_to_approach_the_centre(tmp_path):
    d = tmp_path / "run"
    m = MILESTONES["moving_dot"]  # the milestone's (and the README's first command's) settings
    r = subprocess.run([sys.executable, "run.py", m.mode, m.env_id, *m.flags, "--log_dir", str(d)],
                       cwd=ROOT, capture_output=True, text=True, timeout=400)
    assert r.returncode == 0, r.stderr
    policy = make_policy("moving_dot", 5)
    policy.load_state_dict(load_policy(d / "policy")["policy"])
    learned = evaluate(policy)
    # The concurrent loop's timing varies from run to run, and so does where 0.3M steps end: seven
    # runs here (seeds 0-4, seed 0 three times) ended between +8.0 and +20.1 (mean of 64 episodes;
    # the mean of 64 random episodes has a standard error of about 1.2). A broken loop stays near
    # -2.5. With A2C's default --ent_coef 0.01 this failed on CI (-0.9), and seed 0 ended at +0.4,
    # +12.7 and +3.5 in three runs here. With 0.003 it also failed once in the full suite here
    # (value not kept), and the milestone's seed 1 ended at +1.5.
    assert learned > MOVING_DOT_RANDOM + 4, learned
