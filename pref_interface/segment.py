"""The paper's unit of comparison: a short clip of agent behaviour, and a label on a pair of them."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SEGMENT_LENGTH = 25  # App. A.2: clips of 25 agent steps (1.7 s at 15 fps)
FRAME_SHAPE = (84, 84)
STACK = 4


@dataclass(frozen=True)
class Segment:
    """A clip of `T` agent steps.

    Observations are 4-frame stacks whose consecutive members share three frames, so only the
    `T + 3` distinct frames are kept: the stack the agent saw at step `t` is `frames[t:t + 4]`.
    """

    frames: np.ndarray  # uint8 (T + 3, 84, 84)
    actions: np.ndarray  # int64 (T,)
    true_rewards: np.ndarray  # float32 (T,): the env's own (unclipped) reward, for synthetic labels
    # bool (T,): `dones[t]` means the episode ended after step t (App. A: the synthetic oracle
    # penalises episode ends instead of showing them to the agent). None: no episode end known.
    dones: np.ndarray | None = None

    def __post_init__(self) -> None:
        t = len(self.actions)
        assert self.frames.dtype == np.uint8 and self.frames.shape == (t + STACK - 1, *FRAME_SHAPE), (
            self.frames.shape)
        assert self.true_rewards.shape == (t,), self.true_rewards.shape
        assert self.dones is None or (self.dones.dtype == np.bool_ and self.dones.shape == (t,)), (
            self.dones.dtype, self.dones.shape)

    def __len__(self) -> int:
        return len(self.actions)

    def stacks(self) -> np.ndarray:
        """The observations as the agent saw them: uint8 (T, 4, 84, 84), a view, not a copy."""
        windows = np.lib.stride_tricks.sliding_window_view(self.frames, STACK, axis=0)
        return np.moveaxis(windows, -1, 1)  # (T, 84, 84, 4) -> (T, 4, 84, 84)

    @property
    def true_return(self) -> float:
        return float(self.true_rewards.sum())

    @property
    def n_episode_ends(self) -> int:
        """How many episodes ended inside the clip (0 when `dones` is None)."""
        return 0 if self.dones is None else int(self.dones.sum())


@dataclass(frozen=True)
class Preference:
    """A label on a pair of segments: `mu` is the probability that `left` is preferred
    (1.0 left better, 0.0 right better, 0.5 equally good; "incomparable" pairs are never stored).
    On the way to the trainer the segments are `PackedSegment`s (pref_interface/packed.py)."""

    left: Segment
    right: Segment
    mu: float
    source: str = "synthetic"  # "synthetic" or "human"
    is_validation: bool = False
    label_id: int | None = None  # its id in the preference store, once stored


@dataclass(frozen=True)
class LabelEdit:
    """A person changed a stored label: its new `mu`, or None to delete it. Applied to the store
    first, then sent to the trainer, which holds a copy of the label."""

    label_id: int
    mu: float | None
