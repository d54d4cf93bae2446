#!/usr/bin/env python3
"""Play a game yourself and save your play as demonstrations, for `--demonstrations FILE`.

    python demonstrate.py EnduroNoFrameskip-v4 my_driving.npz
    python demonstrate.py EnduroNoFrameskip-v4 my_driving.npz --steps 1500 --fps 10

A window shows the game as the agent sees it (84x84 grey, zoomed). Hold the arrow keys to move
and space to fire (Enduro: space accelerates, down brakes; Pong: up and down move the paddle);
the game steps `--fps` times a second with the keys held then. Esc, q or closing the window stops
early. Your play is cut into the agent's 25-step clips and written to FILE (docs/labelling.md,
"Clips of other play").
"""
from __future__ import annotations

import argparse
import sys
import time
from typing import Callable, Sequence

import numpy as np

from clips.clip import Clip
from clips.cutter import ClipCutter
from clips.demonstrations import save_demonstrations
from runtime.script_args import ScriptParser

KEYS_HELP = "arrows move, space fires, Esc stops"
STOP_KEYS = ("escape", "q")
MOVES = {"up": "up", "down": "down", "right": "right", "left": "left", " ": "fire", "space": "fire"}
PADDLE = {"up": "right", "down": "left"}  # a game without up or down (Pong): the arrows still move


def action_for(held: set[str], names: Sequence[str]) -> int:
    """The game's action for the keys held (MOVES), named as ALE names them (e.g. UPRIGHTFIRE,
    lower case here); in a game with neither up nor down, the up and down arrows are its right
    and left (Pong's paddle). Opposite keys cancel; a combination the game lacks lets go of fire,
    then of up or down, then of the rest (noop)."""
    moves = {MOVES[k] for k in held if k in MOVES}
    if "up" not in names and "down" not in names:  # Pong's paddle: RIGHT moves it up, LEFT down
        moves = {PADDLE.get(m, m) for m in moves}
    vertical = "".join(m for m in ("up", "down") if m in moves) if len(
        moves & {"up", "down"}) == 1 else ""
    horizontal = "".join(m for m in ("right", "left") if m in moves) if len(
        moves & {"right", "left"}) == 1 else ""
    fire = "fire" if "fire" in moves else ""
    for name in (vertical + horizontal + fire, vertical + horizontal, horizontal + fire,
                 vertical + fire, horizontal, vertical, fire):
        if name and name in names:
            return names.index(name)
    return names.index("noop")


def play_yourself(env_id: str, held: Callable[[], set[str]],
                  show: Callable[[np.ndarray, float], bool], steps: int, seed: int = 0
                  ) -> list[Clip]:
    """Up to `steps` steps of one person's play, cut into clips: before each step `show` gets
    the frame the step acts on and the share of steps done (False: stop now), and `held` the
    keys held."""
    from envs import action_names, make_vec_env

    names = action_names(env_id)
    env = make_vec_env(env_id, 1, seed=seed)
    cutter, clips = ClipCutter(1), []
    try:
        obs = env.reset()
        for t in range(steps):
            if not show(obs[0, -1], t / steps):
                break
            action = np.array([[action_for(held(), names)]])
            result = env.step(action[0])
            clips += cutter.observe(np.stack([obs, result.obs]), action,
                                    result.rewards[None], result.dones[None])
            obs = result.obs
    finally:
        env.close()
    return clips


class PlayWindow:
    """The game in a window: the keys held, and a frame shown at most `fps` times a second."""

    def __init__(self, env_id: str, fps: float) -> None:
        import matplotlib

        from pref_interface.labellers.player import clip_figure

        for name in matplotlib.rcParams:  # no key of matplotlib's own (s saves, l logs, ...)
            if name.startswith("keymap."):
                matplotlib.rcParams[name] = []
        self.fig, (self.image,), (self.bar,), _ = clip_figure(1, [env_id], footer=KEYS_HELP,
                                                              title="demonstrate")
        self.keys: set[str] = set()
        self.stopped = False
        self.period, self.last = 1.0 / fps, 0.0
        self.fig.canvas.mpl_connect("key_press_event", self._press)
        self.fig.canvas.mpl_connect("key_release_event", self._release)

    def _press(self, event) -> None:
        self.stopped = self.stopped or event.key in STOP_KEYS
        self.keys.add(event.key)

    def _release(self, event) -> None:
        self.keys.discard(event.key)

    def held(self) -> set[str]:
        return set(self.keys)

    def show(self, frame: np.ndarray, done: float) -> bool:
        from pref_interface.labellers.player import window_open

        if self.stopped or not window_open(self.fig):
            return False
        self.image.set_data(frame)
        self.bar.set_width(done)
        self.fig.canvas.draw_idle()
        time.sleep(max(0.0, self.last + self.period - time.monotonic()))
        self.last = time.monotonic()
        self.fig.canvas.flush_events()
        return True

    def close(self) -> None:
        import matplotlib.pyplot as plt

        plt.close(self.fig)


def main(argv: list[str] | None = None) -> int:
    p = ScriptParser(description=__doc__.splitlines()[0],
                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("env_id", help="the game, e.g. EnduroNoFrameskip-v4")
    p.add_argument("out", help="the demonstrations file to write (never overwritten)")
    p.add_argument("--steps", type=int, default=3000, help="most agent steps played")
    p.add_argument("--fps", type=float, default=15.0,
                   help="agent steps a second (15: the clips' own speed, App. A.2)")
    p.add_argument("--seed", type=int, default=0, help="the game's seed")
    a = p.parse_args(argv)
    from envs import UnknownEnvError, check_seed, env_kind
    from pref_interface.labellers.player import display_available
    from runtime.outputs import prepare_output

    if a.steps < 25 or a.fps <= 0:
        p.error("--steps must be at least 25 (one clip) and --fps positive")
    try:
        env_kind(a.env_id)
        check_seed(a.seed)
    except (UnknownEnvError, ValueError) as e:
        p.error(str(e))
    try:  # after the other checks: a refused command leaves no folder behind
        out = prepare_output(a.out, "out")
    except ValueError as e:
        p.error(str(e))
    if not display_available():
        p.error("playing needs a window: no display here (set DISPLAY, or use ssh -X)")
    window = PlayWindow(a.env_id, a.fps)
    try:
        clips = play_yourself(a.env_id, window.held, window.show, a.steps, a.seed)
    except KeyboardInterrupt:
        print("stopped: nothing written")
        return 130
    finally:
        window.close()
    if not clips:
        print("no clip played through (25 steps): nothing written")
        return 1
    save_demonstrations(out, a.env_id, clips)
    n = len(clips)
    print(f"wrote {n} clip{'s' if n != 1 else ''} ({n * clips[0].actions.size} steps) to {out}; "
          f"use them with --demonstrations {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
