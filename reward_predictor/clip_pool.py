"""The trainer's clips: each held once, packed, however many labels refer to it."""
from __future__ import annotations

from dataclasses import replace

from clips.clip import Clip


class ClipPool:
    """Packed clips, each held once however many labels refer to it (reference counted)."""

    def __init__(self) -> None:
        self._clips: dict[bytes, Clip] = {}
        self._refs: dict[bytes, int] = {}

    def add(self, clip: Clip) -> bytes:
        """Hold `clip` (or count one more reference to it); returns its key."""
        key = clip.key
        if key not in self._clips:
            self._clips[key] = clip if clip.expanded is None else replace(clip, expanded=None)
        self._refs[key] = self._refs.get(key, 0) + 1
        return key

    def release(self, key: bytes) -> None:
        """Drop one reference; the clip goes with its last one."""
        self._refs[key] -= 1
        if self._refs[key] == 0:
            del self._refs[key], self._clips[key]

    def get(self, key: bytes) -> Clip:
        return self._clips[key]

    def __contains__(self, key: bytes) -> bool:
        return key in self._clips

    def __len__(self) -> int:
        return len(self._clips)

    @property
    def nbytes(self) -> int:
        """Bytes of clip data held (packed frames and per-step arrays)."""
        return sum(c.nbytes for c in self._clips.values())
