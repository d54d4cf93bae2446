"""Environments: MovingDot and any ALE game, all as uint8 (N, 4, 84, 84) vector envs."""
from __future__ import annotations

from typing import TYPE_CHECKING

from envs.vec_env import EpisodeRecord, StepResult, VecEnv

if TYPE_CHECKING:
    import numpy as np
    import torch

MOVING_DOT_IDS = ("MovingDotNoFrameskip-v0", "MovingDot-v0")
MAX_SEED = 2**31 - 1  # ale-py takes an int32 seed


def check_seed(seed: int, envs: int = 1) -> None:
    """ValueError (one line) unless envs seeded `seed`, `seed + 1`, ... all take their seed."""
    if not 0 <= seed <= MAX_SEED - envs + 1:
        raise ValueError(f"--seed must be in [0, {MAX_SEED - envs + 1:,}]"
                         + (f" ({envs} envs take seed to seed + {envs - 1})" if envs > 1 else "")
                         + f", got {seed}")


class UnknownEnvError(ValueError):
    """The env id is neither MovingDot nor an ALE game; the message names the nearest ids."""


def env_kind(env_id: str) -> str:
    """'moving_dot' or 'atari'; raises UnknownEnvError for anything else."""
    if env_id in MOVING_DOT_IDS:
        return "moving_dot"
    from envs.atari import all_env_ids, game_from_env_id
    if game_from_env_id(env_id) is None:
        from difflib import get_close_matches

        ids = [*MOVING_DOT_IDS, *all_env_ids()]
        name = env_id.split("-")[0].replace("NoFrameskip", "")  # match on the game's name
        by_name = {i.split("-")[0].replace("NoFrameskip", ""): i for i in ids}
        near = [by_name[n] for n in get_close_matches(name, list(by_name), n=2)]
        raise UnknownEnvError(
            f"unknown env {env_id!r}" + (f" (did you mean {' or '.join(near)}?)" if near else "")
            + f"; supported: {', '.join(MOVING_DOT_IDS)} and any <Game>NoFrameskip-v4 of the ALE "
            f"({len(all_env_ids())} games, e.g. PongNoFrameskip-v4, EnduroNoFrameskip-v4)")
    return "atari"


def same_game(a: str, b: str) -> bool:
    """Whether two env ids give the same game: equal, or both MovingDot's names."""
    return a == b or {a, b} <= set(MOVING_DOT_IDS)


def action_names(env_id: str) -> tuple[str, ...]:
    """What each action of `make_vec_env(env_id)` does, by its number ("noop", "left", ...)."""
    if env_kind(env_id) == "moving_dot":
        from envs.moving_dot import ACTION_NAMES
        return ACTION_NAMES
    from envs.atari import action_names as atari_action_names, game_from_env_id
    return atari_action_names(game_from_env_id(env_id))


def make_vec_env(env_id: str, num_envs: int, seed: int = 0, num_threads: int = 0,
                 noop_max: int | None = None) -> VecEnv:
    """The paper's preprocessed env: frameskip 4, 84x84 grey, 4-frame stack, score blanked.

    MovingDot-v0 and MovingDotNoFrameskip-v0 give the same preprocessed env (frameskip 4 is part
    of the preprocessing, as for the Atari NoFrameskip ids). `noop_max`: an Atari episode starts
    with 0 to this many no-ops (None: the paper's 30); MovingDot's start is random anyway.
    """
    if env_kind(env_id) == "moving_dot":
        from envs.moving_dot import MovingDotVecEnv
        return MovingDotVecEnv(num_envs, seed=seed)
    from envs.atari import NOOP_MAX, AtariVecEnv, game_from_env_id
    return AtariVecEnv(game_from_env_id(env_id), num_envs, seed=seed, num_threads=num_threads,
                       noop_max=NOOP_MAX if noop_max is None else noop_max)


def full_stacks(obs: np.ndarray | torch.Tensor) -> np.ndarray | torch.Tensor:
    """A mask over a batch of (B, 4, 84, 84) screens: those whose four frames are all of the
    episode. A new episode's first three screens (the reset's and the next two) are padded with
    black frames, by ale-py's vector env and MovingDot alike: screens unlike any other, on which a
    policy that ignores the game can still vary. A frame of play is never wholly black."""
    return (obs[:, 0] > 0).reshape(len(obs), -1).any(1)


def register_envs() -> None:
    """Register the MovingDot ids with gymnasium (the Atari ids come with `import ale_py`)."""
    from envs.moving_dot import register
    register()


__all__ = ["EpisodeRecord", "StepResult", "VecEnv", "UnknownEnvError", "env_kind", "full_stacks",
           "make_vec_env", "register_envs", "same_game", "check_seed", "MAX_SEED", "MOVING_DOT_IDS"]
register_envs()
