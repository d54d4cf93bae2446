"""The agent's side of the preference loop, whatever learns (Fig. 1, left): the predictor's pace
before each block of agent steps, the clip source after it, and what is recorded of the steps
(episodes, speed, r̂'s spread, the pace) in TensorBoard and the shared counters.

A2C's process (`a2c.train.A2CAgent`, a block is a rollout) and another library's training loop
(launch/preference_env.py, blocks of A2C's rollout length) both drive it.
"""
from __future__ import annotations

import collections
import os
from typing import TYPE_CHECKING, Any, Protocol, Sequence

import numpy as np

from a2c.config import ALONGSIDE_SHARE_TAG
from runtime.scalars import Telemetry

if TYPE_CHECKING:
    from a2c.config import A2CStats
    from a2c.rollout import Rollout, RolloutObserver

RECENT_EPISODES = 100  # the status line's recent return: the mean of this many latest episodes
# While the pace holds the agent, its scalars are still written this often, so that a silence in
# the logs means a stopped process (experiments.runlog counts no time over one of a minute).
HELD_POINT_S = 10.0


class Pace(Protocol):
    """A hook that may hold the agent back before each block of steps (the reward predictor's
    pace, App. A.2)."""

    def wait(self, agent_steps: int, stop_event: Any = None, timeout_s: float | None = None
             ) -> float:
        """Block while the agent is ahead, for at most `timeout_s`; the seconds waited."""

    def labels_per_step(self, agent_steps: int) -> float:
        """What is logged as charts/predictor_labels_per_step."""


class LoopSide:
    """What the loop asks of the agent besides learning: `wait` before each block of steps,
    `observe` and `record` after it, `close` at the end. The learner records its own scalars
    into `telemetry`, written with these.

    Args:
        log_dir: TensorBoard's directory (None: nothing written); `purge_step`, a resumed run's
            step (runtime.scalars.ScalarWriter).
        every_s: the scalars are written, and the agent's speed measured, over at least this many
            seconds.
        timesteps: the agent steps at the start (a resumed policy's); the pace counts from here.
        stats: shared counters the supervisor's status line reads.
        observers: see each block of steps (the clip source); closed by `close`.
        pace: may hold each block back.
        predicted: the rewards are r̂: each episode's r̂ sum and r̂'s spread are recorded.
        episodes, recent_returns: a resumed run's episodes so far and its latest true returns.
    """

    def __init__(self, log_dir: str | os.PathLike | None, *, purge_step: int | None = None,
                 every_s: float = 1.0, timesteps: int = 0, stats: A2CStats | None = None,
                 observers: list[RolloutObserver] = (), pace: Pace | None = None,
                 predicted: bool = False, episodes: int = 0,
                 recent_returns: Sequence[float] = ()) -> None:
        self.telemetry = Telemetry(log_dir, purge_step, every_s=every_s)
        self.stats, self.pace, self.predicted = stats, pace, predicted
        self.observers = list(observers)
        self.start_timesteps = self.steps_at_dump = timesteps
        self.episodes = episodes
        self.recent_returns: collections.deque[float] = collections.deque(
            recent_returns, maxlen=RECENT_EPISODES)
        self._share_episodes()
        self.waited = 0.0  # seconds held back by the pace since the last dump
        self.rewards_since_dump: list[np.ndarray] = []  # r̂ given to the agent (for its spread)

    def wait(self, timesteps: int, stop_event: Any = None) -> None:
        """App. A.2's pace: hold the next block while the predictor has trained too little; a
        long hold writes the scalars (no steps, all waiting) every HELD_POINT_S."""
        if self.pace is None:
            return
        timeout_s = max(self.telemetry.every_s, HELD_POINT_S)
        while True:
            waited = self.pace.wait(timesteps - self.start_timesteps, stop_event, timeout_s)
            self.waited += waited
            if waited < timeout_s:  # caught up, or stopped
                return
            self._dump(timesteps)

    def observe(self, rollout: Rollout) -> None:
        """The observers (the clip source) see the block; they copy what they keep."""
        for observer in self.observers:
            observer(rollout)

    def record(self, rollout: Rollout, timesteps: int) -> None:
        """The block's ended episodes, the reward's spread, speed and the pace, to TensorBoard
        and the status line; written every `every_s`. `timesteps`: the agent steps after it."""
        t = self.telemetry
        for ep in rollout.finished:  # each at the block's end, however long between dumps
            self.recent_returns.append(ep.true_return)
            t.record_each("charts/episodic_return", ep.true_return, timesteps)
            t.record_each("charts/episodic_length", ep.length, timesteps)
            if self.predicted:
                t.record_each("charts/predicted_return", ep.train_return, timesteps)
            if ep.alongside_share is not None:
                t.record_each(ALONGSIDE_SHARE_TAG, ep.alongside_share, timesteps)
        self.episodes += len(rollout.finished)
        if self.stats is not None:
            self.stats.timesteps.value = timesteps
        if rollout.finished:
            self._share_episodes()
        if self.predicted:
            self.rewards_since_dump.append(rollout.rewards)
        if t.due():
            self._dump(timesteps)

    def _share_episodes(self) -> None:
        """The episodes so far and the mean of the latest returns, to the status line."""
        if self.stats is not None:
            self.stats.episodes.value = self.episodes
            if self.recent_returns:
                self.stats.recent_return.value = float(np.mean(self.recent_returns))

    def _dump(self, timesteps: int) -> None:
        t = self.telemetry
        if self.rewards_since_dump:  # r̂'s spread on the agent's own frames
            spread = np.std(np.concatenate([r.ravel() for r in self.rewards_since_dump]))
            t.record("charts/reward_std", float(spread))
            self.rewards_since_dump.clear()
        # Over the whole window, pauses between blocks included (a library's own learning).
        elapsed = t.since_dump()
        sps = (timesteps - self.steps_at_dump) / elapsed
        t.record("charts/SPS", sps)
        if self.pace is not None:
            # The share of wall-clock time the agent spent waiting for the predictor.
            t.record("charts/waiting_for_predictor", self.waited / elapsed)
            t.record("charts/predictor_labels_per_step",
                     self.pace.labels_per_step(timesteps - self.start_timesteps))
            self.waited = 0.0
        if self.stats is not None:
            self.stats.steps_per_sec.value = sps
        t.dump(timesteps)
        self.steps_at_dump = timesteps

    def close(self, timesteps: int) -> None:
        """The agent is stopping: the observers that have a `close` finish sending, then what
        was recorded since the last dump is written at `timesteps` and the file closed."""
        try:
            for observer in self.observers:
                close = getattr(observer, "close", None)
                if close is not None:
                    close()
        finally:
            self.telemetry.close(timesteps)
