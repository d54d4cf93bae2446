"""Policy checkpoints: plain torch state dicts, loaded with weights_only=True (nothing unpickled)."""
from __future__ import annotations

import os
from pathlib import Path

import torch

PREFIX = "policy-"


class CheckpointError(Exception):
    """A checkpoint directory or file that is missing or unreadable (message is one line)."""


def save_policy(ckpt_dir: str | Path, policy: torch.nn.Module, optimizer: torch.optim.Optimizer,
                timesteps: int, updates: int, keep: int = 3) -> Path:
    """Write `policy-<timesteps>.pt` atomically and keep only the newest `keep` checkpoints."""
    ckpt_dir = Path(ckpt_dir)
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    path = ckpt_dir / f"{PREFIX}{timesteps:012d}.pt"
    tmp = path.with_suffix(".tmp")
    torch.save({"policy": policy.state_dict(), "optimizer": optimizer.state_dict(),
                "timesteps": timesteps, "updates": updates}, tmp)
    os.replace(tmp, path)
    for old in sorted(ckpt_dir.glob(f"{PREFIX}*.pt"))[:-keep]:
        old.unlink()
    return path


def latest_checkpoint(ckpt_dir: str | Path) -> Path:
    ckpt_dir = Path(ckpt_dir)
    if not ckpt_dir.is_dir():
        raise CheckpointError(f"policy checkpoint directory {ckpt_dir} does not exist")
    found = sorted(ckpt_dir.glob(f"{PREFIX}*.pt"))
    if not found:
        raise CheckpointError(f"no {PREFIX}*.pt checkpoint in {ckpt_dir}")
    return found[-1]


def load_policy(ckpt_dir: str | Path) -> dict:
    """The newest checkpoint in a directory: {'policy', 'optimizer', 'timesteps', 'updates'}."""
    path = latest_checkpoint(ckpt_dir)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
        assert {"policy", "optimizer", "timesteps", "updates"} <= set(state)
    except Exception as e:  # torch raises several types for a damaged file
        raise CheckpointError(f"cannot read policy checkpoint {path}: {type(e).__name__}") from e
    return state
