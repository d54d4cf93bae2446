"""PPO on an Enduro teacher's own score: the reward it sees, a short run, and going on after it."""
import json
import re

import numpy as np
import pytest

from examples.ppo import POLICY_FILE
from experiments import ppo_teacher_score as pts

pytest.importorskip("stable_baselines3")


def test_the_reward_is_the_teachers_scaled_score_and_the_game_reward_moves_to_info():
    from envs.gym_vector import GymVectorEnv

    env = pts.TeacherScore(GymVectorEnv(pts.ENV_ID, 2, seed=0), "alongside_near", 0.05)
    try:
        env.reset(seed=0)
        rng = np.random.default_rng(0)
        rewards = []
        for _ in range(200):
            _, r, _, _, info = env.step(rng.integers(9, size=2))
            assert r.shape == (2,) and r.dtype == np.float32 and np.isfinite(r).all()
            assert info["true_reward"].shape == (2,)
            rewards.append(r)
        # Scaled as r̂ is: about mean 0, std reward_std over the steps seen.
        assert abs(np.mean(rewards)) < 0.03 and 0.02 < np.std(rewards) < 0.1
    finally:
        env.close()


def test_a_short_run_saves_its_policy_and_goes_on_from_it(tmp_path, capsys):
    from a2c.checkpoint import check_fits, load_policy_weights

    out = tmp_path / "run"
    args = ["--out", str(out), "--n_envs", "2", "--torch_threads", "1"]
    assert pts.main(args + ["--million_timesteps", "0.0003"]) == 0
    assert (out / pts.MODEL_FILE).is_file()
    # PPO's network as our policy weights file, which the evaluator and run_checkpoint.py play
    policy = out / POLICY_FILE
    check_fits(pts.ENV_ID, load_policy_weights(policy)["policy"], policy)
    saved = json.loads((out / pts.SETTINGS_FILE).read_text())
    assert saved["teacher"] == "alongside_near" and saved["n_envs"] == 2
    first = capsys.readouterr().out
    assert "from 0 to 300 agent steps" in first
    assert re.search(r"\n512 agent steps \| [\d,]+/s \| ", first)  # steps, their rate, episodes

    # The same --out goes on from the saved model, to the larger total given now.
    assert pts.main(["--out", str(out), "--million_timesteps", "0.0006"]) == 0
    again = capsys.readouterr().out
    assert "from 512 to 600 agent steps" in again  # PPO's rollouts: 2 envs x 128 steps

    # Another teacher's score is another run.
    with pytest.raises(SystemExit, match="alongside_near teacher's score"):
        pts.main(["--out", str(out), "--teacher", "alongside"])


def test_bad_numbers_are_one_line_errors(capsys):
    with pytest.raises(SystemExit):
        pts.main(["--out", "x", "--million_timesteps", "0"])
    assert "--million_timesteps must be positive" in capsys.readouterr().err
