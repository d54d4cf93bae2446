"""A2C as the supervising process reaches it: real functions it can import and pickle without
importing torch (which is imported when they are called, in a child)."""
from __future__ import annotations


def check_policy(ckpt_dir: str, env_id: str) -> None:
    """Load the newest policy checkpoint in `ckpt_dir` and check that it is for `env_id`: the game
    it names and its network's shape (CheckpointError, one line, if not)."""
    from a2c.checkpoint import check_fits, latest_checkpoint, load_policy

    check_fits(env_id, load_policy(ckpt_dir), latest_checkpoint(ckpt_dir))


def check_start_policy(path: str, env_id: str) -> None:
    """Load the weights a new run's policy starts from (`--start_policy`) and check that they are
    for `env_id`: the game they name and its network's shape (CheckpointError, one line, if not)."""
    from a2c.checkpoint import check_fits, load_policy_weights

    check_fits(env_id, load_policy_weights(path), path)
