"""Clip players: two clips looping side by side, in a window or in the terminal itself.

App. A.2: a clip is 25 agent steps shown in 1.7 s, i.e. about 15 frames per second. Each clip
shows the newest frame of every observation stack (`Clip.frames()[3:]`), with a bar under it
that fills as playback goes through the clip.

- `WindowPlayer`: a matplotlib (TkAgg) window, zoom x4; the prompt stays in the terminal.
- `TerminalPlayer`: colour half-blocks ('▀': foreground = upper pixel, background = lower
  pixel), at most 80 columns wide, redrawn in place above the prompt with ANSI cursor moves.

Both implement `ClipPlayer`; `Playback` loops a pair on one until a key token arrives.
"""
from __future__ import annotations

import functools
import os
import queue
import re
import shutil
import sys
import time
from typing import Any, Callable, Protocol, TextIO

import numpy as np

from runtime.video import FPS

ZOOM = 4
MAX_COLUMNS = 80
GAP = 2  # columns between the two clips in the terminal
PLAYER_KINDS = ("auto", "window", "terminal", "web")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class ClipPlayer(Protocol):
    """Shows a pair of clips, one frame at a time, and a few lines of status text."""

    def load(self, left: np.ndarray, right: np.ndarray) -> None:
        """The next pair: uint8 (T, 84, 84) frames each (lengths may differ)."""

    def draw(self, t: int, status: list[str]) -> None:
        """Show frame `t` of each clip (modulo its length), its progress, and `status`."""

    def close(self) -> None: ...


@functools.lru_cache(maxsize=1)
def display_available() -> bool:
    """True when DISPLAY is set and Tk can open a window on it (probed once per process)."""
    if not os.environ.get("DISPLAY"):
        return False
    try:
        import tkinter

        root = tkinter.Tk()
        root.destroy()
        return True
    except Exception:  # noqa: BLE001 - TclError, ImportError: no usable display either way
        return False


def resolve_player(kind: str) -> str:
    """"window", "terminal" or "web" for a --clip_player choice; ValueError if "window" cannot
    open."""
    if kind not in PLAYER_KINDS:
        raise ValueError(f"--clip_player must be one of {', '.join(PLAYER_KINDS)}, got {kind!r}")
    if kind in ("terminal", "web"):
        return kind
    if display_available():
        return "window"
    if kind == "window":
        raise ValueError("--clip_player window needs a display (DISPLAY unset or Tk cannot open "
                         "it); use --clip_player terminal")
    return "terminal"


LABELLING_FOOTER = ("answer in the terminal: L left better, R right better, E equally good, "
                    "Enter incomparable, P replay")


def make_player(kind: str, title: str = "Which clip is better?",
                footer: str = LABELLING_FOOTER) -> ClipPlayer:
    """A `WindowPlayer` or a `TerminalPlayer` ("window" / "terminal")."""
    if kind == "window":
        return WindowPlayer(title, footer=footer)
    if kind == "terminal":
        return TerminalPlayer()
    raise ValueError(f"unknown player {kind!r}")


# ---------------------------------------------------------------------------- playing a pair


class Playback:
    """Loops a pair of clips on a player at `fps` and waits for key tokens meanwhile.

    Frames are timed from `restart()`, so a slow draw skips frames rather than slowing the clip.
    """

    def __init__(self, player: ClipPlayer, left: np.ndarray, right: np.ndarray,
                 fps: float = FPS) -> None:
        self.player, self.fps = player, fps
        player.load(left, right)
        self.restart()

    def restart(self) -> None:
        """Play both clips from their first frame (the replay key)."""
        self.t0 = time.monotonic()

    def next_token(self, tokens: Any, status: Callable[[], list[str]],
                   stop_event: Any | None = None) -> str | None:
        """Play until a token arrives on `tokens` (returned) or `stop_event` is set (None)."""
        while stop_event is None or not stop_event.is_set():
            t = int((time.monotonic() - self.t0) * self.fps)
            self.player.draw(t, status())
            wait = self.t0 + (t + 1) / self.fps - time.monotonic()
            try:
                return tokens.get(timeout=max(0.005, wait))
            except queue.Empty:
                pass
        return None


# ------------------------------------------------------------------------------ terminal


def grey_to_256(values: np.ndarray) -> np.ndarray:
    """Nearest xterm-256 colour to each grey level: black 16, white 231, or ramp 232-255."""
    levels = np.array([0] + [8 + 10 * k for k in range(24)] + [255])
    codes = np.array([16] + list(range(232, 256)) + [231])
    return codes[np.abs(values[..., None].astype(int) - levels).argmin(-1)]


def shrink(frame: np.ndarray, size: int) -> np.ndarray:
    """Box-average a square uint8 frame to `size` x `size` pixels."""
    n = frame.shape[0]
    starts = (np.arange(size) * n) // size
    counts = np.diff(np.append(starts, n))
    sums = np.add.reduceat(np.add.reduceat(frame.astype(np.float32), starts, 0), starts, 1)
    return np.round(sums / np.outer(counts, counts)).astype(np.uint8)


def truecolor_supported() -> bool:
    return os.environ.get("COLORTERM", "").lower() in ("truecolor", "24bit")


def half_block_rows(frame: np.ndarray, truecolor: bool) -> list[str]:
    """An (H, W) uint8 frame (H even) as H/2 lines of '▀' cells: each cell's foreground is the
    upper pixel and its background the lower one. Colour codes are only repeated on change."""
    if truecolor:
        def fg(v): return f"38;2;{v};{v};{v}"
        def bg(v): return f"48;2;{v};{v};{v}"
        cells = frame
    else:
        def fg(v): return f"38;5;{v}"
        def bg(v): return f"48;5;{v}"
        cells = grey_to_256(frame)
    rows = []
    for r in range(0, cells.shape[0] - 1, 2):
        parts, last = [], (None, None)
        for up, low in zip(cells[r].tolist(), cells[r + 1].tolist()):
            codes = ([fg(up)] if up != last[0] else []) + ([bg(low)] if low != last[1] else [])
            if codes:
                parts.append(f"\x1b[{';'.join(codes)}m")
            parts.append("▀")
            last = (up, low)
        parts.append("\x1b[0m")
        rows.append("".join(parts))
    return rows


def progress_bar(fraction: float, width: int) -> str:
    """A bar of `width` columns filled to `fraction` (bright) over a dim track."""
    filled = min(width, max(0, round(fraction * width)))
    return f"\x1b[1;33m{'━' * filled}\x1b[0;2m{'─' * (width - filled)}\x1b[0m"


def visible_width(line: str) -> int:
    """Columns a line takes on screen once its escape codes are removed."""
    return len(_ANSI.sub("", line))


def terminal_clip_size(columns: int = MAX_COLUMNS, lines: int = 24, status_lines: int = 3) -> int:
    """Pixels per side of each clip so two fit in `columns` (capped at 80) and the whole block
    (clip rows, one bar row, the status lines) fits in `lines`: even, at least 8, at most 84."""
    columns = min(columns, MAX_COLUMNS)
    size = min(84, (columns - GAP) // 2, 2 * (lines - 2 - status_lines))
    return max(8, size - size % 2)


def render_pair(left: np.ndarray, right: np.ndarray, left_progress: float, right_progress: float,
                size: int, truecolor: bool) -> list[str]:
    """The lines the terminal player draws for one frame of each clip: the clips side by side
    (`size` pixels square, half-blocks), then a progress bar under each."""
    rows_l = half_block_rows(shrink(left, size), truecolor)
    rows_r = half_block_rows(shrink(right, size), truecolor)
    gap = " " * GAP
    lines = [a + gap + b for a, b in zip(rows_l, rows_r)]
    lines.append(progress_bar(left_progress, size) + gap + progress_bar(right_progress, size))
    return lines


class TerminalBlock:
    """A block of lines drawn at a fixed place: each `draw` moves the cursor back to the block's
    first line and overwrites it, so the block stays put above the prompt (nothing else may
    write to the terminal meanwhile)."""

    def __init__(self, out: TextIO | None = None) -> None:
        self.out = out if out is not None else sys.stdout
        self.height = 0
        self.last: list[str] | None = None

    def draw(self, lines: list[str], force: bool = False) -> None:
        if lines == self.last and not force:
            return
        buf = ["\x1b[?25l"]  # hide the cursor while drawing
        if self.height > 1:
            buf.append(f"\r\x1b[{self.height - 1}A")
        elif self.height == 1:
            buf.append("\r")
        buf.append("\n".join(line + "\x1b[0m\x1b[K" for line in lines))
        buf.append("\x1b[J")  # clear what a taller previous block left below
        self.out.write("".join(buf))
        self.out.flush()
        self.height, self.last = len(lines), list(lines)

    def close(self, message: str | None = None) -> None:
        """Leave the block on screen and move below it; show the cursor again."""
        end = "\n" if self.height else ""
        self.out.write(f"{end}\x1b[?25h" + (f"{message}\n" if message else ""))
        self.out.flush()
        self.height, self.last = 0, None


def fit(line: str, width: int) -> str:
    """Cut a plain-text line to `width` columns (a wrapped line would break the block)."""
    return line if len(line) <= width else line[:max(0, width - 1)] + "…"


class TerminalPlayer:
    """Plays the pair in the terminal, in colour half-blocks, above the status lines."""

    def __init__(self, out: TextIO | None = None, truecolor: bool | None = None) -> None:
        self.block = TerminalBlock(out)
        self.truecolor = truecolor_supported() if truecolor is None else truecolor
        self.left = self.right = np.zeros((1, 84, 84), np.uint8)
        self._cache: dict[tuple[int, int, int], list[str]] = {}

    def load(self, left: np.ndarray, right: np.ndarray) -> None:
        self.left, self.right = left, right
        self._cache.clear()

    def draw(self, t: int, status: list[str]) -> None:
        cols, lines = shutil.get_terminal_size((MAX_COLUMNS, 24))
        size = terminal_clip_size(cols, lines, len(status))
        i, j = t % len(self.left), t % len(self.right)
        key = (i, j, size)
        if key not in self._cache:
            self._cache[key] = render_pair(self.left[i], self.right[j], (i + 1) / len(self.left),
                                           (j + 1) / len(self.right), size, self.truecolor)
        width = min(cols, MAX_COLUMNS) - 1
        self.block.draw(self._cache[key] + [fit(s, width) for s in status])

    def close(self, message: str | None = None) -> None:
        self.block.close(message)


# -------------------------------------------------------------------------------- window


def clip_figure(n_clips: int, titles: list[str], zoom: int = ZOOM, footer: str = "",
                title: str = "", geometry: str | None = None):
    """A TkAgg figure with `n_clips` 84x84 grey images at `zoom` side by side, each with a
    progress bar under it. Returns (fig, images, bars, title_texts)."""
    import matplotlib

    matplotlib.use("TkAgg")
    matplotlib.rcParams["toolbar"] = "None"
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    side, margin, gap, top, bar_h, bottom = 84 * zoom, 16, 24, 30, 10, 40
    width = 2 * margin + n_clips * side + (n_clips - 1) * gap
    height = top + side + 8 + bar_h + bottom
    dpi = 100
    fig = plt.figure(figsize=(width / dpi, height / dpi), dpi=dpi, facecolor="#e8e8e8")
    try:
        fig.canvas.manager.set_window_title(title or "clips")
        if geometry:
            fig.canvas.manager.window.wm_geometry(geometry)
    except AttributeError:
        pass
    images, bars, texts = [], [], []
    for k in range(n_clips):
        x = (margin + k * (side + gap)) / width
        ax = fig.add_axes((x, (bottom + bar_h + 8) / height, side / width, side / height))
        ax.set_axis_off()
        images.append(ax.imshow(np.zeros((84, 84), np.uint8), cmap="gray", vmin=0, vmax=255,
                                interpolation="nearest"))
        texts.append(fig.text(x + side / width / 2, 1 - 8 / height, titles[k], ha="center",
                              va="top", fontsize=12))
        bar_ax = fig.add_axes((x, bottom / height, side / width, bar_h / height))
        bar_ax.set_xlim(0, 1)
        bar_ax.set_ylim(0, 1)
        bar_ax.set_axis_off()
        bar_ax.add_patch(Rectangle((0, 0), 1, 1, color="#bbbbbb"))
        bars.append(bar_ax.add_patch(Rectangle((0, 0), 0, 1, color="#ff7f0e")))
    if footer:
        fig.text(0.5, 14 / height, footer, ha="center", va="center", fontsize=10)
    plt.show(block=False)
    fig.canvas.flush_events()
    return fig, images, bars, texts


def window_open(fig) -> bool:
    import matplotlib.pyplot as plt

    return plt.fignum_exists(fig.number)


class WindowPlayer:
    """Plays the pair in a matplotlib window (zoom x4); the status lines go to the terminal."""

    def __init__(self, title: str = "Which clip is better?", geometry: str | None = "+0+0",
                 out: TextIO | None = None, footer: str = LABELLING_FOOTER) -> None:
        self.title, self.geometry, self.footer = title, geometry, footer
        self.block = TerminalBlock(out)
        self.fig = None
        self.left = self.right = np.zeros((1, 84, 84), np.uint8)

    def _open(self) -> None:
        self.fig, self.images, self.bars, _ = clip_figure(
            2, ["left (L)", "right (R)"], footer=self.footer, title=self.title,
            geometry=self.geometry)

    def load(self, left: np.ndarray, right: np.ndarray) -> None:
        self.left, self.right = left, right

    def draw(self, t: int, status: list[str]) -> None:
        if self.fig is None or not window_open(self.fig):  # first pair, or the user closed it
            self._open()
        for image, bar, clip in zip(self.images, self.bars, (self.left, self.right)):
            image.set_data(clip[t % len(clip)])
            bar.set_width((t % len(clip) + 1) / len(clip))
        self.fig.canvas.draw_idle()
        self.fig.canvas.flush_events()
        cols = min(shutil.get_terminal_size((MAX_COLUMNS, 24)).columns, MAX_COLUMNS) - 1
        self.block.draw([fit(s, cols) for s in status])

    def close(self, message: str | None = None) -> None:
        self.block.close(message)
        if self.fig is not None:
            import matplotlib.pyplot as plt

            plt.close(self.fig)
            self.fig = None
