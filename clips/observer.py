"""The agent's end of the clip channel: clips cut from every A2C rollout and sent on without
ever blocking the agent (App. A.2: 25-step clips)."""
from __future__ import annotations

from typing import Any

from clips.cutter import ClipCutter, EveryEnvCutter
from clips.sender import QueueSender


class ClipObserver:
    """A2C rollout observer: cuts clips from every rollout and sends them without blocking;
    `every_env`: a clip from each env at once (`EveryEnvCutter`), else one env at a time."""

    def __init__(self, n_envs: int, clips: Any, dropped_counter: Any | None = None,
                 every_env: bool = False) -> None:
        self.cutter = (EveryEnvCutter if every_env else ClipCutter)(n_envs)
        self.sender = QueueSender(clips, dropped_counter)

    def __call__(self, rollout: Any) -> None:
        for clip in self.cutter.observe(rollout.obs, rollout.actions, rollout.true_rewards,
                                       rollout.dones):
            self.sender.send(clip)

    def close(self) -> None:
        """A2C is exiting: let a clip labelling has started reading arrive whole."""
        self.sender.close()


def make_clip_observers(clips: Any, dropped_counter: Any, n_envs: int,
                        every_env: bool = False) -> list[ClipObserver]:
    """The observers the A2C process attaches (use functools.partial for the first two args)."""
    return [ClipObserver(n_envs, clips, dropped_counter, every_env)]
