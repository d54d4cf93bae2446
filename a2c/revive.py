"""Reviving a dead policy (`--revive_dead_policy`, off by default; not the paper's).

A torso layer with no unit alive (`a2c.policies.is_dead`) never comes back: its units pass no
gradient, so the run plays one action distribution whatever it sees until its last step (what
ended Pong seed 1's level, docs/experiments.md, item 2). With this on, a check that finds the
policy dead looks again on screens of random play (a rollout's may all be an episode's first);
if it is dead there too, the newest kept checkpoint whose network still tells those screens
apart is put back, with its optimiser state, and the run goes on from there; its count of agent
steps goes on too. torch is imported where needed: probe_policy's --help does without it.
"""
from __future__ import annotations

from contextlib import AbstractContextManager
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
# share of the most any live kept checkpoint's do: Pong seed 1's sick checkpoints varied 2-7% as
# much as its playing ones (docs/experiments.md, item 2); a live network early in a run may vary
# little.
SPREAD_SHARE = 0.1


@dataclass
class Candidate:
    """A kept checkpoint's network on random play's screens."""

    path: Path
    timesteps: int
    alive: list[float]  # per torso layer (alive_units)
    spread: float  # logit_spread


def random_play(env_id: str, steps: int = RANDOM_STEPS, n_envs: int = RANDOM_ENVS,
                seed: int = 0) -> np.ndarray:
    """Every KEEP_EVERY-th observation of `steps` random steps of `n_envs` envs (uint8)."""
    from envs import make_vec_env

    env = make_vec_env(env_id, n_envs, seed=seed, num_threads=1)
    rng = np.random.default_rng(seed)
    try:
        env.reset()
        kept = []
        for t in range(steps):
            obs = env.step(rng.integers(env.num_actions, size=n_envs)).obs
            if t % KEEP_EVERY == 0:
                kept.append(obs)
    finally:
        env.close()
    return np.concatenate(kept)


def measure(net: ActorCritic, screens: torch.Tensor, autocast: AbstractContextManager
            ) -> tuple[list[float], float]:
    """`net` on `screens` under `autocast` (as it is trained): its live units per torso layer
    and the spread of its logits."""
    import torch

    from a2c.policies import alive_units, logit_spread

    with autocast, torch.no_grad():
        return alive_units(net, screens), logit_spread(net(screens)[0])


def assess(ckpt_dir: str | Path, scratch: ActorCritic, screens: torch.Tensor,
           autocast: AbstractContextManager) -> list[Candidate]:
    """Each checkpoint in `ckpt_dir` loaded into `scratch` (a network like the policy, on its
    device) and measured on `screens`."""
    from a2c.checkpoint import load_policy_weights

    found = []
    for path in checkpoints(ckpt_dir):
        state = load_policy_weights(path)
        scratch.load_state_dict(state["policy"])
        found.append(Candidate(path, int(state["timesteps"]),
                               *measure(scratch, screens, autocast)))
    return found


def choose(candidates: list[Candidate]) -> Candidate | None:
    """The newest live checkpoint whose logits vary at least SPREAD_SHARE of the most any live
    one's do; None when every kept checkpoint is dead."""
    from a2c.policies import is_dead

    live = [c for c in candidates if not is_dead(c.alive)]
    if not live:
        return None
    most = max(c.spread for c in live)
    return max((c for c in live if c.spread >= SPREAD_SHARE * most), key=lambda c: c.timesteps)
