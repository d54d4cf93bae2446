"""A behaviour the score does not reward: Enduro's "keep alongside other cars" (§3.2, Fig. 4).

Clips hold only the agent's 84x84 grey frames (Enduro's bottom panel blanked from row 62 by
envs/atari.py), so the cars are found in the frames. What those frames show, checked in the
day, snow, dusk, night and fog phases (six 3,000-step episodes of random and of mostly
accelerating play, about 200 frames looked at by eye, the player's rows also in full-size ALE
frames):
- the player's car is at the bottom: its top row is 54-57 and its bottom row 58-61 (full-size
  rows 144-154 at rest, up to 8 higher when fast), about 9 columns wide, and its body is grey 192
  exactly in every phase; other cars' blurred edges hit 192 only in stray pixels;
- the ground is one grey (40/41 day, 236 snow, 47 dusk, 0 night, 74 fog); columns 0-4 are the
  Atari's left border;
- in the player's rows a road edge is 1-3 pixels wide per row, with one-row kinks 4-5 wide on
  curves; another car is 4-9 wide, over several rows by day, and in one row at night and in fog,
  where only its two taillights show, a gap of 1-2 pixels apart.
"Level with another car": another car is drawn in at least one of the player's rows, at any
distance to the side (the road there is only about seven car widths wide, so it is beside the
player), but not touching the player's car (then it is a collision, not driving alongside).
"Ahead": a car drawn between row AHEAD_TOP and the player's top row; further up the road cars are
a few pixels wide, as thin as the road's edges. The shaped teacher credits closing in on it.
"""
from __future__ import annotations

import numpy as np

from clips.clip import STACK, Clip

SEARCH_ROWS = slice(50, 62)  # the player's car, in any of its rows, and the ground around it
PLAYER_GREY = 192  # the player's car body, in every phase
FIRST_COL = 5  # columns 0-4: the Atari's left border
CAR_WIDTH = 9  # the player's car, in columns
BODY_ROWS = 4  # ... and its body (grey 192 by day) in rows
NEAR_GREY = 16  # the player's body in the snow is this close to 192
MIN_DIFF = 24  # a pixel this far from the ground grey is part of something drawn
MAX_GAP = 2  # gaps this narrow inside a run are closed (night: a car's two taillights)
MIN_CAR_WIDTH = 4  # a car in two rows is this wide; a road edge is 1-3 wide
MIN_LONE_WIDTH = 6  # ... in one row (night: its taillights); a road edge's kink is 4-5 wide
AHEAD_TOP = 34  # cars ahead are looked for from this row down: above it they are 1-3 pixels wide


def find_player(frame: np.ndarray) -> tuple[int, int, int] | None:
    """(first row, last row + 1, centre column) of the player's car; None when no grey-192 pixel
    is near the bottom (not an Enduro frame). The car is the car-wide window with the most 192s
    (another car's blurred edge hits 192 in a few stray pixels; the player's body in the snow in
    as few as two, so equal counts go to the lower window, the player being the lowest car). Its
    body is the up to BODY_ROWS rows around its lowest 192 with greys near 192 in its columns (in
    the snow most of it is 193-210), and one more row either side takes in the blurred edges."""
    region = frame[SEARCH_ROWS, FIRST_COL:].astype(np.int16)
    ys, xs = np.nonzero(region == PLAYER_GREY)
    if not len(xs):
        return None
    per_col = np.bincount(xs, weights=1.0 + ys / 1000, minlength=region.shape[1])
    best = int(np.argmax(np.convolve(per_col, np.ones(CAR_WIDTH), mode="same")))
    mine = np.abs(xs - best) <= CAR_WIDTH // 2
    centre = int(np.median(xs[mine]))
    cols = slice(max(centre - CAR_WIDTH // 2, 0), centre + CAR_WIDTH // 2 + 1)
    body = set(np.flatnonzero((np.abs(region[:, cols] - PLAYER_GREY) <= NEAR_GREY).any(axis=1)))
    top = bottom = int(ys[mine].max())
    while top - 1 in body and bottom - top < BODY_ROWS - 1:
        top -= 1
    while bottom + 1 in body and bottom - top < BODY_ROWS - 1:
        bottom += 1
    first, stop = SEARCH_ROWS.start + max(top - 1, 0), SEARCH_ROWS.start + bottom + 2
    return first, min(stop, SEARCH_ROWS.stop), FIRST_COL + centre


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """[start, end) of each run of True in a 1-D mask, runs closer than MAX_GAP + 1 joined."""
    cols = np.flatnonzero(mask)
    if not len(cols):
        return []
    breaks = np.flatnonzero(np.diff(cols) > MAX_GAP + 1)
    starts = np.concatenate([[cols[0]], cols[breaks + 1]])
    ends = np.concatenate([cols[breaks], [cols[-1]]]) + 1
    return list(zip(starts.tolist(), ends.tolist()))


def _cars_in_rows(frame: np.ndarray, rows: range, ground: int,
                  player_cols: tuple[int, int] | None = None) -> np.ndarray:
    """bool (84, 84): where cars are drawn in `rows`. Per row, runs of pixels far from the ground
    grey, those reaching into `player_cols` dropped (a road edge or a car touching the player joins
    its run and is dropped with it); a car's run is MIN_LONE_WIDTH wide, or MIN_CAR_WIDTH wide in
    two adjacent rows at the same columns."""
    wide = np.zeros(frame.shape, dtype=bool)
    lone = np.zeros(frame.shape, dtype=bool)
    for r in rows:
        drawn = np.abs(frame[r].astype(np.int16) - ground) > MIN_DIFF
        drawn[:FIRST_COL] = False
        for start, end in _runs(drawn):
            mine = player_cols is not None and start < player_cols[1] and end > player_cols[0]
            if end - start >= MIN_CAR_WIDTH and not mine:
                wide[r, start:end] = True
                lone[r, start:end] = end - start >= MIN_LONE_WIDTH
    stacked = np.zeros(frame.shape, dtype=bool)
    stacked[1:] |= wide[1:] & wide[:-1]
    stacked[:-1] |= wide[:-1] & wide[1:]
    return lone | stacked


def _ground(frame: np.ndarray) -> int:
    return int(np.bincount(frame[SEARCH_ROWS, FIRST_COL:].ravel()).argmax())


def _level(frame: np.ndarray, player: tuple[int, int, int], ground: int) -> np.ndarray:
    top, stop, centre = player
    half = CAR_WIDTH // 2
    return _cars_in_rows(frame, range(top, stop), ground, (centre - half, centre + half + 1))


def other_cars(frame: np.ndarray) -> np.ndarray:
    """bool (84, 84): where other cars are drawn in the player's rows, not touching the player's
    car."""
    assert frame.shape == (84, 84) and frame.dtype == np.uint8, (frame.shape, frame.dtype)
    player = find_player(frame)
    if player is None:
        return np.zeros(frame.shape, dtype=bool)
    return _level(frame, player, _ground(frame))


def cars_ahead(frame: np.ndarray) -> np.ndarray:
    """bool (84, 84): where other cars are drawn ahead of the player's car, from row AHEAD_TOP
    down to the player's top row."""
    player = find_player(frame)
    if player is None:
        return np.zeros(frame.shape, dtype=bool)
    return _ahead(frame, player, _ground(frame))


def _ahead(frame: np.ndarray, player: tuple[int, int, int], ground: int) -> np.ndarray:
    return _cars_in_rows(frame, range(AHEAD_TOP, player[0]), ground)


def _gap_ahead(frame: np.ndarray) -> tuple[int | None, int, int | None]:
    """`gap_ahead`; the most it can be, the rows from AHEAD_TOP to the player's top row; and the
    nearest car's lowest row drawn, level or ahead (None when none is seen)."""
    player = find_player(frame)
    if player is None:
        return None, 1, None
    top, ground = player[0], _ground(frame)
    level = np.flatnonzero(_level(frame, player, ground).any(axis=1))
    if len(level):
        return 0, top - AHEAD_TOP, int(level.max())
    rows = np.flatnonzero(_ahead(frame, player, ground).any(axis=1))
    if not len(rows):
        return None, top - AHEAD_TOP, None
    return int(top - rows.max()), top - AHEAD_TOP, int(rows.max())


def gap_ahead(frame: np.ndarray) -> int | None:
    """Rows between the player's car and the nearest other car ahead of it (0: one is level with
    it); None when none is seen between AHEAD_TOP and the player, or there is no player."""
    return _gap_ahead(frame)[0]


def nearest_car(frame: np.ndarray) -> tuple[float, int | None]:
    """(`nearness`, the nearest car's lowest row drawn, level or ahead; None when none is seen)."""
    gap, most, row = _gap_ahead(frame)
    return (0.0 if gap is None else 1.0 - gap / most), row


def nearness(frame: np.ndarray) -> float:
    """1 when another car is level with the player, falling linearly with the gap to the nearest
    car ahead, to 0 for a car at AHEAD_TOP and when no car is seen ahead."""
    return nearest_car(frame)[0]


# A car moving this many rows or more in one agent step is not held: random play's nearest car
# climbs 2-3 rows a step (docs/experiments.md, "a teacher that credits holding a car's speed").
HOLD_ROWS = 3


def holding(before: int | None, after: int | None) -> float:
    """How nearly the player holds the nearest car's speed over one agent step, from that car's
    lowest row in the frame before and after (`nearest_car`): 1 when it stays in its row, falling
    linearly to 0 at HOLD_ROWS rows (a car passed and another seen is far more); 0 without a car
    in both frames."""
    if before is None or after is None:
        return 0.0
    return max(0.0, 1.0 - abs(after - before) / HOLD_ROWS)


def is_alongside(frame: np.ndarray) -> bool:
    """Whether another car is level with the player's car in one 84x84 grey Enduro frame."""
    return bool(other_cars(frame).any())


def alongside_steps(frames: np.ndarray) -> np.ndarray:
    """bool (T,): `is_alongside` for each frame of uint8 (T, 84, 84)."""
    return np.array([is_alongside(f) for f in frames], dtype=bool)


def alongside_share(frames: np.ndarray) -> float:
    """The share of frames in which the player is level with another car (a policy's measure)."""
    return float(alongside_steps(frames).mean()) if len(frames) else 0.0


def judges(env_id: str) -> bool:
    """Whether the detector reads this env's frames (Enduro's)."""
    return env_id.startswith("Enduro")


SHARE_EVERY = 8  # the training curve's share reads one agent step in this many (~1 ms a frame)


class EpisodeShares:
    """Per env, the share of the running episode's steps level with another car, read on one
    agent step in `every` (the newest frame of each env's stack)."""

    def __init__(self, n_envs: int, every: int = SHARE_EVERY) -> None:
        self.level = np.zeros(n_envs)
        self.seen = np.zeros(n_envs)
        self.every, self.step = every, 0

    def observe(self, newest: np.ndarray) -> None:
        """One agent step of every env: uint8 (n_envs, 84, 84), the frames that step led to."""
        if self.step % self.every == 0:
            self.level += alongside_steps(newest)
            self.seen += 1
        self.step += 1

    def end(self, i: int) -> float | None:
        """Env i's episode ended: its share (None if no step of it was read); the count starts
        again."""
        share = float(self.level[i] / self.seen[i]) if self.seen[i] else None
        self.level[i] = self.seen[i] = 0
        return share


class LevelShare:
    """A rollout observer for Enduro runs: each finished episode's share of its steps level with
    another car (`EpisodeShares`), set on its record (`alongside_share`) for the training curve
    (charts/alongside_share)."""

    def __init__(self, n_envs: int, every: int = SHARE_EVERY) -> None:
        self.shares = EpisodeShares(n_envs, every)

    def __call__(self, rollout) -> None:
        """Judge the rollout's steps, each before the episodes that end on it."""
        from a2c.rollout import episode_ends

        for t, ends in episode_ends(rollout):
            self.shares.observe(rollout.obs[t][:, -1])
            for i, record in ends:
                record.alongside_share = self.shares.end(i)


def make_level_share_observers(n_envs: int) -> list[LevelShare]:
    """The observer as an A2C process attaches it (`launch.loop.Channels.a2c_observers`)."""
    return [LevelShare(n_envs)]


def clip_alongside(clip: Clip) -> int:
    """How many of a clip's steps end level with a car: each step's newest frame is judged."""
    return int(alongside_steps(clip.step_frames()).sum())


def clip_closing(clip: Clip, ends: int = 3) -> float:
    """How much nearer to another car a clip ends than it starts: the median `nearness` of its
    last `ends` frames less that of the `ends` frames up to its first step (medians, so that a car
    seen in one frame and missed in the next does not decide it). In -1..1."""
    frames = clip.frames()[STACK - 1 - min(ends - 1, STACK - 1):]
    near = np.array([nearness(f) for f in np.concatenate([frames[:ends], frames[-ends:]])])
    return float(np.median(near[ends:]) - np.median(near[:ends]))
