"""Watching a policy play, live: the game, and with a reward predictor r̂ beside it (each member
and their mean, the game's reward marked); in a window when there is a display, else in the
terminal, as half-blocks with r̂ as a line of bars under the game."""
from __future__ import annotations

import shutil
import time
from typing import TextIO

import numpy as np

from pref_interface.labellers.player import (
    MAX_COLUMNS,
    TerminalBlock,
    fit,
    half_block_rows,
    shrink,
    truecolor_supported,
)
from runtime.reward_view import RewardTrace, side_by_side
from runtime.video import FPS

BARS = "▁▂▃▄▅▆▇█"  # r̂ from -scale (lowest) to +scale (highest)
GAME_MARKS = {1: "+", -1: "-", 0: " "}


def sparkline(values: np.ndarray, scale: float) -> str:
    """One character per value, its height the value's place in [-scale, scale]."""
    if len(values) == 0:
        return ""
    levels = np.clip((np.asarray(values) / max(scale, 1e-12) + 1) / 2, 0, 1) * (len(BARS) - 1)
    return "".join(BARS[int(round(v))] for v in levels)


def terminal_lines(frame: np.ndarray, trace: RewardTrace | None, size: int, width: int,
                   truecolor: bool) -> list[str]:
    """The game as `size`-pixel half-blocks; under it r̂'s mean over the last `width` steps as
    bars and the game's reward as + / - on the steps that had one."""
    lines = half_block_rows(shrink(frame, size), truecolor)
    if trace is not None and trace.members:
        shown = trace.means[-(width - 5):]
        lines.append("r̂    " + sparkline(np.array(shown), trace.scale))
        game = trace.game[-len(shown):]
        lines.append("game " + "".join(GAME_MARKS[int(np.sign(g))] for g in game))
    return lines


class Watcher:
    """Shows each step as it is played, at `fps` at most: `kind` "window" (matplotlib) or
    "terminal"."""

    def __init__(self, kind: str, fps: float = FPS, out: TextIO | None = None) -> None:
        self.kind, self.period = kind, 1.0 / fps
        self.block = TerminalBlock(out) if kind == "terminal" else None
        self.truecolor = truecolor_supported()
        self.fig = self.image = self.text = None
        self.last = 0.0

    def show(self, frame: np.ndarray, trace: RewardTrace | None, status: str) -> None:
        """The newest 84x84 frame the agent saw, r̂ so far (or None) and a status line."""
        wait = self.last + self.period - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        self.last = time.monotonic()
        if self.block is not None:
            cols, rows = shutil.get_terminal_size((MAX_COLUMNS, 24))
            width = min(cols, MAX_COLUMNS) - 1
            size = max(8, min(84, 2 * (rows - 5)) // 2 * 2)
            self.block.draw(terminal_lines(frame, trace, size, width, self.truecolor)
                            + [fit(status, width)])
            return
        picture = side_by_side(frame, trace.draw()) if trace is not None else frame
        if self.fig is None:
            import matplotlib.pyplot as plt

            plt.ion()
            w, h = picture.shape[1] / 80, picture.shape[0] / 80 + 0.4  # inches at 80 dpi
            self.fig, ax = plt.subplots(figsize=(w, h))
            ax.axis("off")
            self.image = ax.imshow(picture, cmap="gray", vmin=0, vmax=255)
            self.text = ax.set_title(status, fontsize=9)
            self.fig.tight_layout()
        self.image.set_data(picture)
        self.text.set_text(status)
        self.fig.canvas.draw_idle()
        self.fig.canvas.flush_events()

    def say(self, line: str) -> None:
        """Print a line below what is shown (the terminal view goes on under it)."""
        if self.block is not None:
            self.block.close()
        print(line, flush=True)

    def close(self) -> None:
        if self.block is not None:
            self.block.close()
        if self.fig is not None:
            import matplotlib.pyplot as plt

            plt.close(self.fig)
