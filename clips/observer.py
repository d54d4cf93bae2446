"""The agent's end of the clip channel: clips cut from every A2C rollout and sent on without
ever blocking the agent (App. A.2: 25-step clips), while labelling wants clips."""
from __future__ import annotations

from typing import Any

from clips.cutter import ClipCutter, EveryEnvCutter
from clips.sender import QueueSender


HOLD_POLL_S = 0.5  # while held, how often the stop signal is checked


class ClipObserver:
    """A2C rollout observer: cuts clips from every rollout and sends them without blocking;
    `every_env`: a clip from each env at once (`EveryEnvCutter`), else one env at a time.

    `wanted` (a flag with is_set and wait, or None: always) is clear while labelling has pairs
    enough and nobody answers them: no clip is cut then, and with `hold` (gathering, where the
    agent plays only to make clips) the agent itself waits until clips are wanted again or `stop`
    is set."""

    def __init__(self, n_envs: int, clips: Any, dropped_counter: Any | None = None,
                 every_env: bool = False, wanted: Any | None = None, hold: bool = False,
                 stop: Any | None = None) -> None:
        self.cutter = (EveryEnvCutter if every_env else ClipCutter)(n_envs)
        self.sender = QueueSender(clips, dropped_counter)
        self.wanted, self.hold, self.stop = wanted, hold, stop

    def __call__(self, rollout: Any) -> None:
        if self.wanted is not None and not self.wanted.is_set():
            self.cutter.restart()  # the rollouts skipped break the clip under way
            while self.hold and not self.wanted.wait(HOLD_POLL_S):
                if self.stop is not None and self.stop.is_set():
                    return
            return
        for clip in self.cutter.observe(rollout.obs, rollout.actions, rollout.true_rewards,
                                       rollout.dones):
            self.sender.send(clip)

    def close(self) -> None:
        """A2C is exiting: let a clip labelling has started reading arrive whole."""
        self.sender.close()


def make_clip_observers(clips: Any, dropped_counter: Any, n_envs: int, every_env: bool = False,
                        wanted: Any | None = None, hold: bool = False,
                        stop: Any | None = None) -> list[ClipObserver]:
    """The observers the A2C process attaches (use functools.partial for the first two args)."""
    return [ClipObserver(n_envs, clips, dropped_counter, every_env, wanted, hold, stop)]
