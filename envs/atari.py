"""Atari games through ale-py's C++ vector env, with the paper's anti-leak handling (App. A.2)."""
from __future__ import annotations

import re

import numpy as np
from ale_py import roms
from ale_py.vector_env import AtariVectorEnv
from gymnasium.vector import AutoresetMode

from envs.vec_env import StepResult, VecEnv

# Rows of the 84x84 observation that show the score (App. A.2: "we blanked out the score area").
# Checked for the paper's seven games with `python -m experiments.show_blanking` (docs/blanking.png);
# other games get the top band, where most Atari games draw their score, which may not cover it.
SCORE_ROWS: dict[str, tuple[int, int]] = {
    "pong": (0, 9),
    # Enduro: the whole bottom panel (odometer, speedometer, cars still to pass, day counter).
    "enduro": (62, 84),
    "beam_rider": (0, 17),  # score, sector number, enemies left in the sector
    "breakout": (0, 6),  # score, lives, player; the top wall starts at row 6
    "qbert": (0, 12),  # score and lives
    "seaquest": (0, 12),  # score and subs left; the sea surface starts at row 13
    "space_invaders": (0, 9),  # both players' scores
}
DEFAULT_SCORE_ROWS = (0, 9)
# App. A.2: Enduro episodes are cut at 3,000 agent steps.
MAX_AGENT_STEPS = {"enduro": 3000}
DEFAULT_MAX_FRAMES = 108_000  # ale-py's default: 30 minutes of play


def game_from_env_id(env_id: str) -> str | None:
    """'PongNoFrameskip-v4' -> 'pong', 'SpaceInvadersNoFrameskip-v4' -> 'space_invaders'."""
    m = re.fullmatch(r"([A-Z][A-Za-z0-9]*)NoFrameskip-v4", env_id)
    if not m:
        return None
    game = re.sub(r"(?<!^)(?=[A-Z])", "_", m.group(1)).lower()
    return game if game in roms.get_all_rom_ids() else None


def action_names(game: str) -> tuple[str, ...]:
    """The game's actions as the vector env numbers them (its minimal action set), lower case."""
    from ale_py import ALEInterface, LoggerMode

    ALEInterface.setLoggerMode(LoggerMode.Error)  # no banner
    ale = ALEInterface()
    ale.loadROM(roms.get_rom_path(game))
    return tuple(a.name.lower() for a in ale.getMinimalActionSet())


def all_env_ids() -> list[str]:
    camel = ["".join(p.capitalize() for p in g.split("_")) for g in sorted(roms.get_all_rom_ids())]
    return [f"{c}NoFrameskip-v4" for c in camel if game_from_env_id(f"{c}NoFrameskip-v4")]


NOOP_MAX = 30  # App. A.2: each episode starts with 0-30 no-ops


def make_ale_vector_env(game: str, num_envs: int, num_threads: int = 0,
                        reward_clipping: bool = False, noop_max: int = NOOP_MAX) -> AtariVectorEnv:
    """ale-py's C++ vector env with the paper's preprocessing (App. A.2) and same-step autoreset."""
    max_steps = MAX_AGENT_STEPS.get(game)
    return AtariVectorEnv(
        game, num_envs, num_threads=num_threads, frameskip=4, noop_max=noop_max, maxpool=True,
        episodic_life=False, reward_clipping=reward_clipping, use_fire_reset=True,
        repeat_action_probability=0.0, autoreset_mode=AutoresetMode.SAME_STEP,
        max_num_frames_per_episode=max_steps * 4 if max_steps else DEFAULT_MAX_FRAMES)


class AtariVecEnv(VecEnv):
    """DeepMind preprocessing (0-30 no-op starts, max-pool, frameskip 4, 84x84 grey, 4-frame stack,
    fire reset) done by ale-py in C++; life loss is not an episode end; rewards are unclipped."""

    def __init__(self, game: str, num_envs: int, seed: int = 0, num_threads: int = 0,
                 noop_max: int = NOOP_MAX):
        self.game = game
        self.num_envs = num_envs
        self.seed = seed
        self.env = make_ale_vector_env(game, num_envs, num_threads, noop_max=noop_max)
        self.num_actions = int(self.env.single_action_space.n)
        self.score_rows = SCORE_ROWS.get(game, DEFAULT_SCORE_ROWS)
        self._seeded = False  # the first reset starts from `seed`; later ones go on from there
        self._init_episode_stats()

    def _blank(self, obs: np.ndarray) -> np.ndarray:
        r0, r1 = self.score_rows
        obs[:, :, r0:r1, :] = 0
        return obs

    def reset(self, seed: int | None = None) -> np.ndarray:
        if seed is None and not self._seeded:
            seed = self.seed
        self._seeded = True
        obs, _ = self.env.reset(seed=seed)  # None: new starts, as MovingDot's reset gives
        self._init_episode_stats()
        return self._blank(obs)

    def step(self, actions: np.ndarray) -> StepResult:
        obs, rewards, terminated, truncated, info = self.env.step(
            np.asarray(actions, dtype=np.int64))
        dones = terminated | truncated
        rewards = rewards.astype(np.float32)
        final_obs = info.get("final_obs")  # same-step autoreset: the ended episodes' last stacks
        return StepResult(self._blank(obs), rewards, dones, self._account(rewards, dones),
                          truncated=truncated & ~terminated,
                          final_obs=None if final_obs is None else self._blank(final_obs))

    def close(self) -> None:
        self.env.close()
