"""PreferenceVecEnv: the preference loop around another library's agent (gymnasium 1.x)."""
import re
import shutil
import subprocess
import sys
from pathlib import Path

import gymnasium
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

from envs.gym_vector import GymVectorEnv
from experiments.runlog import scalars
from launch.preference_env import PreferenceVecEnv, settings_argv

ROOT = Path(__file__).resolve().parent.parent
# The loop in miniature: a few labels, one pretraining epoch.
SMALL = dict(synthetic_prefs=True, n_initial_prefs=12, n_initial_epochs=1, max_clips=50)


def test_settings_are_run_py_flags_as_keywords():
    argv = settings_argv("PongNoFrameskip-v4", 8, dict(synthetic_prefs=True, batchnorm=False,
                                                       adaptive_l2=False, dropout=0.5, seed=3))
    assert argv == ["train_policy_with_preferences", "PongNoFrameskip-v4", "--n_envs", "8",
                    "--synthetic_prefs", "--no_batchnorm", "--no_adaptive_l2", "--dropout", "0.5",
                    "--seed", "3"]
    assert "--synthetic_prefs" not in settings_argv("PongNoFrameskip-v4", 8,
                                                    dict(synthetic_prefs=False))
    with pytest.raises(ValueError, match="unknown setting 'learning_rate'"):
        settings_argv("PongNoFrameskip-v4", 8, dict(learning_rate=1e-3))
    with pytest.raises(ValueError, match="n_envs=4 but the env has 8"):
        settings_argv("PongNoFrameskip-v4", 8, dict(n_envs=4))
    with pytest.raises(ValueError, match="batchnorm is True or False, got 'no'"):
        settings_argv("PongNoFrameskip-v4", 8, dict(batchnorm="no"))
    for own_reward in ("frozen_reward_predictor", "teacher_reward"):
        with pytest.raises(ValueError, match=f"{own_reward}: run.py's A2C alone"):
            settings_argv("EnduroNoFrameskip-v4", 8, {own_reward: True})


class _NextStepEnv(gymnasium.vector.VectorEnv):
    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP}

    def __init__(self, shape=(4, 84, 84)):
        self.num_envs = 2
        self.single_observation_space = gymnasium.spaces.Box(0, 255, shape, np.uint8)
        self.single_action_space = gymnasium.spaces.Discrete(3)


@pytest.mark.parametrize("env, message", [
    (_NextStepEnv(), "same step"),
    (_NextStepEnv((84, 84, 4)), r"uint8 \(4, 84, 84\)"),
])
def test_an_env_it_cannot_cut_clips_from_is_refused_in_one_line(env, message, tmp_path):
    with pytest.raises(ValueError, match=message):
        PreferenceVecEnv(env, "MovingDotNoFrameskip-v0", log_dir=str(tmp_path / "r"))
    assert not (tmp_path / "r").exists()


def test_a_single_env_is_refused_in_one_line(tmp_path):
    with pytest.raises(TypeError, match="wraps a vector env .* got TimeLimit"):
        PreferenceVecEnv(gymnasium.make("CartPole-v1"), "MovingDotNoFrameskip-v0",
                         log_dir=str(tmp_path / "r"))
    assert not (tmp_path / "r").exists()


def test_a_bad_setting_is_a_value_error_and_writes_nothing(tmp_path):
    env = GymVectorEnv("MovingDotNoFrameskip-v0", 2)
    with pytest.raises(ValueError, match="--max_clips must be at least 2"):
        PreferenceVecEnv(env, log_dir=str(tmp_path / "r"), max_clips=0)
    assert not (tmp_path / "r").exists()


def test_an_env_id_that_is_not_the_env_s_own_is_refused_and_writes_nothing(tmp_path):
    env = GymVectorEnv("MovingDotNoFrameskip-v0", 2)
    with pytest.raises(ValueError, match="env_id='PongNoFrameskip-v4' but the env is MovingDot"):
        PreferenceVecEnv(env, "PongNoFrameskip-v4", log_dir=str(tmp_path / "r"))
    with pytest.raises(TypeError, match="env_id is an env id"):
        PreferenceVecEnv(env, True, log_dir=str(tmp_path / "r"))  # type: ignore[arg-type]
    assert not (tmp_path / "r").exists()

    from launch.preference_env import _known  # an id of ours is checked; another's is named

    assert _known("MovingDot-v0") and not _known("ALE/Pong-v5")


def test_labellers_are_taken_as_a_list_of_names_too():
    from launch.preference_env import settings_argv

    assert settings_argv("MovingDot-v0", 2, {"labellers": ["ann", "bob"]})[-2:] == [
        "--labellers", "ann,bob"]


def test_gym_vector_env_reports_episodes_as_record_episode_statistics_does():
    env = GymVectorEnv("MovingDotNoFrameskip-v0", 3, seed=1)
    obs, _ = env.reset(seed=1)
    assert obs.shape == (3, 4, 84, 84) and obs.dtype == np.uint8
    total = np.zeros(3)
    for t in range(250):  # a MovingDot episode is 250 agent steps
        obs, rew, term, trunc, info = env.step(env.action_space.sample())
        total += rew
    # MovingDot's episodes end at a time limit: truncated, with the last observation kept.
    assert trunc.all() and not term.any() and info["_episode"].all()
    np.testing.assert_allclose(info["episode"]["r"], total)
    assert (info["episode"]["l"] == 250).all()
    assert info["_final_obs"].all() and info["final_obs"].shape == (3, 4, 84, 84)
    assert not np.array_equal(info["final_obs"], obs)  # obs is the new episode's first
    assert (obs[:, :3] == 0).all() and info["final_obs"][:, :3].any()
    env.close()


def test_a_game_over_is_terminated_and_its_last_observation_is_kept():
    env = GymVectorEnv("PongNoFrameskip-v4", 2, seed=0)
    env.reset(seed=0)
    for _ in range(3000):  # doing nothing, Pong is lost 21-0 in about 800 agent steps
        obs, rew, term, trunc, info = env.step(np.zeros(2, dtype=np.int64))
        if term.any():
            break
    assert term.any() and not trunc.any()
    assert info["_final_obs"].tolist() == term.tolist()
    last = info["final_obs"][term][0]
    assert last.shape == (4, 84, 84) and last.any() and not last[:, :9].any()  # score blanked
    env.close()


def test_the_vector_env_methods_a_library_may_call():
    env = GymVectorEnv("MovingDotNoFrameskip-v0", 3)
    assert env.render() is None
    env.reset(seed=0)
    frames = env.render()
    assert len(frames) == 3 and frames[0].shape == (84, 84, 3) and frames[0].dtype == np.uint8
    assert frames[0].any()  # the dot
    assert env.get_attr("num_actions") == (5, 5, 5)
    assert env.call("scripted_actions")[0].shape == (3,)
    assert env.get_attr("render_mode") == ("rgb_array",) * 3
    env.set_attr("frameskip", [2, 2, 2])
    assert env.get_attr("frameskip") == (2, 2, 2)
    with pytest.raises(ValueError, match="share their attributes"):
        env.set_attr("frameskip", [1, 2, 3])
    with pytest.raises(AttributeError, match="no attribute 'nonsense'"):
        env.get_attr("nonsense")
    env.close()


def test_the_wrapper_runs_the_loop_around_an_agent_and_saves_like_run_py(tmp_path, capsys):
    """Gathering, pretraining, then labels and predictor training while the caller steps; the
    rewards are r̂; the run directory has what run.py's has; close() prints the summary."""
    from pref_interface.store import PreferenceStore

    d = tmp_path / "run"
    env = PreferenceVecEnv(GymVectorEnv("MovingDotNoFrameskip-v0", 4), log_dir=str(d), **SMALL)
    obs, _ = env.reset(seed=0)
    rng = np.random.default_rng(0)
    rewards, true = [], []
    assert env.get_attr("num_actions") == (5,) * 4 and len(env.render()) == 4  # passed through
    try:
        for _ in range(1000):
            obs, r, term, trunc, info = env.step(rng.integers(0, 5, 4))
            rewards.append(r)
            true.append(info["true_reward"])
    finally:
        env.close()
    rewards, true = np.array(rewards), np.array(true)
    assert rewards.dtype == np.float32 and rewards.shape == (1000, 4)
    assert not np.array_equal(rewards, true) and rewards.std() > 0  # r̂, not the game's reward
    assert set(np.unique(true)) <= {-1.0, 0.0, 1.0}
    with PreferenceStore(str(d / "prefs.sqlite"), create=False) as store:
        assert len(store) > SMALL["n_initial_prefs"]  # labelled while the caller stepped
    assert (d / "reward_predictor" / "reward_predictor.pt").is_file()
    assert (d / "settings.json").is_file() and list((d / "tb").glob("events.out.tfevents.*"))
    # A2C's records of its steps: 4 envs' 250-step episodes, each with its true and r̂ sum
    episodes = scalars(d / "tb", "charts/episodic_return")
    assert len(episodes) == 16 and len(scalars(d / "tb", "charts/predicted_return")) == 16
    np.testing.assert_allclose(np.sort(episodes[:, 2]),
                               np.sort(true.reshape(4, 250, 4).sum(axis=1).ravel()))
    err = capsys.readouterr().err
    assert "run finished" in err and "agent steps    4,000" in err, err
    assert "resume:" not in err  # nothing to resume
    env.close()  # a second close does nothing
    for call in (lambda: env.step(np.zeros(4, np.int64)), env.reset):  # and the env is closed
        with pytest.raises(RuntimeError, match="closed, its run saved"):
            call()


def test_a_failure_in_the_callers_loop_is_summarised_and_a_resume_goes_on_counting(tmp_path,
                                                                                   capsys):
    """A failure in the caller's loop is the run's one error; the wrapped agent's steps,
    episodes and latest returns are saved with the run, so that a resume's label schedule,
    curves and summary go on from them; an unreadable record of them is one line."""
    import json

    from launch.rundir import AGENT_PROGRESS_FILE, COMMAND_FILE, run_dir_holder

    d = tmp_path / "r"
    env = PreferenceVecEnv(GymVectorEnv("MovingDotNoFrameskip-v0", 2), log_dir=str(d), **SMALL)
    env.reset(seed=0)
    with pytest.raises(ZeroDivisionError):
        try:
            for _ in range(302):  # a 250-step episode per env, 15 blocks and 2 steps more
                env.step(np.zeros(2, np.int64))
            1 / 0  # the caller's own bug
        finally:
            env.close()
    err = capsys.readouterr().err
    assert "run stopped: the caller's loop raised ZeroDivisionError" in err, err
    assert re.search(r"agent steps +604\n", err), err  # the steps of the block cut short count
    assert "resume:            PreferenceVecEnv(env, resume=" in err
    assert run_dir_holder(d) is None  # closed: a resume may take it, here too
    first = json.loads((d / AGENT_PROGRESS_FILE).read_text())
    assert first["agent_steps"] == 604 and first["episodes"] == 2
    assert len(first["recent_returns"]) == 2

    env = PreferenceVecEnv(GymVectorEnv("MovingDotNoFrameskip-v0", 2), resume=str(d),
                           watch_hint="play {run_dir}/mine.pt")  # a caller that saves its policy
    env.reset(seed=0)
    try:
        for _ in range(250):
            env.step(np.zeros(2, np.int64))
    finally:
        env.close()
    err = capsys.readouterr().err
    assert re.search(r"agent steps +1,104\n", err)
    assert f"watch the policy:  play {d}/mine.pt\n" in err and "resume:" not in err
    again = json.loads((d / AGENT_PROGRESS_FILE).read_text())
    assert again["agent_steps"] == 1104 and again["episodes"] == 4
    assert again["recent_returns"][:2] == first["recent_returns"]
    # the resumed start's episodes are recorded at its own steps, after the first start's
    steps = scalars(d / "tb", "charts/episodic_return")[:, 1]
    assert len(steps) == 4 and (steps[:2] <= 604).all() and (steps[2:] > 604).all()
    (d / AGENT_PROGRESS_FILE).write_text("{not json")
    commands = (d / COMMAND_FILE).read_text()
    with pytest.raises(ValueError, match=AGENT_PROGRESS_FILE) as e:
        PreferenceVecEnv(GymVectorEnv("MovingDotNoFrameskip-v0", 2), resume=str(d))
    assert "\n" not in str(e.value) and (d / COMMAND_FILE).read_text() == commands  # not started


def test_a_caller_that_saves_its_model_alone_says_when_the_progress_is_saved(tmp_path,
                                                                           monkeypatch):
    """Once the caller saves the progress with its model, the wrapper no longer saves it on its
    own (every minute, at close): after a crash both resume from the caller's last save."""
    import json

    from launch import preference_env
    from launch.rundir import AGENT_PROGRESS_FILE

    monkeypatch.setattr(preference_env, "SAVE_EVERY_S", 0.0)  # else after every block
    d = tmp_path / "r"
    env = PreferenceVecEnv(GymVectorEnv("MovingDotNoFrameskip-v0", 2), log_dir=str(d), **SMALL)
    env.reset(seed=0)
    try:
        for _ in range(20):
            env.step(np.zeros(2, np.int64))
        assert json.loads((d / AGENT_PROGRESS_FILE).read_text())["agent_steps"] == 40  # its own
        for _ in range(30):
            env.step(np.zeros(2, np.int64))
        env.save_progress()  # with the caller's model, at 100 agent steps
        for _ in range(40):
            env.step(np.zeros(2, np.int64))
    finally:
        env.close()
    assert json.loads((d / AGENT_PROGRESS_FILE).read_text())["agent_steps"] == 100


def test_a_run_of_run_pys_a2c_is_not_resumed_through_the_wrapper(tmp_path):
    """Its steps are in its policy checkpoints, which the wrapper does not read: it would count
    from 0 and write its curves over A2C's."""
    run = tmp_path / "run"
    shutil.copytree(ROOT / "tests" / "fixtures" / "run_29d3a96", run)  # A2C's, at 4,000 steps
    with pytest.raises(ValueError, match=r"run.py's A2C.*python run.py --resume") as e:
        PreferenceVecEnv(GymVectorEnv("MovingDotNoFrameskip-v0", 2), resume=str(run),
                         million_timesteps=0.01)
    assert "\n" not in str(e.value)


def _resize_84(frame: np.ndarray) -> np.ndarray:
    rows = np.arange(84) * frame.shape[0] // 84  # nearest neighbour, in numpy
    cols = np.arange(84) * frame.shape[1] // 84
    return frame[rows][:, cols]


def test_the_wrapper_works_around_a_plain_gymnasium_atari_env(tmp_path):
    """`gymnasium.make_vec` Pong with gymnasium's own frame skip, max-pool and frame stack (its
    AtariPreprocessing needs OpenCV, which we do not install): the id comes from the env's spec,
    clips are cut from its frames and labelled, and `call` reaches its sub-envs."""
    import ale_py
    from gymnasium.wrappers import (FrameStackObservation, MaxAndSkipObservation,
                                    TransformObservation)

    from pref_interface.store import PreferenceStore

    gymnasium.register_envs(ale_py)
    small = gymnasium.spaces.Box(0, 255, (84, 84), np.uint8)
    vec = gymnasium.make_vec(
        "PongNoFrameskip-v4", num_envs=2, vectorization_mode="sync",
        obs_type="grayscale",
        wrappers=[lambda e: MaxAndSkipObservation(e, skip=4),
                  lambda e: TransformObservation(e, _resize_84, small),
                  lambda e: FrameStackObservation(e, 4)],
        vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP})
    d = tmp_path / "run"
    env = PreferenceVecEnv(vec, log_dir=str(d), **SMALL)
    env.reset(seed=0)
    rewards = []
    try:
        assert len(env.call("get_action_meanings")) == 2  # one answer per sub-env
        for _ in range(400):
            _, r, _, _, info = env.step(np.zeros(2, dtype=np.int64))
            rewards.append(r)
    finally:
        env.close()
    assert np.array(rewards).std() > 0 and info["true_reward"].shape == (2,)
    with PreferenceStore(str(d / "prefs.sqlite"), create=False) as store:
        assert len(store) >= SMALL["n_initial_prefs"]
    assert "PongNoFrameskip-v4" in (d / "settings.json").read_text()


@pytest.mark.slow  # 47 s a start, mostly start-up; the default suite drives the same loop
@pytest.mark.timeout(900)
def test_stable_baselines3_ppo_trains_through_the_wrapper_and_resumes(tmp_path):
    """The example script, briefly: PPO steps, learns on r̂ and saves its model; resumed, it goes
    on from the model, and the run's agent steps go on counting."""
    import json

    from stable_baselines3 import PPO

    from launch.rundir import AGENT_PROGRESS_FILE

    d = tmp_path / "ppo"

    def ppo(*flags: str) -> subprocess.CompletedProcess:
        r = subprocess.run([sys.executable, "-m", "examples.ppo", *flags], cwd=ROOT,
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-3000:]
        return r

    r = ppo("MovingDotNoFrameskip-v0", "--synthetic_prefs", "--log_dir", str(d),
            "--million_timesteps", "0.002", "--n_envs", "4", "--n_initial_prefs", "12",
            "--n_initial_epochs", "1")
    assert (d / "ppo.zip").is_file() and "run finished" in r.stderr
    first = PPO.load(d / "ppo.zip").num_timesteps
    assert first >= 2000
    ppo("--resume", str(d), "--million_timesteps", "0.004")
    assert PPO.load(d / "ppo.zip").num_timesteps >= 4000 > first
    assert json.loads((d / AGENT_PROGRESS_FILE).read_text())["agent_steps"] >= 4000


@pytest.mark.parametrize("flags, words", [
    (["MovingDot-v9"], "unknown env 'MovingDot-v9'"),
    (["--n_envs", "0"], "--n_envs must be positive"),
    (["--synthetic_prefs", "--teacher", "oracel"], "unknown teacher 'oracel'"),
])
def test_the_ppo_examples_bad_flags_are_one_line_before_any_env_starts(flags, words, tmp_path,
                                                                        capsys):
    from examples.ppo import wrapper_settings

    with pytest.raises(SystemExit) as stop:
        wrapper_settings([*flags, "--log_dir", str(tmp_path / "x")])
    assert stop.value.code == 2
    message = capsys.readouterr().err.strip()
    assert message.startswith("python -m examples.ppo: error: ") and words in message and "\n" not in message
    assert not (tmp_path / "x").exists()


def test_ppos_atari_network_becomes_our_policy_weights_file_with_the_same_logits(tmp_path):
    """`examples.ppo.policy_weights`: SB3's CnnPolicy renamed into our Nature CNN, so that the
    evaluator plays PPO's policy: the same logits and values on the same frames."""
    import gymnasium
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import DummyVecEnv

    from a2c.checkpoint import load_policy_weights, save_policy_weights
    from a2c.policies import make_policy
    from examples.ppo import policy_weights

    class Frames(gymnasium.Env):
        observation_space = gymnasium.spaces.Box(0, 255, (4, 84, 84), np.uint8)
        action_space = gymnasium.spaces.Discrete(9)

        def reset(self, seed=None, options=None):
            return self.observation_space.sample(), {}

        def step(self, action):
            return self.observation_space.sample(), 0.0, False, False, {}

    model = PPO("CnnPolicy", DummyVecEnv([Frames]), n_steps=8, batch_size=8, seed=0)
    save_policy_weights(tmp_path / "p.pt", policy_weights(model))
    ours = make_policy("atari", 9)
    ours.load_state_dict(load_policy_weights(tmp_path / "p.pt")["policy"])
    obs = torch.from_numpy(np.random.default_rng(0).integers(0, 256, (5, 4, 84, 84), np.uint8))
    with torch.no_grad():
        logits, value = ours(obs)
        theirs = model.policy.get_distribution(obs.float()).distribution.logits
        their_value = model.policy.predict_values(obs.float()).squeeze(-1)
    torch.testing.assert_close(torch.log_softmax(logits, -1), theirs, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(value, their_value, atol=1e-5, rtol=1e-5)


@pytest.mark.slow
@pytest.mark.timeout(3700)
def test_ppo_learns_moving_dot_from_preferences_through_the_wrapper(tmp_path):
    """The mean true return of PPO's last 64 episodes gets 10 above random play's, as in
    tests/test_learning.py for our A2C."""
    from experiments.learning_reliability import LEARNED_LEVEL
    from experiments.time_to_level import run_until_level

    d = tmp_path / "ppo"
    result = run_until_level(["-m", "examples.ppo", "--synthetic_prefs", "--log_dir", str(d),
                              "--million_timesteps", "0.3"], d, LEARNED_LEVEL)
    assert result["reached"], result


def test_the_ppo_example_resuming_a_run_at_its_target_says_so_in_one_line(tmp_path, capsys):
    from examples.ppo import wrapper_settings

    import json
    import zipfile

    run = tmp_path / "run"
    shutil.copytree(ROOT / "tests" / "fixtures" / "run_29d3a96", run)  # A2C's, at its 4,000 steps
    with pytest.raises(SystemExit) as stop:
        wrapper_settings(["--resume", str(run)])
    message = capsys.readouterr().err.strip()
    assert stop.value.code == 0 and "nothing to do" in message and "\n" not in message, message
    # PPO's own run: its steps are in its model, its policy folder holds no A2C checkpoint
    shutil.rmtree(run / "policy")
    with zipfile.ZipFile(run / "ppo.zip", "w") as z:
        z.writestr("data", json.dumps({"num_timesteps": 4096}))
    with pytest.raises(SystemExit) as stop:
        wrapper_settings(["--resume", str(run)])
    assert stop.value.code == 0 and "is at 4,096 agent steps" in capsys.readouterr().err
    assert wrapper_settings(["--resume", str(run), "--million_timesteps", "0.01"])[0] == (
        "MovingDotNoFrameskip-v0")  # a larger target goes on
