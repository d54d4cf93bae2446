"""The paper's unit of comparison: a short clip of agent behaviour, and a label on a pair of them.

A clip has one form from the agent to a training batch: its frames zlib-packed (sizes and times:
docs/results.md, "Memory"), cut and packed once in the agent's process, then sent, paired, stored
and held as they are. Its frames
are expanded where they are used: a training batch, a query shown to a person, a scored pair.
"""
from __future__ import annotations

import hashlib
import zlib
from dataclasses import dataclass, field, replace

import numpy as np

CLIP_LENGTH = 25  # App. A.2: clips of 25 agent steps (1.7 s at 15 fps)
FRAME_SHAPE = (84, 84)
STACK = 4
ZLIB_LEVEL = 1  # higher levels pack smaller but unpack slower (docs/results.md, "Memory")


@dataclass(frozen=True, eq=False)
class Clip:
    """`T` agent steps. Observations are 4-frame stacks whose consecutive members share three
    frames, so only the `T + 3` distinct frames are kept (packed): the stack the agent saw at
    step `t` is `frames()[t:t + 4]`.

    `expand()` gives the same clip with its frames held unpacked, for a batch that uses them
    several times; a clip is always pickled packed.
    """

    frames_z: bytes  # zlib of uint8 (T + 3, 84, 84)
    actions: np.ndarray  # int64 (T,)
    true_rewards: np.ndarray  # float32 (T,): the env's own (unclipped) reward, for synthetic labels
    # bool (T,): `dones[t]` means the episode ended after step t (App. A: the synthetic oracle
    # penalises episode ends instead of showing them to the agent). None: no episode end known.
    dones: np.ndarray | None = None
    expanded: np.ndarray | None = field(default=None, repr=False)

    @classmethod
    def pack(cls, frames: np.ndarray, actions: np.ndarray, true_rewards: np.ndarray,
             dones: np.ndarray | None = None) -> "Clip":
        """A clip of uint8 (T + 3, 84, 84) frames and the T steps' actions, rewards, ends."""
        t = len(actions)
        assert frames.dtype == np.uint8 and frames.shape == (t + STACK - 1, *FRAME_SHAPE), (
            frames.dtype, frames.shape)
        assert true_rewards.shape == (t,), true_rewards.shape
        assert dones is None or (dones.dtype == np.bool_ and dones.shape == (t,)), (
            dones.dtype, dones.shape)
        return cls(zlib.compress(np.ascontiguousarray(frames).tobytes(), ZLIB_LEVEL), actions,
                   true_rewards, dones)

    def frames(self) -> np.ndarray:
        """uint8 (T + 3, 84, 84), unpacked now unless the clip is expanded."""
        if self.expanded is not None:
            return self.expanded
        return np.frombuffer(zlib.decompress(self.frames_z), np.uint8).reshape(-1, *FRAME_SHAPE)

    def step_frames(self) -> np.ndarray:
        """uint8 (T, 84, 84): the newest frame of each step's observation stack, what a person
        sees played and a teacher reads."""
        return self.frames()[STACK - 1:]

    def expand(self) -> "Clip":
        """The same clip with its frames unpacked once and held."""
        return self if self.expanded is not None else replace(self, expanded=self.frames())

    def stacks(self) -> np.ndarray:
        """The observations as the agent saw them: uint8 (T, 4, 84, 84), a view of `frames()`."""
        windows = np.lib.stride_tricks.sliding_window_view(self.frames(), STACK, axis=0)
        return np.moveaxis(windows, -1, 1)  # (T, 84, 84, 4) -> (T, 4, 84, 84)

    @property
    def key(self) -> bytes:
        """Identifies the clip's content: the same clip in two labels has the same key. It hashes
        the packed bytes (no decompression), which the store keeps as they were packed; a
        demonstration file keeps the frames, packed again as they are read (the same bytes from
        one zlib build)."""
        return hashlib.blake2b(self.frames_z + self.actions.tobytes(), digest_size=16).digest()

    @property
    def nbytes(self) -> int:
        """Bytes held packed (frames and per-step arrays)."""
        return len(self.frames_z) + self.actions.nbytes + self.true_rewards.nbytes + (
            0 if self.dones is None else self.dones.nbytes)

    def __len__(self) -> int:
        return len(self.actions)

    def __getstate__(self) -> dict:
        return {**self.__dict__, "expanded": None}  # across processes, always packed

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)

    @property
    def true_return(self) -> float:
        return float(self.true_rewards.sum())

    @property
    def n_episode_ends(self) -> int:
        """How many episodes ended inside the clip (0 when `dones` is None)."""
        return 0 if self.dones is None else int(self.dones.sum())


@dataclass(frozen=True)
class Preference:
    """A label on a pair of clips: `mu` is the probability that `left` is preferred
    (1.0 left better, 0.0 right better, 0.5 equally good; "incomparable" pairs are never stored)."""

    left: Clip
    right: Clip
    mu: float
    source: str = "synthetic"  # "synthetic" or "human"
    is_validation: bool = False
    label_id: int | None = None  # its id in the preference store, once stored
    # The person who gave it; None for synthetic labels and those stored before names were kept.
    labeller: str | None = None
    # The predictor ensemble's mean P[left better] when that person answered (several people
    # labelling: how often each agrees with it); None where it was not asked.
    ensemble_p: float | None = None
    # Which clip is someone else's play (--demonstrations): "left", "right" or "both"; None
    # where neither is, or the label was stored before this was kept.
    demonstration: str | None = None
    # True where a person saw the pair right clip first (sorting shows the clip it places on
    # either side): their list, edits and "show again" follow the sides they saw. None otherwise.
    shown_swapped: bool | None = None


@dataclass(frozen=True)
class ClipOrder:
    """The training split's sorted clips (--queries sort), worst class first, each clip by its
    `key`: sent by labelling to the trainer after each insertion, for the pairs it implies."""

    classes: list[list[bytes]]


@dataclass(frozen=True)
class LabelEdit:
    """A person changed a stored label: its new `mu`, or None to delete it. Applied to the store
    first, then sent to the trainer, which holds a copy of the label."""

    label_id: int
    mu: float | None
