"""A2C as the supervising process hands it to a child: real functions it can import and pickle
without importing torch (which is imported when they are called, in the child)."""
from __future__ import annotations

from typing import Any


def run_a2c(config: Any, **channels: Any) -> int:
    """The A2C process's body: `a2c.train.train_a2c`."""
    from a2c.train import train_a2c

    return train_a2c(config, **channels)


def check_policy(ckpt_dir: str) -> None:
    """Load the newest policy checkpoint in `ckpt_dir` (CheckpointError, one line, if it fails)."""
    from a2c.checkpoint import load_policy

    load_policy(ckpt_dir)
