"""Policy checkpoints: plain torch state dicts, loaded with weights_only=True (nothing unpickled)."""
from __future__ import annotations

import functools
from pathlib import Path
from typing import BinaryIO, Sequence

import torch

from a2c.config import CHECKPOINT_PREFIX as PREFIX, checkpoints
from runtime.outputs import written_whole


class CheckpointError(Exception):
    """A checkpoint directory or file that is missing or unreadable (message is one line)."""


def save_policy(ckpt_dir: str | Path, policy: torch.nn.Module, optimizer: torch.optim.Optimizer,
                timesteps: int, updates: int, keep: int = 3, episodes: int = 0,
                recent_returns: Sequence[float] = (), env_id: str | None = None) -> Path:
    """Write `policy-<timesteps>.pt` atomically and keep only the newest `keep` checkpoints
    (0: all of them). `episodes` and `recent_returns` (the latest episodes' true returns) let a
    resumed run's status line and summary go on from where it stopped; `env_id` names the game,
    so that the policy is not played on another game whose network has the same shape."""
    ckpt_dir = Path(ckpt_dir)
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    path = ckpt_dir / f"{PREFIX}{timesteps:012d}.pt"
    with written_whole(path) as tmp:
        torch.save({"policy": policy.state_dict(), "optimizer": optimizer.state_dict(),
                    "timesteps": timesteps, "updates": updates, "episodes": episodes,
                    "recent_returns": torch.tensor(list(recent_returns), dtype=torch.float64),
                    **_named(env_id)}, tmp)
    for old in checkpoints(ckpt_dir)[:-keep] if keep else []:
        old.unlink()
    return path


def latest_checkpoint(ckpt_dir: str | Path) -> Path:
    ckpt_dir = Path(ckpt_dir)
    if not ckpt_dir.is_dir():
        raise CheckpointError(f"{ckpt_dir} is not a directory: give a run's policy/ directory"
                              if ckpt_dir.exists() else
                              f"policy checkpoint directory {ckpt_dir} does not exist")
    found = checkpoints(ckpt_dir)
    if not found:
        hint = (f" (a run directory: its checkpoints are in {ckpt_dir / 'policy'})"
                if (ckpt_dir / "policy").is_dir() else "")
        raise CheckpointError(f"no {PREFIX}*.pt checkpoint in {ckpt_dir}{hint}")
    return found[-1]


def _read(path: Path, keys: set[str]) -> dict:
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises several types for a damaged file
        raise CheckpointError(f"cannot read policy checkpoint {path}: not a torch checkpoint, "
                              f"or a damaged one ({type(e).__name__})") from e
    if not isinstance(state, dict) or "policy" not in state:
        raise CheckpointError(f"{path} is not a policy checkpoint")
    if not keys <= set(state):
        raise CheckpointError(f"{path} holds a policy's weights alone (run_checkpoint.py "
                              "--save_weights), not a training checkpoint to resume from")
    return state


def load_weights_into(policy: torch.nn.Module, weights: dict, source: str | Path) -> None:
    """Put a checkpoint's policy weights into `policy`; CheckpointError (one line) when they are
    another network's: another game's policy, or MovingDot's in an Atari env."""
    try:
        policy.load_state_dict(weights)
    except RuntimeError as e:
        raise CheckpointError(f"the policy in {source} does not fit this environment's network "
                              "(another game's policy?)") from e


def check_fits(env_id: str, state: dict, source: str | Path) -> None:
    """CheckpointError unless the policy of `state` (as `load_policy_weights` gives it) is for
    `env_id`: the game it names, where it names one, and the shape of `env_id`'s network."""
    from envs import same_game

    if state.get("env_id") is not None and not same_game(state["env_id"], env_id):
        raise CheckpointError(f"the policy in {source} is a policy for {state['env_id']}, "
                              f"not {env_id}")
    load_weights_into(_network_of(env_id), state["policy"], source)


@functools.lru_cache(maxsize=None)
def _network_of(env_id: str) -> torch.nn.Module:
    """A policy network for `env_id`, to check weights against (one env built once per id, not
    once per checkpoint of an `evaluate --all_checkpoints`)."""
    from a2c.policies import make_policy
    from envs import env_kind, make_vec_env

    env = make_vec_env(env_id, 1, num_threads=1)
    try:
        return make_policy(env_kind(env_id), env.num_actions)
    finally:
        env.close()


def load_policy(ckpt_dir: str | Path) -> dict:
    """The newest checkpoint in a directory, as `read_checkpoint` gives it."""
    return read_checkpoint(latest_checkpoint(ckpt_dir))


def read_checkpoint(path: str | Path) -> dict:
    """One training checkpoint file: {'policy', 'optimizer', 'timesteps', 'updates'}, and
    'episodes' and 'recent_returns' where it was written with them; CheckpointError for a
    weights file alone or a damaged one."""
    return _read(Path(path), {"policy", "optimizer", "timesteps", "updates"})


def load_policy_weights(path: str | Path) -> dict:
    """A policy to play: from a run's checkpoint directory (the newest), a checkpoint file or a
    weights file of `save_policy_weights`. Returns {'policy', 'timesteps', 'env_id'}: the game
    is None in a file written before files named it."""
    path = Path(path)
    if path.is_dir():
        path = latest_checkpoint(path)
    elif not path.is_file():
        raise CheckpointError(f"no policy checkpoint directory or file {path}")
    state = _read(path, {"policy", "timesteps"})
    return {"policy": state["policy"], "timesteps": state["timesteps"],
            "env_id": state.get("env_id")}


def save_policy_weights(path: str | Path | BinaryIO, state: dict) -> None:
    """The policy's weights alone (no optimiser state, about half the size), to share an agent;
    with the game `state` names ('env_id'), where it names one."""
    torch.save({"policy": state["policy"], "timesteps": state["timesteps"],
                **_named(state.get("env_id"))}, path)


def _named(env_id: str | None) -> dict:
    """A checkpoint's entry naming its game: none where the game is not known."""
    return {} if env_id is None else {"env_id": env_id}
