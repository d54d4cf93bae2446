"""The A2C process: collect rollouts, update, log, checkpoint, until enough timesteps or stop."""
from __future__ import annotations

import collections
import time
from typing import Any, Callable, Protocol

import numpy as np
import torch

from a2c.a2c import A2C
from a2c.config import A2CRunConfig, A2CStats
from a2c.checkpoint import load_policy, save_policy
from a2c.optim import load_state_keeping_settings
from a2c.policies import make_policy
from a2c.rollout import RewardFn, RolloutCollector, RolloutObserver
from runtime.precision import use_bf16
from runtime.scalars import ScalarWriter


class Pace(Protocol):
    """A hook that may hold A2C back before each rollout (the reward predictor's pace)."""

    def wait(self, agent_steps: int, stop_event: Any = None) -> float:
        """Block while A2C is ahead; the seconds waited."""

    def labels_per_step(self, agent_steps: int) -> float:
        """What is logged as charts/predictor_labels_per_step."""


def train_a2c(config: A2CRunConfig, *, log_dir: str, stats: A2CStats | None = None,
              make_reward_fn: Callable[[], RewardFn] | None = None,
              make_observers: Callable[[int], list[RolloutObserver]] | None = None,
              stop_event=None, make_pace: Callable[[], Pace] | None = None) -> int:
    """Train until `total_timesteps` agent steps (summed over envs); returns the steps reached.

    `make_reward_fn` builds, inside this process, the reward that replaces the env's;
    `make_observers(n_envs)` builds the rollout observers (e.g. the clip cutter);
    `make_pace` the reward predictor's pace, which may hold each rollout back until the predictor
    has trained enough.
    On KeyboardInterrupt or `stop_event` a final checkpoint is written before returning.
    """

    from envs import env_kind, make_vec_env

    torch.set_num_threads(config.torch_threads)
    torch.manual_seed(config.seed)
    c = config.a2c
    env = make_vec_env(config.env_id, c.n_envs, seed=config.seed, num_threads=config.env_threads)
    # On its device before the optimiser exists, so that loaded optimiser state follows it there.
    policy = make_policy(env_kind(config.env_id), env.num_actions).to(config.device)
    algo = A2C(policy, c)
    timesteps = updates = 0
    if config.load_ckpt_dir:
        state = load_policy(config.load_ckpt_dir)
        policy.load_state_dict(state["policy"])
        load_state_keeping_settings(algo.optimizer, state["optimizer"])
        timesteps, updates = state["timesteps"], state["updates"]
    reward_fn = make_reward_fn() if make_reward_fn else None
    pace = make_pace() if make_pace else None
    start_timesteps, waited = timesteps, 0.0
    observers = make_observers(c.n_envs) if make_observers else []
    bf16 = use_bf16(config.precision)
    collector = RolloutCollector(env, policy, c.n_steps, reward_fn, observers, seed=config.seed,
                                 bf16=bf16)
    writer = ScalarWriter(log_dir, purge_step=timesteps if config.load_ckpt_dir else None)
    recent = collections.deque(maxlen=100)
    trained_rewards: list[np.ndarray] = []  # since the last log point (predicted rewards only)
    t_last, steps_last = time.perf_counter(), timesteps
    try:
        while timesteps < config.total_timesteps and not (stop_event and stop_event.is_set()):
            if pace is not None:
                waited += pace.wait(timesteps - start_timesteps, stop_event)
            r = collector.collect(keep_graph=config.learn)
            timesteps += c.n_steps * c.n_envs
            loss_stats = {}
            if config.learn:
                # Hidden episode ends: returns bootstrap across resets as if play went on.
                dones = np.zeros_like(r.dones) if config.hide_episode_ends else r.dones
                loss_stats = algo.update(r.logits, r.values, torch.from_numpy(r.actions),
                                         torch.from_numpy(r.rewards), torch.from_numpy(dones),
                                         r.last_value, timesteps)
                updates += 1
            if reward_fn is not None:
                trained_rewards.append(r.rewards)
            for ep in r.finished:
                recent.append(ep.true_return)
                writer.add_scalar("charts/episodic_return", ep.true_return, timesteps)
                writer.add_scalar("charts/episodic_length", ep.length, timesteps)
                if reward_fn is not None:
                    writer.add_scalar("charts/predicted_return", ep.train_return, timesteps)
            now = time.perf_counter()
            if now - t_last >= 1.0:
                elapsed = now - t_last
                sps = (timesteps - steps_last) / elapsed
                t_last, steps_last = now, timesteps
                writer.add_scalar("charts/SPS", sps, timesteps)
                if pace is not None:
                    # The share of wall-clock time A2C spent waiting for the predictor.
                    writer.add_scalar("charts/waiting_for_predictor", waited / elapsed, timesteps)
                    writer.add_scalar("charts/predictor_labels_per_step",
                                      pace.labels_per_step(timesteps - start_timesteps), timesteps)
                    waited = 0.0
                if trained_rewards:  # the predicted reward's spread on the policy's own frames
                    writer.add_scalar("charts/reward_std", float(np.std(trained_rewards)), timesteps)
                    trained_rewards.clear()
                for k, v in loss_stats.items():
                    writer.add_scalar(f"losses/{k}" if k != "learning_rate" else
                                      "charts/learning_rate", v, timesteps)
                if stats is not None:
                    stats.steps_per_sec.value = sps
            if stats is not None:
                stats.timesteps.value = timesteps
                if r.finished:
                    stats.episodes.value += len(r.finished)
                    stats.recent_return.value = float(np.mean(recent))
            if config.learn and updates % config.ckpt_interval == 0:
                save_policy(config.ckpt_dir, policy, algo.optimizer, timesteps, updates,
                            keep=config.ckpt_keep)
    except KeyboardInterrupt:
        pass
    finally:
        if config.learn:
            save_policy(config.ckpt_dir, policy, algo.optimizer, timesteps, updates,
                        keep=config.ckpt_keep)
        collector.close()
        writer.close()
        env.close()
    return timesteps
