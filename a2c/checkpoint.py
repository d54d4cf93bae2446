"""Policy checkpoints: plain torch state dicts, loaded with weights_only=True (nothing unpickled)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO

import torch

PREFIX = "policy-"


class CheckpointError(Exception):
    """A checkpoint directory or file that is missing or unreadable (message is one line)."""


def save_policy(ckpt_dir: str | Path, policy: torch.nn.Module, optimizer: torch.optim.Optimizer,
                timesteps: int, updates: int, keep: int = 3) -> Path:
    """Write `policy-<timesteps>.pt` atomically and keep only the newest `keep` checkpoints
    (0: all of them)."""
    ckpt_dir = Path(ckpt_dir)
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    path = ckpt_dir / f"{PREFIX}{timesteps:012d}.pt"
    tmp = path.with_suffix(".tmp")
    torch.save({"policy": policy.state_dict(), "optimizer": optimizer.state_dict(),
                "timesteps": timesteps, "updates": updates}, tmp)
    os.replace(tmp, path)
    for old in sorted(ckpt_dir.glob(f"{PREFIX}*.pt"))[:-keep] if keep else []:
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


def _read(path: Path, keys: set[str]) -> dict:
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
        assert keys <= set(state)
    except Exception as e:  # torch raises several types for a damaged file
        raise CheckpointError(f"cannot read policy checkpoint {path}: {type(e).__name__}") from e
    return state


def load_policy(ckpt_dir: str | Path) -> dict:
    """The newest checkpoint in a directory: {'policy', 'optimizer', 'timesteps', 'updates'}."""
    return _read(latest_checkpoint(ckpt_dir), {"policy", "optimizer", "timesteps", "updates"})


def load_policy_weights(path: str | Path) -> dict:
    """A policy to play: from a run's checkpoint directory (the newest), a checkpoint file or a
    weights file of `save_policy_weights`. Returns {'policy', 'timesteps'}."""
    path = Path(path)
    if path.is_dir():
        path = latest_checkpoint(path)
    elif not path.is_file():
        raise CheckpointError(f"no policy checkpoint directory or file {path}")
    state = _read(path, {"policy", "timesteps"})
    return {"policy": state["policy"], "timesteps": state["timesteps"]}


def save_policy_weights(path: str | Path | BinaryIO, state: dict) -> None:
    """The policy's weights alone (no optimiser state, about half the size), to share an agent."""
    torch.save({"policy": state["policy"], "timesteps": state["timesteps"]}, path)
