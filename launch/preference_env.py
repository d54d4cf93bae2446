"""The preference loop around any agent: a gymnasium 1.x vector-env wrapper.

    env = PreferenceVecEnv(GymVectorEnv("MovingDotNoFrameskip-v0", 16), synthetic_prefs=True)
    ...train on env with any library: its rewards are the predictor's r̂...
    env.close()

It runs what `run.py train_policy_with_preferences` runs, with the caller's training loop in the
place of our A2C process: the same gathering and pretraining phases first (our untrained policy
acts, as in run.py), then the predictor's trainer and labelling as processes
(launch/loop.py's PreferenceLoop), the same run directory, label store, checkpoints,
TensorBoard logs and settings. Settings are run.py's flags as keywords (`n_initial_prefs=200`,
`batchnorm=False`, `resume="runs/x"`); an environment's own settings apply as in run.py.

The wrapped env must give uint8 (N, 4, 84, 84) frame stacks, Discrete actions and same-step
autoreset. The script that builds the wrapper needs an `if __name__ == "__main__":` guard: the
processes start from a fresh interpreter or a fork server, and import the script's module.
"""
from __future__ import annotations

import atexit
import shlex
import sys
import time
from typing import Any

import gymnasium
import numpy as np
from gymnasium.vector import AutoresetMode

from a2c.config import A2CConfig, checkpoints
from a2c.loop_side import LoopSide
from a2c.rollout import Rollout, TrainReturns
from envs import UnknownEnvError, env_kind, same_game
from envs.vec_env import EpisodeRecord, EpisodeTracker
from launch.cli import UsageError, parse_args
from launch.loop import PreferenceLoop
from launch.phases import prepare_predictor
from launch.rundir import POLICY_DIR, PREFS_FILE, load_agent_progress, save_agent_progress
from launch.session import open_labelling_page, start_run
from launch.settings import keyword_flags
from launch.stopping import (EXIT_INTERRUPTED, exit_on_stop_signals, forget_signals,
                             interrupted_status, signal_received, stop_main_process_on_signals)

STATUS_EVERY_S = 30.0  # a status line on stderr this often (the caller's own logs go on)
# The scalars, and steps/s, over at least this long: a library may pause stepping for seconds to
# learn (PPO's epochs), and a window that spans its pauses gives its real rate.
RATE_EVERY_S = 10.0
SAVE_EVERY_S = 60.0  # the agent's progress (steps, episodes) is saved this often, and at close


class PreferenceVecEnv(gymnasium.vector.VectorWrapper):
    """Rewards become r̂, the reward predictor's; the game's own reward is in
    `info["true_reward"]` (N,). Clips are cut from the observations that pass through and
    labelled (by a person or `synthetic_prefs=True`) while the predictor trains on the labels.
    `close()` stops the processes (they save their work) and prints the run's summary."""

    def __init__(self, env: gymnasium.vector.VectorEnv, env_id: str | None = None, *,
                 resume_hint: str | None = None, watch_hint: str | None = None,
                 **settings: Any) -> None:
        """`settings`: run.py's flags as keywords. `resume_hint`, `watch_hint`: the summary's
        lines on how to go on with the run and how to watch the caller's policy, for a script
        with its own --resume or a saved policy, `{run_dir}` in them standing for the run
        directory (default: this constructor's resume, no watch line)."""
        if not isinstance(env, gymnasium.vector.VectorEnv):
            raise TypeError(f"PreferenceVecEnv: wraps a vector env (GymVectorEnv(env_id, n) or "
                            f"gymnasium.make_vec), got {type(env).__name__}")
        super().__init__(env)
        spec = getattr(env, "spec", None)  # gymnasium.make_vec's envs carry their id there
        own = getattr(env, "env_id", None) or getattr(spec, "id", None)
        if env_id is not None and not isinstance(env_id, str):
            raise TypeError(f"PreferenceVecEnv: env_id is an env id such as "
                            f"'PongNoFrameskip-v4', got {env_id!r}")
        if env_id is not None and own is not None and _known(own) and not same_game(env_id, own):
            raise ValueError(f"PreferenceVecEnv: env_id={env_id!r} but the env is {own}")
        env_id = env_id or own
        if env_id is None:
            raise ValueError("PreferenceVecEnv: give env_id (it picks the reward predictor's net "
                             "and the environment's settings)")
        _check_env(env)
        try:
            run = parse_args(settings_argv(env_id, env.num_envs, settings))
            # A resumed run goes on counting: its label schedule, curves and summary continue.
            done = load_agent_progress(run.dir)
            if run.resumed and not done and checkpoints(run.dir / POLICY_DIR):
                raise UsageError(f"{run.dir} is a run of run.py's A2C (its policy checkpoints, no "
                                 f"wrapper's agent progress): resume it with python run.py "
                                 f"--resume {run.dir}")
            page = open_labelling_page(run)
            ctx, self._session, self._report = start_run(run, page)
        except UsageError as e:
            raise ValueError(f"PreferenceVecEnv: {e}") from None
        self._closed, self._exit_status, self._how = False, 0, None
        self._caller_saves = False  # the caller saves the progress with its model (`save_progress`)
        forget_signals()  # an earlier run's stop in this script does not stop this one
        # Unless the caller handles them itself, Ctrl-C, SIGTERM and SIGHUP stop gathering and
        # pretraining as they stop run.py; the script's exit then closes this env (atexit below).
        stop_main_process_on_signals(only_default=True)
        self.run_dir = run.dir
        here = shlex.quote(str(run.dir))
        self._resume_hint = (resume_hint.format(run_dir=here) if resume_hint else
                             f"PreferenceVecEnv(env, resume={str(run.dir)!r}) (labels and predictor)")
        self._watch_hint = watch_hint.format(run_dir=here) if watch_hint else None
        self.settings = run.settings  # the run's settings: the given, the env's own, the defaults
        try:
            code, prefs_path, predictor_path = prepare_predictor(run, ctx, self._session,
                                                                 self._report)
        except KeyboardInterrupt:  # between two phases
            code, prefs_path = interrupted_status(), None
        if code or prefs_path is None:
            self._session.close()
            if code > 128:  # stopped by Ctrl-C or a stop signal: the caller's loop never ran
                print(self._summary(code, trained=False), file=sys.stderr)
                if code != EXIT_INTERRUPTED:  # SIGTERM, SIGHUP: the script ends as run.py does
                    raise SystemExit(code)
                raise KeyboardInterrupt
            raise RuntimeError(f"PreferenceVecEnv: gathering or pretraining ended with status "
                               f"{code} (its output is above); the run is in {self.run_dir}")
        self._loop = PreferenceLoop(run, ctx, self._session, prefs_path, predictor_path)
        self._loop.ch.start_episode_viewer(self._loop.sup)  # with render_episodes=True
        self._report.agent_stats = self._loop.agent_stats
        atexit.register(self.close)  # children must not outlive a script that forgot close()
        # In the caller's loop SIGTERM and SIGHUP end the script as they end run.py (status 143,
        # 129, no traceback); Ctrl-C stays a KeyboardInterrupt there.
        exit_on_stop_signals()
        n = env.num_envs
        self._reward = self._loop.reward_fn()
        steps = done.get("agent_steps", 0)
        # The agent's side of the loop, as A2C's process has it: pace, clip source, records.
        self._side = LoopSide(str(self.run_dir / "tb"), every_s=RATE_EVERY_S,
                              purge_step=steps if run.resumed else None, timesteps=steps,
                              stats=self._loop.agent_stats,
                              observers=self._loop.observers(n) if self._loop.observers else [],
                              pace=self._loop.pace(), predicted=True,
                              episodes=done.get("episodes", 0),
                              recent_returns=done.get("recent_returns", ()))
        self._loop.agent_stats.timesteps.value = steps  # for the label schedule and status line
        self._episodes, self._train_returns = EpisodeTracker(n), TrainReturns(n)
        # One block of agent steps is handed over at a time, as one of A2C's rollouts.
        T = A2CConfig().n_steps
        self._obs = np.zeros((T + 1, n, 4, 84, 84), dtype=np.uint8)
        self._actions = np.zeros((T, n), dtype=np.int64)
        self._true_rewards = np.zeros((T, n), dtype=np.float32)
        self._rewards = np.zeros((T, n), dtype=np.float32)
        self._dones = np.zeros((T, n), dtype=bool)
        self._finished: list[EpisodeRecord] = []
        self._t = 0
        self._steps = steps
        self._last_status = self._last_save = time.monotonic()

    def reset(self, *, seed: int | list[int] | None = None,
              options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        self._check_open()
        obs, info = self.env.reset(seed=seed, options=options)
        self._record_partial_block()  # its steps count; its clips would run across the reset
        self._obs[0] = obs
        # Every env starts a new episode: the running ones end unrecorded.
        self._episodes, self._train_returns = EpisodeTracker(self.num_envs), TrainReturns(
            self.num_envs)
        return obs, info

    def step(self, actions: np.ndarray):
        self._check_open()
        if self._t == 0:
            self._between_blocks()
        t = self._t
        actions = np.asarray(actions, dtype=np.int64).reshape(self.num_envs)
        obs, true_rewards, terminated, truncated, info = self.env.step(actions)
        # r̂(o, a): the observation the action was taken on, and the action (App. A.2).
        rewards = self._reward(self._obs[t], actions).astype(np.float32)
        dones = np.logical_or(terminated, truncated)
        self._obs[t + 1], self._actions[t], self._rewards[t] = obs, actions, rewards
        self._true_rewards[t], self._dones[t] = true_rewards, dones
        self._finished += self._episodes(true_rewards, dones)
        self._steps += self.num_envs
        self._t += 1
        if self._t == len(self._actions):
            self._hand_over_block()
        info = dict(info)
        info["true_reward"] = np.asarray(true_rewards, dtype=np.float32)
        return obs, rewards, terminated, truncated, info

    # gymnasium's vector-env methods that a library may call, passed to the wrapped env.
    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        return self.env.call(name, *args, **kwargs)

    def get_attr(self, name: str) -> tuple[Any, ...]:
        return self.env.get_attr(name)

    def set_attr(self, name: str, values: Any) -> None:
        self.env.set_attr(name, values)

    def _block(self, steps: int) -> Rollout:
        """The block's first `steps` steps as a rollout, its ended episodes with their r̂ sums."""
        rollout = Rollout(self._obs[:steps + 1], self._actions[:steps],
                          self._true_rewards[:steps], self._rewards[:steps], self._dones[:steps],
                          self._finished)
        self._train_returns(rollout)
        self._finished, self._t = [], 0
        return rollout

    def _hand_over_block(self) -> None:
        """The finished block of steps goes to the clip cutter and the records, as A2C's
        rollouts do."""
        rollout = self._block(len(self._actions))
        self._side.observe(rollout)
        self._side.record(rollout, self._steps)
        self._obs[0] = self._obs[-1]
        if not self._caller_saves and time.monotonic() - self._last_save >= SAVE_EVERY_S:
            self._save_progress()

    def save_progress(self) -> None:
        """Save the agent steps, episodes and latest returns that a resume goes on from. By
        default the wrapper saves them every minute and at `close()`; a library that saves its
        own model calls this then, and from its first call on only it saves them, so that after
        a crash or a stop both resume from the same step."""
        self._caller_saves = True
        self._save_progress()

    def _save_progress(self) -> None:
        save_agent_progress(self.run_dir, self._steps, self._side.episodes,
                            list(self._side.recent_returns))
        self._last_save = time.monotonic()

    def _record_partial_block(self) -> None:
        """A block cut short (a reset, the end) is recorded, not cut into clips."""
        if self._t:
            self._side.record(self._block(self._t), self._steps)

    def _between_blocks(self) -> None:
        """Before each block: a child that failed ends the run; the predictor's pace may hold
        the agent back; the status line is updated."""
        if self._loop.sup.check() is not None:
            self._exit_status = 1
            self.close()
            raise RuntimeError("PreferenceVecEnv: a process of the preference loop failed "
                               "(its error is above)")
        if self._loop.sup.stop_event.is_set():  # a child alone had a stop signal: as run.py,
            self._exit_status = self._loop.sup.signalled_status() or EXIT_INTERRUPTED  # stop
            self.close()
            if self._exit_status != EXIT_INTERRUPTED:
                raise SystemExit(self._exit_status)
            raise KeyboardInterrupt
        self._side.wait(self._steps, self._loop.sup.stop_event)
        now = time.monotonic()
        if now - self._last_status >= STATUS_EVERY_S:
            self._last_status = now
            line = self._loop.status()
            if line:
                print(line, file=sys.stderr, flush=True)

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"PreferenceVecEnv: closed, its run saved (a new "
                               f"PreferenceVecEnv(env, resume={str(self.run_dir)!r}) goes on)")

    def close(self, **kwargs: Any) -> None:
        """Stop the trainer and labelling (the labels and the predictor are saved), print
        the run's summary, close the env."""
        if getattr(self, "_closed", True):
            return
        self._closed = True
        exit_on_stop_signals(False)
        try:
            self._record_partial_block()
        finally:
            try:
                self._side.close(self._steps)  # the clip source, then the scalars
            finally:
                if not self._caller_saves:  # else it stays at the caller's model's save
                    self._save_progress()
        self._loop.sup.stop()
        self._session.release_run_dir()  # every child has stopped: a resume may take it now
        self._loop.ch.reward_weights.remove_left_block()
        self._session.close()
        # what ends the caller's loop: closed from its `finally`, or at exit after it was unhandled
        ending = sys.exc_info()[1] or getattr(sys, "last_value", None)
        if not self._exit_status and signal_received():
            self._exit_status = interrupted_status()
        elif not self._exit_status and self._loop.sup.signalled_status():
            self._exit_status = self._loop.sup.signalled_status()
        elif not self._exit_status and isinstance(ending, KeyboardInterrupt):
            self._exit_status = EXIT_INTERRUPTED
        elif not self._exit_status and isinstance(ending, Exception):
            self._exit_status = 1
            self._how = f"stopped: the caller's loop raised {type(ending).__name__}"
        print(self._summary(self._exit_status, trained=True), file=sys.stderr)
        super().close(**kwargs)

    def _summary(self, exit_status: int, trained: bool) -> str:
        return self._report.summary(exit_status, self.run_dir / PREFS_FILE, trained=trained,
                                    watch_cmd=self._watch_hint if trained else None,
                                    resume_cmd=self._resume_hint if exit_status else None,
                                    how=self._how)


def _known(env_id: str) -> bool:
    """Whether an env's own id names a game of ours (else, e.g. "ALE/Pong-v5", the caller's
    env_id names it)."""
    try:
        env_kind(env_id)
    except UnknownEnvError:
        return False
    return True


def settings_argv(env_id: str, num_envs: int, settings: dict[str, Any]) -> list[str]:
    """run.py's command line for these keyword settings (ValueError for an unknown one, a
    boolean that cannot be set so, or n_envs that is not the env's)."""
    settings = {"n_envs": num_envs, **settings}
    if isinstance(settings.get("labellers"), (list, tuple)):  # the names, as --labellers takes them
        settings["labellers"] = ",".join(map(str, settings["labellers"]))
    own_reward = sorted(k for k in ("frozen_reward_predictor", "teacher_reward") if settings.get(k))
    if own_reward:  # the caller's agent learns from the wrapper's r̂, which these would replace
        raise ValueError(f"PreferenceVecEnv: {', '.join(own_reward)}: run.py's A2C alone on a "
                         "fixed reward; the wrapper trains the predictor beside your agent")
    if settings["n_envs"] != num_envs:
        raise ValueError(f"PreferenceVecEnv: n_envs={settings['n_envs']} but the env has "
                         f"{num_envs}")
    try:
        return ["train_policy_with_preferences", env_id, *keyword_flags(settings)]
    except ValueError as e:
        raise ValueError(f"PreferenceVecEnv: {e}") from None


def _check_env(env: gymnasium.vector.VectorEnv) -> None:
    space = env.single_observation_space
    if space.shape != (4, 84, 84) or space.dtype != np.uint8:
        raise ValueError(f"PreferenceVecEnv: observations must be uint8 (4, 84, 84) frame stacks, "
                         f"got {space.dtype} {space.shape}")
    if not isinstance(env.single_action_space, gymnasium.spaces.Discrete):
        raise ValueError("PreferenceVecEnv: actions must be Discrete")
    if env.metadata.get("autoreset_mode") != AutoresetMode.SAME_STEP:
        raise ValueError("PreferenceVecEnv: the env must reset in the same step as an episode "
                         "ends (autoreset_mode=AutoresetMode.SAME_STEP)")
