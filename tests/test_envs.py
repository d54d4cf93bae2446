"""Environments: MovingDot's rules, Atari observations and the paper's blanking (App. A.2)."""
import gymnasium as gym
import numpy as np
import pytest

from envs import UnknownEnvError, env_kind, make_vec_env
from envs.scores import MOVING_DOT_RANDOM, MOVING_DOT_SCRIPTED
from envs.atari import SCORE_ROWS
from envs.moving_dot import CENTRE_Y, MovingDotVecEnv
from experiments.show_blanking import reward_lift


def test_moving_dot_rewards_closer_plus_one_farther_minus_one():
    env = gym.make("MovingDotNoFrameskip-v0").unwrapped
    env.reset(seed=0)
    env.xy = np.array([10, CENTRE_Y])  # left of the centre
    assert env.step(2)[1] == 1.0  # right: closer
    assert env.step(4)[1] == -1.0  # left: farther
    assert env.step(0)[1] == 0.0  # noop: equal
    env.xy = np.array([0, 0])
    assert env.step(4)[1] == 0.0  # clipped at the edge: did not move


def test_moving_dot_frame_has_one_white_4x4_dot():
    env = gym.make("MovingDotNoFrameskip-v0")
    frame, _ = env.reset(seed=3)
    assert frame.shape == (210, 160, 3) and frame.dtype == np.uint8
    ys, xs = np.nonzero(frame[..., 0])
    assert len(ys) == 16 and np.ptp(ys) == 3 and np.ptp(xs) == 3
    assert (frame[ys, xs] == 255).all()


def test_moving_dot_episode_is_1000_frames():
    env = gym.make("MovingDotNoFrameskip-v0")
    env.reset(seed=0)
    truncated = [env.step(0)[3] for _ in range(1000)]
    assert not any(truncated[:-1]) and truncated[-1]
    env4 = gym.make("MovingDot-v0")
    env4.reset(seed=0)
    truncated = [env4.step(0)[3] for _ in range(250)]
    assert not any(truncated[:-1]) and truncated[-1]


def test_moving_dot_vector_env_gives_uint8_stacks_and_ends_after_250_agent_steps():
    env = make_vec_env("MovingDotNoFrameskip-v0", 3, seed=0)
    obs = env.reset()
    assert obs.shape == (3, 4, 84, 84) and obs.dtype == np.uint8
    dones = []
    for _ in range(250):
        result = env.step(np.full(3, 2))
        dones.append(result.dones.copy())
    assert not np.any(dones[:-1]) and np.all(dones[-1])
    assert len(result.finished) == 3
    # After a step the newest frame shows the dot; consecutive stacks share three frames.
    r2 = env.step(np.zeros(3, dtype=np.int64))
    r3 = env.step(np.zeros(3, dtype=np.int64))
    assert np.array_equal(r3.obs[:, :3], r2.obs[:, 1:])
    assert r3.obs[:, -1].max() > 200


def test_moving_dot_vector_env_gives_the_raw_envs_frames_preprocessed_and_rewards_signed():
    """Each step of the vector env is four frames of the raw gymnasium env, preprocessed as
    ale-py does (the max of the last two, grey, area-resized to 84x84), up to rounding; and the
    sign of their summed reward."""
    from envs.moving_dot import MovingDotEnv

    def area_84(frame):  # exact: each pixel repeated to 420x3360, then 5x40 blocks averaged
        big = np.repeat(np.repeat(frame.astype(float), 2, 0), 21, 1)
        return big.reshape(84, 5, 84, 40).mean(axis=(1, 3))

    def preprocessed(frames):  # a white dot: every channel alike
        return np.rint(area_84(np.maximum(*(f[..., 0] for f in frames[-2:]))))

    vec = MovingDotVecEnv(1, seed=3)
    vec.reset()
    raw = MovingDotEnv()
    raw.reset(seed=0)
    actions = np.random.default_rng(0).integers(0, 5, 40)
    for action in actions:
        raw.xy = vec.xy[0].copy()
        frames, total = [], 0.0
        for _ in range(4):
            frame, reward, *_ = raw.step(int(action))
            frames.append(frame)
            total += reward
        result = vec.step(np.array([action]))
        assert np.abs(result.obs[0, -1].astype(int) - preprocessed(frames)).max() <= 1
        assert result.rewards[0] == np.sign(total)


def test_scripted_policy_beats_random_on_moving_dot():
    env = MovingDotVecEnv(32, seed=1)
    env.reset()
    scripted = [e.true_return for _ in range(250) for e in env.step(env.scripted_actions()).finished]
    rng = np.random.default_rng(0)
    rand = [e.true_return for _ in range(250) for e in env.step(rng.integers(0, 5, 32)).finished]
    # envs/scores.py's reference figures, within the spread of 32 episodes.
    assert abs(np.mean(scripted) - MOVING_DOT_SCRIPTED) < 4
    assert abs(np.mean(rand) - MOVING_DOT_RANDOM) < 4


@pytest.mark.parametrize("game,rows", sorted(SCORE_ROWS.items()))
def test_atari_observations_are_uint8_stacks_with_the_score_blanked(game, rows):
    env_id = "".join(w.capitalize() for w in game.split("_")) + "NoFrameskip-v4"
    env = make_vec_env(env_id, 2, seed=0, num_threads=1)
    env.reset()
    for _ in range(60):
        result = env.step(np.ones(2, dtype=np.int64))
    assert result.obs.shape == (2, 4, 84, 84) and result.obs.dtype == np.uint8
    assert (result.obs[:, :, rows[0]:rows[1], :] == 0).all()
    assert result.obs[:, :, 20:60, :].any()  # the playing field is still there
    assert result.rewards.dtype == np.float32
    env.close()


def test_the_blanking_check_finds_pongs_score_rows_and_not_its_playing_field():
    _, lift, events = reward_lift("pong", steps=600, n_envs=2, seed=0)
    assert events > 10  # a random player misses about every 40 steps
    # The score is drawn in rows 0-8 and redrawn at each point; below the serve (rows 14-21,
    # where the next ball appears after a point) the field's rows move with or without a point.
    assert lift[0:9].min() > 0.5
    assert lift[22:76].max() < 0.3


def test_rewards_are_the_games_own_points_unclipped():
    """Space Invaders' aliens are worth 5 to 30 points: clipped to [-1, 1] they would read 1."""
    env = make_vec_env("SpaceInvadersNoFrameskip-v4", 2, seed=0, num_threads=1)
    env.reset()
    rng = np.random.default_rng(0)
    rewards = np.concatenate([env.step(rng.integers(0, env.num_actions, 2)).rewards
                              for _ in range(300)])
    env.close()
    assert rewards.max() >= 5 and set(rewards[rewards != 0] % 5) == {0}


def test_pong_reports_its_score_at_episode_end():
    env = make_vec_env("PongNoFrameskip-v4", 4, seed=0, num_threads=1)
    env.reset()
    rng = np.random.default_rng(0)
    finished = []
    while not finished:
        finished = env.step(rng.integers(0, 6, 4)).finished
    # A random Pong player loses 21 points to at most a few.
    assert -21 <= finished[0].true_return <= -15
    assert finished[0].length > 500
    env.close()


def test_a_reset_without_a_seed_starts_new_episodes_not_the_first_ones_again():
    """run_checkpoint resets after an episode cut at --max_steps: a greedy policy must not play
    the same episode again. The first reset starts from the env's seed."""
    def after_steps(env) -> np.ndarray:
        rng = np.random.default_rng(0)
        for _ in range(40):
            obs = env.step(rng.integers(0, env.num_actions, 4)).obs
        return obs

    env = make_vec_env("BreakoutNoFrameskip-v4", 4, seed=3, num_threads=1)
    same = make_vec_env("BreakoutNoFrameskip-v4", 4, seed=3, num_threads=1)
    try:
        env.reset()
        same.reset(seed=3)
        first = after_steps(env)
        assert np.array_equal(first, after_steps(same))  # the env's seed, as given
        env.reset()
        assert not np.array_equal(after_steps(env), first)
    finally:
        env.close()
        same.close()


def test_life_loss_is_not_an_episode_end():
    env = make_vec_env("BreakoutNoFrameskip-v4", 1, seed=0, num_threads=1)
    env.reset()
    lengths = []
    for _ in range(5000):
        result = env.step(np.array([1]))  # fire, never move: loses all five lives
        if result.finished:
            lengths.append(result.finished[0].length)
            break
    # One episode spans all five lives; a life lost on its own would end after ~ 1/5 the steps.
    assert lengths and lengths[0] > 60  # measured: 117 steps; 20 with episodic life


def test_unknown_env_gives_one_line_naming_the_nearest_supported_ids():
    with pytest.raises(UnknownEnvError) as err:
        env_kind("Pongg-v4")
    msg = str(err.value)
    assert "\n" not in msg and "did you mean PongNoFrameskip-v4?" in msg
    assert "MovingDotNoFrameskip-v0" in msg and len(msg) < 300
    with pytest.raises(UnknownEnvError, match="unknown env 'Foo'; supported"):
        env_kind("Foo")
    assert env_kind("EnduroNoFrameskip-v4") == "atari"
    assert env_kind("MovingDot-v0") == "moving_dot"
