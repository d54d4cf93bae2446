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
    # A broken loop stays near random play; a working one ends anywhere from about +1.5 to +24
    # (docs/experiments.md, "MovingDot's entropy bonus and fall-back").
    assert learned > MOVING_DOT_RANDOM + 4, learned
