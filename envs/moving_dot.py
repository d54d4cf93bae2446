"""MovingDot: the earlier reproduction's toy task, a dot that should be steered to the centre.

Semantics (the earlier TensorFlow reproduction's): a 210x160x3 black frame with a 4x4 white dot;
actions 0 noop, 1 down, 2 right, 3 up, 4 left move it one pixel (clipped to the frame); reward +1
if the dot ends a frame closer to the centre (x=80, y=105), -1 if farther, 0 if equal; random
start; 1,000 frames per episode.

`MovingDotEnv` is the gymnasium env (raw frames, the rewards of its skipped frames summed).
`MovingDotVecEnv` runs N of them in numpy with the Atari envs' preprocessing (frameskip 4 with
summed rewards, max-pool of the last two frames, 84x84 grey, 4-frame stack) and, unlike them,
each step's reward clipped to its sign, as the earlier reproduction's, whose figures its returns
are compared with. It renders no 210x160 frame: the dot is separable, so its area-resampled
image is an outer product of two 84-vectors (the max of two such images: for a dot that moves a
pixel a frame, the image of the two frames' max, up to rounding).
"""
from __future__ import annotations

import gymnasium as gym
import numpy as np

from envs.vec_env import StepResult, VecEnv

HEIGHT, WIDTH, DOT = 210, 160, 4
CENTRE_X, CENTRE_Y = 80, 105
EPISODE_FRAMES = 1000
ACTION_NAMES = ("noop", "down", "right", "up", "left")
N_ACTIONS = len(ACTION_NAMES)
# action -> (dx, dy), in ACTION_NAMES' order
MOVES = np.array([[0, 0], [0, 1], [1, 0], [0, -1], [-1, 0]], dtype=np.int64)


def _distance2(xy: np.ndarray) -> np.ndarray:
    """Squared distance of the dot's top-left corner from the centre (compared, never summed)."""
    return (xy[..., 0] - CENTRE_X) ** 2 + (xy[..., 1] - CENTRE_Y) ** 2


def _move(xy: np.ndarray, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One frame of motion for positions (..., 2); returns the new positions and rewards."""
    new = xy + MOVES[actions]
    new[..., 0] = np.clip(new[..., 0], 0, WIDTH - DOT)
    new[..., 1] = np.clip(new[..., 1], 0, HEIGHT - DOT)
    reward = np.sign(_distance2(xy) - _distance2(new)).astype(np.float32)
    return new, reward


class MovingDotEnv(gym.Env):
    """Single MovingDot env with raw 210x160x3 frames and an optional built-in frameskip."""

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(self, frameskip: int = 1, render_mode: str | None = None):
        self.frameskip = frameskip
        self.render_mode = render_mode
        self.observation_space = gym.spaces.Box(0, 255, (HEIGHT, WIDTH, 3), np.uint8)
        self.action_space = gym.spaces.Discrete(N_ACTIONS)
        self.xy = np.zeros(2, dtype=np.int64)
        self.frames = 0

    def _frame(self) -> np.ndarray:
        frame = np.zeros((HEIGHT, WIDTH, 3), dtype=np.uint8)
        x, y = self.xy
        frame[y:y + DOT, x:x + DOT] = 255
        return frame

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.xy = np.array([self.np_random.integers(0, WIDTH - DOT + 1),
                            self.np_random.integers(0, HEIGHT - DOT + 1)], dtype=np.int64)
        self.frames = 0
        return self._frame(), {"xy": self.xy.copy()}

    def step(self, action: int):
        total = 0.0
        for _ in range(self.frameskip):
            self.xy, reward = _move(self.xy, np.int64(action))
            total += float(reward)
            self.frames += 1
            if self.frames >= EPISODE_FRAMES:
                break
        return self._frame(), total, False, self.frames >= EPISODE_FRAMES, {"xy": self.xy.copy()}

    def render(self) -> np.ndarray:
        return self._frame()


def area_weights(n_in: int, n_out: int) -> np.ndarray:
    """(n_out, n_in) matrix of area-interpolation weights (rows sum to 1): `W_rows @ image @
    W_cols.T` resizes as an area resize does."""
    scale = n_in / n_out
    w = np.zeros((n_out, n_in))
    for o in range(n_out):
        lo, hi = o * scale, (o + 1) * scale
        for i in range(int(np.floor(lo)), min(int(np.ceil(hi)), n_in)):
            w[o, i] = (min(hi, i + 1) - max(lo, i)) / scale
    return w


_ROW_W = area_weights(HEIGHT, 84)
_COL_W = area_weights(WIDTH, 84)
# Cumulative sums let us take the weight of a 4-pixel dot span for every env at once.
_ROW_CUM = np.concatenate([np.zeros((84, 1)), np.cumsum(_ROW_W, axis=1)], axis=1)
_COL_CUM = np.concatenate([np.zeros((84, 1)), np.cumsum(_COL_W, axis=1)], axis=1)


def render_84(xy: np.ndarray) -> np.ndarray:
    """84x84 grey frames (uint8, (N, 84, 84)) of dots at top-left corners xy (N, 2)."""
    x, y = xy[:, 0], xy[:, 1]
    rows = _ROW_CUM[:, y + DOT] - _ROW_CUM[:, y]  # (84, N)
    cols = _COL_CUM[:, x + DOT] - _COL_CUM[:, x]
    return np.rint(255.0 * np.einsum("in,jn->nij", rows, cols)).astype(np.uint8)


class MovingDotVecEnv(VecEnv):
    """N MovingDot envs with Atari-style preprocessing, stepped together in numpy."""

    def __init__(self, num_envs: int, seed: int = 0, frameskip: int = 4, stack: int = 4):
        self.num_envs = num_envs
        self.num_actions = N_ACTIONS
        self.frameskip = frameskip
        self.rng = np.random.default_rng(seed)
        self.xy = np.zeros((num_envs, 2), dtype=np.int64)
        self.frame_count = np.zeros(num_envs, dtype=np.int64)
        self.obs = np.zeros((num_envs, stack, 84, 84), dtype=np.uint8)
        self._init_episode_stats()

    def _random_xy(self, n: int) -> np.ndarray:
        return np.stack([self.rng.integers(0, WIDTH - DOT + 1, n),
                         self.rng.integers(0, HEIGHT - DOT + 1, n)], axis=1)

    def reset(self, seed: int | None = None) -> np.ndarray:
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.xy = self._random_xy(self.num_envs)
        self.frame_count[:] = 0
        self.obs[:] = 0  # like ale-py: a new episode's stack is zeros and its first frame
        self.obs[:, -1] = render_84(self.xy)
        self._init_episode_stats()
        return self.obs.copy()

    def step(self, actions: np.ndarray) -> StepResult:
        actions = np.asarray(actions, dtype=np.int64)
        rewards = np.zeros(self.num_envs, dtype=np.float32)
        prev = self.xy
        for _ in range(self.frameskip):
            prev = self.xy
            self.xy, r = _move(self.xy, actions)
            rewards += r
        # Summed over the skipped frames, then clipped to its sign as in the earlier reproduction,
        # so returns compare with its figures (envs/scores.py: scripted policy 21.8, random -2.5).
        rewards = np.sign(rewards)
        self.frame_count += self.frameskip
        frame = np.maximum(render_84(prev), render_84(self.xy))  # max-pool of the last two frames
        dones = self.frame_count >= EPISODE_FRAMES
        self.obs[:, :-1] = self.obs[:, 1:]
        self.obs[:, -1] = frame
        final_obs = None
        if dones.any():
            final_obs = self.obs.copy()
            n = int(dones.sum())
            self.xy[dones] = self._random_xy(n)
            self.frame_count[dones] = 0
            self.obs[dones] = 0
            self.obs[dones, -1] = render_84(self.xy[dones])
        finished = self._account(rewards, dones)
        # Every episode ends at its time limit: truncated, never terminated.
        return StepResult(self.obs.copy(), rewards, dones, finished, truncated=dones.copy(),
                          final_obs=final_obs)

    def scripted_actions(self) -> np.ndarray:
        """The greedy go-to-centre policy: move along the axis farther from the centre, noop there."""
        dx = CENTRE_X - self.xy[:, 0]
        dy = CENTRE_Y - self.xy[:, 1]
        act = np.where(np.abs(dx) >= np.abs(dy), np.where(dx > 0, 2, 4), np.where(dy > 0, 1, 3))
        # Within reach of the centre in one agent step a full move would overshoot; stay put.
        return np.where((np.abs(dx) < self.frameskip) & (np.abs(dy) < self.frameskip), 0, act)


def register() -> None:
    """Register MovingDotNoFrameskip-v0 (frameskip 1) and MovingDot-v0 (frameskip 4)."""
    for env_id, skip in (("MovingDotNoFrameskip-v0", 1), ("MovingDot-v0", 4)):
        if env_id not in gym.registry:
            gym.register(env_id, entry_point=MovingDotEnv, kwargs={"frameskip": skip})
