"""The agent's steps in the loop (Fig. 1, left): act in the env, learn from r̂, record, checkpoint.

`launch/loop.py:agent_loop` runs them in order; this module holds what each step does.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch

from a2c.a2c import A2C
from a2c.config import (ALIVE_TAG, GRAD_NORM_MAX_TAG, LOGIT_SPREAD_TAG, VALUE_SPREAD_TAG,
                        A2CRunConfig, A2CStats)
from a2c.checkpoint import load_policy, load_policy_weights, load_weights_into, read_checkpoint, save_policy
from a2c.loop_side import LoopSide, Pace
from a2c.optim import load_state_keeping_settings
from a2c.policies import alive_and_spread, is_dead, make_policy
from a2c.rollout import RewardFn, Rollout, RolloutCollector, RolloutObserver
from envs import full_stacks
from runtime.precision import use_bf16


class A2CAgent:
    """The policy, its env and its update, as the loop's steps; the pace, the clip source and
    what is recorded of the steps are the loop's side (a2c/loop_side.py), shared with other
    learners.

    Args:
        make_reward_fn: builds, in this process, the reward that replaces the env's (r̂).
        make_observers: `make_observers(n_envs)` builds the rollout observers (the clip source).
        make_pace: builds the predictor's pace, which may hold each rollout back.
        stats: shared counters the supervisor's status line reads.
    """

    def __init__(self, config: A2CRunConfig, *, log_dir: str, stats: A2CStats | None = None,
                 make_reward_fn: Callable[[], RewardFn] | None = None,
                 make_observers: Callable[[int], list[RolloutObserver]] | None = None,
                 make_pace: Callable[[], Pace] | None = None) -> None:
        from envs import env_kind, make_vec_env

        torch.set_num_threads(config.torch_threads)
        torch.manual_seed(config.seed)
        self.config, self.stats, c = config, stats, config.a2c
        self.env = make_vec_env(config.env_id, c.n_envs, seed=config.seed,
                                num_threads=config.env_threads)
        # On its device before the optimiser exists, so that loaded optimiser state follows it.
        self.policy = make_policy(env_kind(config.env_id), self.env.num_actions).to(config.device)
        # No optimiser while only acting: making one imports torch._dynamo, which is slow.
        self.algo = A2C(self.policy, c) if config.learn else None
        self.timesteps = self.updates = 0
        state: dict = {}
        if config.load_ckpt_dir:
            state = load_policy(config.load_ckpt_dir)
            load_weights_into(self.policy, state["policy"], config.load_ckpt_dir)
            if self.algo is not None:
                load_state_keeping_settings(self.algo.optimizer, state["optimizer"])
            self.timesteps, self.updates = state["timesteps"], state["updates"]
        elif config.start_weights:
            load_weights_into(self.policy, load_policy_weights(config.start_weights)["policy"],
                              config.start_weights)
        self.reward_fn = make_reward_fn() if make_reward_fn else None
        self.start_timesteps, self.start_updates = self.timesteps, self.updates
        self.collector = RolloutCollector(
            self.env, self.policy, c.n_steps, self.reward_fn, seed=config.seed,
            bf16=use_bf16(config.precision, config.device))
        self.side = LoopSide(
            log_dir, purge_step=self.timesteps if config.load_ckpt_dir else None,
            timesteps=self.timesteps, stats=stats,
            observers=make_observers(c.n_envs) if make_observers else [],
            pace=make_pace() if make_pace else None, predicted=self.reward_fn is not None,
            episodes=state.get("episodes", 0),
            recent_returns=state["recent_returns"].tolist() if "recent_returns" in state else ())
        self.telemetry = self.side.telemetry  # the learner's scalars are written with the side's
        self.reviver = None  # a2c.revive.Reviver, made at the first death (--revive_dead_policy)

    @property
    def finished(self) -> bool:
        return self.timesteps >= self.config.total_timesteps

    def wait_for_predictor(self, stop_event: Any = None) -> None:
        """App. A.2's pace: hold the next rollout while the predictor has trained too little."""
        self.side.wait(self.timesteps, stop_event)

    def act(self) -> Rollout:
        """T steps in each of the N envs; r̂ replaces the game's reward; the observers (the clip
        source) see the rollout."""
        rollout = self.collector.collect(keep_graph=self.config.learn)
        self.side.observe(rollout)
        self.timesteps += rollout.actions.size
        return rollout

    def learn(self, rollout: Rollout) -> None:
        """One A2C update on the rollout (none while only acting, e.g. gathering first clips)."""
        if not self.config.learn:
            return
        r = rollout
        # Hidden episode ends: returns bootstrap across resets as if play went on.
        dones = np.zeros_like(r.dones) if self.config.hide_episode_ends else r.dones
        losses = self.algo.update(r.logits, r.values, torch.from_numpy(r.actions),
                                  torch.from_numpy(r.rewards), torch.from_numpy(dones),
                                  r.last_value, self.timesteps)
        self.updates += 1
        for k, v in losses.items():
            self.telemetry.record("charts/learning_rate" if k == "learning_rate" else
                                  f"losses/{k}", v)
        self.telemetry.record_max(GRAD_NORM_MAX_TAG, losses["grad_norm"])

    def record(self, rollout: Rollout) -> None:
        """Episodes ended, the reward's spread, speed and the pace, to TensorBoard and the
        status line; written once a second."""
        self.side.record(rollout, self.timesteps)

    def checkpoint_if_due(self) -> None:
        if not self.config.learn:
            return
        if self.updates % self.config.ckpt_interval == 0:
            self.checkpoint()
        elif self.updates == self.start_updates + 1:  # a resumed run says at once if it is dead
            self.check_alive(revive=self.config.revive_dead)

    def checkpoint(self, final: bool = False) -> None:
        """Check the policy (and revive it if dead and asked to; not at the run's end), then
        save it: the newest checkpoint is the policy the run goes on with. Weights that are not
        finite (an update gone to NaN) are never saved, so no good checkpoint gives way to them."""
        if not all(bool(torch.isfinite(p).all()) for p in self.policy.parameters()):
            import sys

            print(f"the policy's weights are not finite at {self.timesteps:,} agent steps: not "
                  "saved; --resume goes on from the newest checkpoint", file=sys.stderr)
            return
        self.check_alive(revive=self.config.revive_dead and not final)
        save_policy(self.config.ckpt_dir, self.policy, self.algo.optimizer, self.timesteps,
                    self.updates, keep=self.config.ckpt_keep, episodes=self.side.episodes,
                    recent_returns=self.side.recent_returns, env_id=self.config.env_id)

    def check_alive(self, revive: bool = False) -> None:
        """Each layer's share of live units on the last rollout's screens (but an episode's first
        ones) and the spreads of the logits and value there (in fp32), to TensorBoard; while a
        layer has none (and `revive` finds no checkpoint to go back to, or is off), the shared
        counters say since which check (`a2c.policies.is_dead`)."""
        if self.timesteps == self.start_timesteps:
            return  # no rollout yet in this process: its screens are not filled in
        c = self.collector
        screens = torch.from_numpy(c.obs[:-1].reshape(-1, *c.obs.shape[2:]))
        full = full_stacks(screens)  # an episode's first screens would hide a blind policy
        screens = (screens[full] if full.any() else screens).to(c.device)
        alive, spread, value_spread = alive_and_spread(self.policy, screens, c.autocast())
        for layer, share in enumerate(alive, 1):
            self.telemetry.record(f"{ALIVE_TAG}{layer}", share)
        self.telemetry.record(LOGIT_SPREAD_TAG, spread)
        self.telemetry.record(VALUE_SPREAD_TAG, value_spread)
        dead = is_dead(alive)
        if dead and revive:
            dead = not self.revive()
        if self.stats is not None:
            if dead and self.stats.dead_since.value < 0:
                self.stats.dead_since.value = self.timesteps
            elif not dead:
                self.stats.dead_since.value = -1

    def revive(self) -> bool:
        """A policy found dead on its rollout's screens: look again on random play's, and if it
        is dead there too put back the newest kept checkpoint that still tells them apart
        (a2c/revive.py), weights and optimiser state. False while it stays dead."""
        import sys

        from a2c.revive import Reviver, choose, seeing

        if self.reviver is None:
            self.reviver = Reviver(self.config.env_id, self.config.seed, self.config.ckpt_dir)
        autocast = self.collector.autocast()
        if not self.reviver.is_dead(self.policy, autocast):
            return True  # a layer silent on one rollout's screens that fires on others'
        candidates = self.reviver.candidates(self.policy, autocast)
        fresh = self.reviver.fresh_value_spread(self.policy, autocast)
        chosen = choose(candidates, fresh)
        where = f"policy dead at {self.timesteps:,} agent steps"
        if chosen is None:
            live = seeing(candidates)  # alive, whatever their spread
            print(f"{where}: " + ("no kept checkpoint is alive to revive it from" if not live else
                  "no kept checkpoint tells screens apart: their value's spread is at most "
                  f"{max(c.value_spread for c in live):.4f}, a fresh network's {fresh:.4f} (a "
                  "warm-up of the rate, --lr_warmup_million_timesteps, keeps a run from starting "
                  "blind)"), file=sys.stderr)
            return False
        state = read_checkpoint(chosen.path)
        self.policy.load_state_dict(state["policy"])
        load_state_keeping_settings(self.algo.optimizer, state["optimizer"])
        self.telemetry.record("charts/revived_from", chosen.timesteps)
        if self.stats is not None:
            self.stats.revivals.value += 1
        print(f"{where}: revived from its checkpoint at {chosen.timesteps:,} (logits' spread "
              f"{chosen.spread:.3f}, the most of any kept one that sees "
              f"{max(k.spread for k in seeing(candidates, fresh)):.3f})", file=sys.stderr)
        return True

    def close(self) -> None:
        """The last checkpoint (when learning), then the env and files closed."""
        try:
            if self.config.learn:
                self.checkpoint(final=True)
        finally:
            try:
                self.side.close(self.timesteps)  # the clip source, then the scalars
            finally:
                self.env.close()
