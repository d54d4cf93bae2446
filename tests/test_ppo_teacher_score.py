"""PPO on an Enduro teacher's own score: the reward it sees, a short run, and going on after it."""
import json
import re

import gymnasium
import numpy as np
import pytest

from clips.clip import STACK
from launch.rundir import PPO_POLICY_FILE
from experiments import ppo_teacher_score as pts
from pref_interface.labellers.alongside import SHARE_EVERY
from tests.test_teachers import enduro_frame

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


class ScriptedEnduro(gymnasium.vector.VectorEnv):
    """Two envs whose frames, game rewards and episode ends are given per step."""

    def __init__(self, level: list[list[bool]], game: np.ndarray, ends: np.ndarray) -> None:
        beside, alone = enduro_frame(cars=((62, 57, 5, 8, 100),)), enduro_frame()
        self.frames = [np.stack([np.stack([beside if lv else alone] * STACK) for lv in row])
                       for row in level]
        self.game, self.ends, self.t = game, ends, 0
        self.num_envs = 2
        self.single_observation_space = gymnasium.spaces.Box(0, 255, (STACK, 84, 84), np.uint8)
        self.observation_space = gymnasium.vector.utils.batch_space(
            self.single_observation_space, 2)
        self.single_action_space = gymnasium.spaces.Discrete(9)
        self.action_space = gymnasium.vector.utils.batch_space(self.single_action_space, 2)

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return self.frames[0], {}

    def step(self, actions):
        t, self.t = self.t, self.t + 1
        return self.frames[t], self.game[t], self.ends[t], np.zeros(2, bool), {}


def test_each_ended_episode_gives_its_level_share_game_score_and_teacher_score():
    # Ten steps, one in SHARE_EVERY (8) read: steps 0 and 8. Env 0 is level on step 0 only and
    # ends on step 8; env 1 is level throughout, scores on steps 3 and 4 and ends on step 9.
    # The near teacher scores a level step 2 (1, plus nearness 1) and a road with no car 0.
    assert SHARE_EVERY == 8
    level = [[t == 0, True] for t in range(10)]
    game = np.zeros((10, 2), np.float32)
    game[3, 1] = game[4, 1] = 1
    ends = np.zeros((10, 2), bool)
    ends[8, 0] = ends[9, 1] = True
    env = pts.TeacherScore(ScriptedEnduro(level, game, ends), "alongside_near", 0.05)
    env.reset()
    for t in range(10):
        env.step(np.zeros(2, np.int64))
        if t == 8:
            assert env.take_ended() == [pytest.approx((0.5, 0.0, 2 / 9))]
    assert env.take_ended() == [pytest.approx((1.0, 2.0, 2.0))] and env.take_ended() == []


def test_a_short_run_saves_its_policy_and_goes_on_from_it(tmp_path, capsys):
    from a2c.checkpoint import check_fits, load_policy_weights

    out = tmp_path / "run"
    args = ["--out", str(out), "--n_envs", "2", "--torch_threads", "1"]
    assert pts.main(args + ["--million_timesteps", "0.0003"]) == 0
    assert (out / pts.MODEL_FILE).is_file()
    # PPO's network as our policy weights file, which the evaluator and run_checkpoint.py play
    policy = out / PPO_POLICY_FILE
    check_fits(pts.ENV_ID, load_policy_weights(policy), policy)
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
