"""Reviving a dead policy (`--revive_dead_policy`, off by default; not the paper's).

A torso layer with no unit alive (`a2c.policies.is_dead`) never comes back: its units pass no
gradient, so the run plays one action distribution whatever it sees until its last step (what
ended Pong seed 1's level, docs/experiments.md, item 2). With this on, a check that finds the
policy dead puts back the newest kept checkpoint whose network still tells screens apart, with
its optimiser state, and the run goes on from there; its count of agent steps goes on too.
"""
from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

import torch

from a2c.checkpoint import load_policy_weights
from a2c.config import checkpoints
from a2c.policies import ActorCritic, alive_units, is_dead, logit_spread

# A checkpoint revives the run if its logits vary across screens at least this share of the most
# any live kept checkpoint's do: Pong seed 1's dying checkpoints varied 4% as much as its
# playing ones (docs/experiments.md, item 2), a live network early in a run may vary little.
SPREAD_SHARE = 0.1


@dataclass
class Candidate:
    """A kept checkpoint as the dead policy's own screens show it."""

    path: Path
    timesteps: int
    alive: list[float]  # per torso layer (alive_units)
    spread: float  # logit_spread


def assess(ckpt_dir: str | Path, scratch: ActorCritic, screens: torch.Tensor,
           autocast: AbstractContextManager) -> list[Candidate]:
    """Each checkpoint in `ckpt_dir` loaded into `scratch` (a network like the policy, on its
    device) and run on `screens` under `autocast` (as the policy is trained)."""
    found = []
    for path in checkpoints(ckpt_dir):
        state = load_policy_weights(path)
        scratch.load_state_dict(state["policy"])
        with autocast, torch.no_grad():
            alive = alive_units(scratch, screens)
            spread = logit_spread(scratch(screens)[0])
        found.append(Candidate(path, int(state["timesteps"]), alive, spread))
    return found


def choose(candidates: list[Candidate]) -> Candidate | None:
    """The newest live checkpoint whose logits vary at least SPREAD_SHARE of the most any live
    one's do; None when every kept checkpoint is dead."""
    live = [c for c in candidates if not is_dead(c.alive)]
    if not live:
        return None
    most = max(c.spread for c in live)
    return max((c for c in live if c.spread >= SPREAD_SHARE * most), key=lambda c: c.timesteps)
