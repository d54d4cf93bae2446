"""Reviving a dead policy (`--revive_dead_policy`, on for Pong, off otherwise; not the paper's).

A torso layer with no unit alive (`a2c.policies.is_dead`) never comes back: its units pass no
gradient, so the run plays one action distribution whatever it sees until its last step
(docs/experiments.md, "Why the level was touched, not held"). With this on, a check that finds the
policy dead looks again on screens of random play (a rollout's may all be an episode's first); if
it is dead there too, the newest kept checkpoint whose network still tells those screens apart is
put back, with its optimiser state, and the run goes on from there; its count of agent steps goes
on too. A checkpoint whose value varies across them less than a tenth as much as a fresh network's
is blind, however many of its units fire: going back to it would not help. torch is imported where
needed: probe_policy's --help does without it.
"""
from __future__ import annotations

import copy
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from a2c.config import checkpoints

if TYPE_CHECKING:
    import torch

    from a2c.policies import ActorCritic

KEEP_EVERY = 4  # observations 4 agent steps apart: consecutive ones nearly repeat
RANDOM_STEPS, RANDOM_ENVS = 400, 8  # random play's steps per env, and envs: 800 screens

# A checkpoint revives the run if its logits vary across random play's screens at least this
# share of the most any live kept checkpoint's do: a dying network's vary far less than a playing
# one's (docs/experiments.md, "Why the level was touched, not held"), a live one early in a run
# may vary little. Its value must vary at least this share of a fresh network's (the median of
# FRESH_DRAWS), far above a network blinded by the rate's first updates and below one that goes
# on to learn (docs/experiments.md, "The default rate's first steps blind six seeds of six").
SPREAD_SHARE = 0.1
FRESH_DRAWS = 3


@dataclass
class Candidate:
    """A kept checkpoint's network on random play's screens."""

    path: Path
    timesteps: int
    alive: list[float]  # per torso layer (alive_units, under the policy's autocast)
    spread: float  # logit_spread, in fp32
    value_spread: float  # the value's standard deviation, in fp32


def random_play(env_id: str, steps: int = RANDOM_STEPS, n_envs: int = RANDOM_ENVS,
                seed: int = 0) -> np.ndarray:
    """Every KEEP_EVERY-th observation of `steps` random steps of `n_envs` envs (uint8), leaving
    out the screens of an episode's first steps (`envs.full_stacks`)."""
    from envs import full_stacks, make_vec_env

    env = make_vec_env(env_id, n_envs, seed=seed, num_threads=1)
    rng = np.random.default_rng(seed)
    try:
        env.reset()
        kept = []
        for t in range(steps):
            obs = env.step(rng.integers(env.num_actions, size=n_envs)).obs
            if t % KEEP_EVERY == 0:
                kept.append(obs[full_stacks(obs)])
    finally:
        env.close()
    return np.concatenate(kept)


def seeing(candidates: list[Candidate], fresh_value_spread: float = 0.0) -> list[Candidate]:
    """The kept checkpoints that are alive and not blind: their value varies at least
    SPREAD_SHARE of `fresh_value_spread`, a fresh network's."""
    from a2c.policies import is_dead

    return [c for c in candidates if not is_dead(c.alive)
            and c.value_spread >= SPREAD_SHARE * fresh_value_spread]


def choose(candidates: list[Candidate], fresh_value_spread: float = 0.0) -> Candidate | None:
    """The newest checkpoint that sees (`seeing`) whose logits vary at least SPREAD_SHARE of the
    most any such one's do; None when every kept checkpoint is dead or blind."""
    live = seeing(candidates, fresh_value_spread)
    if not live:
        return None
    most = max(c.spread for c in live)
    return max((c for c in live if c.spread >= SPREAD_SHARE * most), key=lambda c: c.timesteps)


class Reviver:
    """Finds the checkpoint a dead policy goes back to. Random play's screens are made once and
    each checkpoint is measured once: a later death reads only the checkpoints saved since."""

    def __init__(self, env_id: str, seed: int, ckpt_dir: str | Path) -> None:
        self.env_id, self.seed, self.ckpt_dir = env_id, seed, ckpt_dir
        self._screens: torch.Tensor | None = None
        self._fresh_value_spread: float | None = None
        self._measured: dict[Path, Candidate | None] = {}  # None: not a training checkpoint

    def screens(self, device: torch.device) -> torch.Tensor:
        import torch

        if self._screens is None:
            self._screens = torch.from_numpy(random_play(self.env_id, seed=self.seed))
        return self._screens.to(device)

    def measure(self, net: ActorCritic, autocast: torch.autocast
                ) -> tuple[list[float], float, float]:
        """`net` on random play's screens: its live units per torso layer and the spreads of its
        logits and value (`a2c.policies.alive_and_spread`; in bf16 the logits' would round to a
        fifth of the bar)."""
        from a2c.policies import alive_and_spread

        return alive_and_spread(net, self.screens(next(net.parameters()).device), autocast)

    def fresh_value_spread(self, policy: ActorCritic, autocast: torch.autocast) -> float:
        """The median value's spread on random play's screens of FRESH_DRAWS networks like
        `policy` with fresh weights, drawn from the run's seed by a generator of their own (the
        run's random state is left as it was)."""
        import torch

        from a2c.policies import initialise

        if self._fresh_value_spread is None:
            fresh, spreads = copy.deepcopy(policy), []
            generator = torch.Generator().manual_seed(self.seed)
            for _ in range(FRESH_DRAWS):
                initialise(fresh, generator)
                spreads.append(self.measure(fresh, autocast)[2])
            self._fresh_value_spread = float(np.median(spreads))
        return self._fresh_value_spread

    def is_dead(self, net: ActorCritic, autocast: torch.autocast) -> bool:
        from a2c.policies import is_dead

        return is_dead(self.measure(net, autocast)[0])

    def candidates(self, policy: ActorCritic, autocast: torch.autocast) -> list[Candidate]:
        """Every kept training checkpoint, measured in a copy of `policy`; a file that is not
        one (a weights file alone, a damaged one) is passed over."""
        from a2c.checkpoint import CheckpointError, read_checkpoint

        scratch = None
        for path in checkpoints(self.ckpt_dir):
            if path in self._measured:
                continue
            try:
                state = read_checkpoint(path)
            except CheckpointError as e:
                print(f"revive: passing over {e}", file=sys.stderr)
                self._measured[path] = None
                continue
            scratch = scratch or copy.deepcopy(policy)
            scratch.load_state_dict(state["policy"])
            self._measured[path] = Candidate(path, int(state["timesteps"]),
                                             *self.measure(scratch, autocast))
        return [c for p, c in self._measured.items() if c is not None and p.exists()]
