"""Small builders shared by tests, and a wait on a condition."""
import queue
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import TypeVar

import numpy as np

from clips.clip import STACK, Clip, Preference

T = TypeVar("T")


def wait_until(condition: Callable[[], T], timeout: float, what: str, poll_s: float = 0.05,
               explain: Callable[[], str] | None = None) -> T:
    """`condition()`'s first truthy value, asked every `poll_s` seconds. If none comes within
    `timeout` seconds the test fails, naming `what` it waited for (and `explain()`'s text)."""
    end = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= end:
            message = f"timed out after {timeout} s waiting for {what}"
            raise AssertionError(message if explain is None else f"{message}; {explain()}")
        time.sleep(poll_s)


class NonBlockingOnly:
    """A queue on which a blocking `put` fails the test: what "never blocks the agent" means for
    a sender, checked without timing it. Everything else is the wrapped queue's."""

    def __init__(self, q) -> None:
        self._q = q

    def put(self, *args, **kwargs):
        raise AssertionError("the sender made a blocking put")

    def __getattr__(self, name: str):
        return getattr(self._q, name)


def clip_from_stacks(stacks: np.ndarray, actions, true_rewards, dones=None) -> Clip:
    """A clip from consecutive uint8 (T, 4, 84, 84) observations."""
    assert stacks.ndim == 4 and stacks.shape[1] == STACK, stacks.shape
    frames = np.concatenate([stacks[0, :-1], stacks[:, -1]], axis=0)
    return Clip.pack(np.ascontiguousarray(frames, dtype=np.uint8),
                   np.asarray(actions, dtype=np.int64), np.asarray(true_rewards, dtype=np.float32),
                   None if dones is None else np.asarray(dones, dtype=bool))


def random_clip(rng: np.random.Generator, steps: int = 25, n_actions: int = 5,
                dot_density: float | None = None, dones: bool = False) -> Clip:
    """A clip of random frames (any grey level; with `dot_density`, black with that share of
    white pixels), random actions, normal true rewards and, if asked, random episode ends."""
    shape = (steps + STACK - 1, 84, 84)
    frames = (rng.integers(0, 256, size=shape, dtype=np.uint8) if dot_density is None
              else (rng.random(shape) < dot_density).astype(np.uint8) * 255)
    return Clip.pack(frames, rng.integers(0, n_actions, steps),
                   rng.normal(size=steps).astype(np.float32),
                   rng.random(steps) < 0.1 if dones else None)


def dot_clip(x: int, steps: int = 25, value: int = 255, moving: bool = False) -> Clip:
    """A 4x4 dot of grey `value` on black at column `x`, or from `x` moving one pixel right a
    frame; no actions, no reward."""
    frames = np.zeros((steps + STACK - 1, 84, 84), np.uint8)
    for t in range(len(frames)):
        left = x + t if moving else x
        frames[t, 40:44, left:left + 4] = value
    return Clip.pack(frames, np.zeros(steps, np.int64), np.zeros(steps, np.float32))


_FRAMES = {t: np.zeros((t + 3, 84, 84), np.uint8) for t in (1, 2, 3, 5, 25)}  # shared, read-only


def reward_clip(rewards, dones=None, value: int | None = None) -> Clip:
    """A clip with the given per-step true rewards; `value` fills its frames (else shared zeros)."""
    rewards = np.asarray(rewards, np.float32)
    t = len(rewards)
    frames = _FRAMES[t] if value is None else np.full((t + 3, 84, 84), value, np.uint8)
    return Clip.pack(frames, np.zeros(t, np.int64), rewards,
                     None if dones is None else np.asarray(dones, bool))


def random_pref(rng: np.random.Generator, is_validation: bool = False, t: int = 25) -> Preference:
    """A label between two random clips of `t` steps: left, right or a tie, at random."""
    return Preference(random_clip(rng, t), random_clip(rng, t), float(rng.choice([0.0, 0.5, 1.0])),
                      is_validation=is_validation)


# MovingDot drawn directly at 84x84, no env code: a 2x2 dot whose top-left corner walks on the
# integer grid, 2 px per agent step (the env's 4 px per step in 210x160 is 1.6-2.1 px here).
DOT_STEP = {0: (0, 0), 1: (0, 2), 2: (2, 0), 3: (0, -2), 4: (-2, 0)}  # noop, down, right, up, left
DOT_CENTRE = np.array([41.5, 41.5])  # the frame's centre, in pixel-centre coordinates


def _render_dot(p: np.ndarray) -> np.ndarray:
    frame = np.zeros((84, 84), np.uint8)
    frame[p[1]:p[1] + 2, p[0]:p[0] + 2] = 255
    return frame


def moving_dot_clip(rng: np.random.Generator, t: int = 25) -> Clip:
    """A random walk; true reward +1 per step that ends closer to the centre, -1 farther, 0 equal."""
    p = rng.integers(0, 83, size=2)  # (x, y) of the dot's top-left pixel
    frames = [_render_dot(p)] * 3
    actions = rng.integers(0, 5, t)
    rewards = np.zeros(t, np.float32)
    for i, a in enumerate(actions):
        frames.append(_render_dot(p))  # the newest frame of the stack seen at step i
        q = np.clip(p + DOT_STEP[int(a)], 0, 82)
        rewards[i] = np.sign(np.linalg.norm(p + 0.5 - DOT_CENTRE) - np.linalg.norm(q + 0.5 - DOT_CENTRE))
        p = q
    return Clip.pack(np.stack(frames), actions.astype(np.int64), rewards)


def moving_dot_pref(rng: np.random.Generator, is_validation: bool) -> Preference:
    """Labelled by true return, as the synthetic oracle does; equal returns are a tie."""
    left, right = moving_dot_clip(rng), moving_dot_clip(rng)
    diff = left.true_return - right.true_return
    return Preference(left, right, 1.0 if diff > 0 else 0.0 if diff < 0 else 0.5,
                      is_validation=is_validation)


def drained(q) -> list:
    """Everything on a queue now, without waiting."""
    items = []
    while True:
        try:
            items.append(q.get_nowait())
        except queue.Empty:
            return items


def http_call(url: str, data: bytes | None = None, timeout: float = 10.0) -> tuple[int | None, bytes]:
    """GET `url` (POST `data`): the status and the body; None when nothing answers."""
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data), timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except OSError:
        return None, b""


def write_half_a_message(q) -> None:
    """What a sender killed part-way through a large item leaves in a multiprocessing queue's
    pipe: a length and only some of the bytes (reading the queue then waits for the rest)."""
    import os
    import struct

    os.write(q._writer.fileno(), struct.pack("!i", 1_000_000) + b"x" * 100)  # noqa: SLF001


def _fail_to_unpickle(error: type[Exception]) -> None:
    raise error("this item does not unpickle")


class Unpicklable:
    """An item that pickles but raises `error` as it is unpickled (in the reading process)."""

    def __init__(self, error: type[Exception] = RuntimeError) -> None:
        self.error = error

    def __reduce__(self):
        return _fail_to_unpickle, (self.error,)
