"""A2C as the supervising process reaches it: real functions it can import and pickle without
importing torch (which is imported when they are called, in a child)."""
from __future__ import annotations


def check_policy(ckpt_dir: str) -> None:
    """Load the newest policy checkpoint in `ckpt_dir` (CheckpointError, one line, if it fails)."""
    from a2c.checkpoint import load_policy

    load_policy(ckpt_dir)
