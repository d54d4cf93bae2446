"""Learning from preferences: MovingDot's true return rises well above a random policy's."""
import subprocess
import sys
from pathlib import Path


from a2c.checkpoint import load_policy
from a2c.policies import make_policy
from tests.test_a2c import evaluate

ROOT = Path(__file__).resolve().parent.parent
RANDOM_POLICY_RETURN = -2.5  # REFERENCE.md; the scripted go-to-centre policy gets ~21.8


def test_synthetic_preferences_teach_moving_dot_to_approach_the_centre(tmp_path):
    d = tmp_path / "run"
    r = subprocess.run(
        [sys.executable, "run.py", "train_policy_with_preferences", "MovingDotNoFrameskip-v0",
         "--synthetic_prefs", "--n_initial_prefs", "200", "--n_initial_epochs", "20",
         "--reward_predictor_learning_rate", "3e-3", "--million_timesteps", "0.3",
         "--lr_zero_million_timesteps", "0.3",
         "--log_dir", str(d)], cwd=ROOT, capture_output=True, text=True, timeout=400)
    assert r.returncode == 0, r.stderr
    policy = make_policy("moving_dot", 5)
    policy.load_state_dict(load_policy(d / "policy")["policy"])
    learned = evaluate(policy)
    # The concurrent loop's timing varies from machine to machine, and so does how far 0.3M steps
    # get: seeds 0-2 ended at +6.8, +18.1 and +13.5 here (mean of 64 episodes; the mean of 64
    # random episodes has a standard error of about 1.2). A broken loop stays near -2.5.
    assert learned > RANDOM_POLICY_RETURN + 4, learned
