"""Clips held compactly: what the trainer and the interface keep while labels wait to be used.

A clip's 28 frames of 84x84 are 192 KB as arrays; zlib at level 1 packs a Pong clip to about
3 KB and unpacks it in about 0.15 ms, so a batch is unpacked when it is used (docs/results.md).
"""
from __future__ import annotations

import hashlib
import zlib
from dataclasses import dataclass

import numpy as np

from pref_interface.segment import FRAME_SHAPE, Segment

ZLIB_LEVEL = 1  # level 6 packs Pong clips to half the size but unpacks 3x slower


@dataclass(frozen=True)
class PackedSegment:
    """A `Segment` with its frames compressed; the per-step arrays are small and kept as they are."""

    frames_z: bytes
    actions: np.ndarray
    true_rewards: np.ndarray
    dones: np.ndarray | None

    @staticmethod
    def pack(seg: Segment) -> "PackedSegment":
        return PackedSegment(zlib.compress(seg.frames.tobytes(), ZLIB_LEVEL), seg.actions,
                             seg.true_rewards, seg.dones)

    def unpack(self) -> Segment:
        frames = np.frombuffer(zlib.decompress(self.frames_z), np.uint8).reshape(-1, *FRAME_SHAPE)
        return Segment(frames, self.actions, self.true_rewards, self.dones)

    @property
    def key(self) -> bytes:
        """Identifies the clip's content: the same clip in two labels has the same key."""
        return hashlib.blake2b(self.frames_z + self.actions.tobytes(), digest_size=16).digest()

    @property
    def nbytes(self) -> int:
        return len(self.frames_z) + self.actions.nbytes + self.true_rewards.nbytes + (
            0 if self.dones is None else self.dones.nbytes)

    def __len__(self) -> int:
        return len(self.actions)


class ClipPool:
    """Packed clips, each held once however many labels refer to it (reference counted)."""

    def __init__(self) -> None:
        self._clips: dict[bytes, PackedSegment] = {}
        self._refs: dict[bytes, int] = {}

    def add(self, seg: Segment | PackedSegment) -> bytes:
        """Hold `seg` (or count one more reference to it); returns its key."""
        packed = seg if isinstance(seg, PackedSegment) else PackedSegment.pack(seg)
        key = packed.key
        if key not in self._clips:
            self._clips[key] = packed
        self._refs[key] = self._refs.get(key, 0) + 1
        return key

    def release(self, key: bytes) -> None:
        """Drop one reference; the clip goes with its last one."""
        self._refs[key] -= 1
        if self._refs[key] == 0:
            del self._refs[key], self._clips[key]

    def get(self, key: bytes) -> Segment:
        return self._clips[key].unpack()

    def __len__(self) -> int:
        return len(self._clips)

    @property
    def nbytes(self) -> int:
        """Bytes of clip data held (packed frames and per-step arrays)."""
        return sum(c.nbytes for c in self._clips.values())
