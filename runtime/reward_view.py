"""The game beside a scrolling plot of the predicted reward r̂: each ensemble member's, their mean,
and the game's own reward marked, drawn with numpy into RGB frames (for a GIF or a window)."""
from __future__ import annotations

import numpy as np

ZOOM = 3  # the 84x84 game frame is shown 252x252
STEPS_SHOWN = 112  # the plot scrolls over the last this many agent steps
PX_PER_STEP = 3
BACKGROUND = (24, 24, 24)
AXIS = (90, 90, 90)
MEMBER_COLOURS = [(230, 159, 0), (86, 180, 233), (0, 158, 115), (204, 121, 167), (240, 228, 66)]
MEAN_COLOUR = (255, 255, 255)
GAME_UP, GAME_DOWN = (60, 200, 60), (220, 60, 60)  # a step where the game's reward is + / -
GAME_STRIP = 12  # pixels along the bottom that mark the game's reward


class RewardTrace:
    """r̂ of every step so far (each member's, normalised, as A2C's reward averages them) and the
    game's reward; `draw()` plots the last STEPS_SHOWN of them."""

    def __init__(self, ensemble_size: int, height: int = 84 * ZOOM) -> None:
        self.members: list[np.ndarray] = []  # (ensemble_size,) a step
        self.means: list[float] = []  # r̂ of each step: the members' mean
        self.game: list[float] = []
        self.ensemble_size, self.height = ensemble_size, height
        self.width = STEPS_SHOWN * PX_PER_STEP
        self.scale = 1e-6  # the largest |r̂| of a member so far: the plot's half-height

    def add(self, member_rewards: np.ndarray, game_reward: float) -> None:
        member_rewards = np.asarray(member_rewards, dtype=np.float32).reshape(self.ensemble_size)
        self.members.append(member_rewards)
        self.means.append(float(member_rewards.mean()))
        self.game.append(float(game_reward))
        self.scale = max(self.scale, float(np.abs(member_rewards).max()))

    def draw(self) -> np.ndarray:
        """The plot of the last STEPS_SHOWN steps, uint8 (height, width, 3)."""
        img = np.empty((self.height, self.width, 3), dtype=np.uint8)
        img[:] = BACKGROUND
        mid = (self.height - GAME_STRIP) // 2
        img[mid, :] = AXIS
        shown = np.array(self.members[-STEPS_SHOWN:]).reshape(-1, self.ensemble_size)
        game = self.game[-STEPS_SHOWN:]
        x = np.arange(len(shown)) * PX_PER_STEP + PX_PER_STEP // 2
        for i, g in enumerate(game):  # the game's reward: a strip along the bottom
            if g:
                img[-GAME_STRIP:, i * PX_PER_STEP:(i + 1) * PX_PER_STEP] = (
                    GAME_UP if g > 0 else GAME_DOWN)
        to_y = lambda v: np.clip(mid - v / self.scale * (mid - 4), 0, 2 * mid)  # noqa: E731
        for k in range(self.ensemble_size):
            _polyline(img, x, to_y(shown[:, k]), MEMBER_COLOURS[k % len(MEMBER_COLOURS)], 1)
        if len(shown):
            _polyline(img, x, to_y(np.array(self.means[-STEPS_SHOWN:])), MEAN_COLOUR, 2)
        return img


def side_by_side(frame: np.ndarray, plot: np.ndarray) -> np.ndarray:
    """The 84x84 grey game frame, zoomed, to the left of the plot: uint8 (H, W, 3)."""
    game = np.repeat(np.repeat(frame, ZOOM, axis=0), ZOOM, axis=1)
    return np.concatenate([np.repeat(game[:, :, None], 3, axis=2), plot], axis=1)


def _polyline(img: np.ndarray, x: np.ndarray, y: np.ndarray, colour, thickness: int) -> None:
    """Straight clips through the points (x, y), `thickness` pixels thick."""
    if len(x) == 0:
        return
    if len(x) == 1:
        xs, ys = x.astype(float), y.astype(float)
    else:
        n = max(2, int(np.abs(np.diff(y)).max() + PX_PER_STEP) * 2)
        t = np.linspace(0.0, 1.0, n, endpoint=False)
        xs = (x[:-1, None] + np.diff(x)[:, None] * t).ravel()
        ys = (y[:-1, None] + np.diff(y)[:, None] * t).ravel()
        xs, ys = np.append(xs, x[-1]), np.append(ys, y[-1])
    rows, cols = np.rint(ys).astype(int), np.rint(xs).astype(int)
    for d in range(thickness):
        img[np.clip(rows + d, 0, img.shape[0] - 1), np.clip(cols, 0, img.shape[1] - 1)] = colour
