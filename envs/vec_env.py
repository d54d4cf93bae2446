"""The small vector-env interface the A2C rollout loop consumes."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class EpisodeRecord:
    """A finished episode: which env, its true (unclipped) game score and its agent steps."""

    env_index: int
    true_return: float
    length: int
    train_return: float | None = None  # the summed reward the agent trained on (set by A2C)
    alongside_share: float | None = None  # Enduro: its share of steps level with another car


@dataclass
class StepResult:
    obs: np.ndarray  # uint8 (N, 4, 84, 84): on an episode end, the new episode's first observation
    rewards: np.ndarray  # float32 (N,): the game's own reward, unclipped
    dones: np.ndarray  # bool (N,): the episode ended on this step (game over or time limit)
    finished: list[EpisodeRecord] = field(default_factory=list)
    truncated: np.ndarray | None = None  # bool (N,): those of `dones` cut by a time limit
    final_obs: np.ndarray | None = None  # uint8 (N, 4, 84, 84): where `dones`, the last observation


class EpisodeTracker:
    """The running true score and length of each of N envs; reports the episodes that end."""

    def __init__(self, num_envs: int) -> None:
        self.returns = np.zeros(num_envs, dtype=np.float64)
        self.lengths = np.zeros(num_envs, dtype=np.int64)

    def __call__(self, rewards: np.ndarray, dones: np.ndarray) -> list[EpisodeRecord]:
        """Account one step of every env; the records of the episodes that ended on it."""
        self.returns += rewards
        self.lengths += 1
        finished = [EpisodeRecord(int(i), float(self.returns[i]), int(self.lengths[i]))
                    for i in np.flatnonzero(dones)]
        self.returns[dones] = 0.0
        self.lengths[dones] = 0
        return finished


class VecEnv:
    """N environments stepped together; subclasses set num_envs/num_actions and call `_account`."""

    num_envs: int
    num_actions: int

    def reset(self, seed: int | None = None) -> np.ndarray:
        raise NotImplementedError

    def step(self, actions: np.ndarray) -> StepResult:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def _init_episode_stats(self) -> None:
        self._account = EpisodeTracker(self.num_envs)
