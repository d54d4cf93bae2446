"""--render_episodes: a second window that loops the agent's latest full episode (env 0).

    A2C --EpisodeObserver--> episode queue (maxsize 1, never blocks) --> run_episode_viewer

The observer is a rollout observer like the clip cutter: it keeps env 0's newest frame of each
step until that env's episode ends, then offers the episode (uint8 (L, 84, 84)) to the queue and
drops it if the viewer has not taken the previous one yet: the agent never waits for the viewer.
The viewer plays each episode through to its end before it moves on to the newest one received.
"""
from __future__ import annotations

import collections
import queue
import sys
import time
from typing import Any, Callable, Sequence

import numpy as np

from clips.sender import QueueSender
from pref_interface.labellers.player import FPS, clip_figure, window_open

EPISODE_QUEUE_MAXSIZE = 1
MAX_EPISODE_FRAMES = 20_000  # longer episodes keep their last frames (about 140 MB at most)


class EpisodeObserver:
    """A2C rollout observer: collects one env's frames and sends each finished episode."""

    def __init__(self, episode_queue: Any, env_index: int = 0,
                 max_frames: int = MAX_EPISODE_FRAMES) -> None:
        self.sender, self.env_index = QueueSender(episode_queue), env_index
        self.frames: collections.deque[np.ndarray] = collections.deque(maxlen=max_frames)

    def __call__(self, rollout: Any) -> None:
        obs, dones = rollout.obs, rollout.dones  # uint8 (T + 1, N, 4, 84, 84), bool (T, N)
        i = self.env_index
        for t in range(dones.shape[0]):
            self.frames.append(obs[t, i, -1].copy())  # obs[t] is what action t was taken on
            if dones[t, i]:
                self._send(np.stack(self.frames))
                self.frames.clear()

    def _send(self, episode: np.ndarray) -> None:
        assert episode.dtype == np.uint8 and episode.shape[1:] == (84, 84), episode.shape
        self.sender.send(episode)

    def close(self) -> None:
        """A2C is exiting: let an episode the viewer has started reading arrive whole."""
        self.sender.close()


def make_episode_observers(episode_queue: Any, n_envs: int) -> list[EpisodeObserver]:
    """The observers the A2C process attaches (functools.partial the queue)."""
    return [EpisodeObserver(episode_queue)]


def chain_observers(factories: Sequence[Callable[[int], list]], n_envs: int) -> list:
    """Several observer factories as one (`functools.partial(chain_observers, [f, g])` pickles
    when f and g do)."""
    return [observer for factory in factories for observer in factory(n_envs)]


def run_episode_viewer(episode_queue: Any, stop_event: Any, fps: float = FPS,
                       geometry: str | None = "+760+0") -> None:
    """Body of the viewer process: loop the newest episode in a window until `stop_event`.

    A failure of the window (the display went away) is reported in one line and ends only the
    viewer, never the run.
    """
    try:
        _view(episode_queue, stop_event, fps, geometry)
    except Exception as e:  # noqa: BLE001 - the viewer is optional
        print(f"episode viewer stopped: {type(e).__name__}: {e}", file=sys.stderr)


def _view(episode_queue: Any, stop_event: Any, fps: float, geometry: str | None) -> None:
    fig = images = bars = texts = None
    episode = newest = None  # playing / waiting to be played once the current pass ends
    t0 = time.monotonic()
    while not stop_event.is_set():
        try:
            newest = episode_queue.get(timeout=0.02 if episode is not None else 0.2)
        except queue.Empty:
            pass
        step = int((time.monotonic() - t0) * fps)
        if newest is not None and (episode is None or step >= len(episode)):
            episode, newest, t0, step = newest, None, time.monotonic(), 0  # whole passes only
        if episode is None:
            continue
        if fig is None or not window_open(fig):
            fig, images, bars, texts = clip_figure(1, [""], title="latest episode (env 0)",
                                                   geometry=geometry)
        t = step % len(episode)
        images[0].set_data(episode[t])
        bars[0].set_width((t + 1) / len(episode))
        texts[0].set_text(f"latest episode of env 0: step {t + 1}/{len(episode)}")
        fig.canvas.draw_idle()
        fig.canvas.flush_events()
        time.sleep(max(0.0, 1 / fps - 0.02))
    if fig is not None:
        import matplotlib.pyplot as plt

        plt.close(fig)
