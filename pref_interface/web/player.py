"""The interface process's side of the labelling page: a `ClipPlayer` that sends each pair, the
prompt and the list of recent labels to the page's server in the main process.

The browser plays the clips itself, so `draw` only forwards the prompt when it changes.
"""
from __future__ import annotations

import hashlib
import itertools
import os
from typing import Any

import numpy as np

from pref_interface.web.sprites import sprite_png


class WebPlayer:
    """Shows pairs on the labelling page; `pair_id` names the pair shown now (answers from the
    page carry it, so an answer can only ever label the pair it was given for)."""

    def __init__(self, page_updates: Any) -> None:
        self.page_updates = page_updates
        self.pair_id: str | None = None
        self._ids = (f"{os.getpid()}-{n}" for n in itertools.count(1))  # unique across phases
        self._status: list[str] | None = None
        self._next: tuple[bytes, str] | None = None  # the preloaded pair: content key, id

    def preload(self, left: np.ndarray, right: np.ndarray) -> None:
        """Send the pair that follows the one shown now, so that the page has it before the
        person answers and shows it at once."""
        pair_id = next(self._ids)
        self._next = _content_key(left, right), pair_id
        self.page_updates.put({"next": {"id": pair_id, "frames": [len(left), len(right)]},
                               "sprites": (sprite_png(left), sprite_png(right))})

    def load(self, left: np.ndarray, right: np.ndarray) -> None:
        update: dict = {"next": None}  # a preload for what follows this pair comes after it
        if self._next is not None and self._next[0] == _content_key(left, right):
            self.pair_id = self._next[1]  # the page has its clips already
        else:
            self.pair_id = next(self._ids)
            update["sprites"] = sprite_png(left), sprite_png(right)
        self._next = None
        update["pair"] = {"id": self.pair_id, "frames": [len(left), len(right)]}
        self.page_updates.put(update)

    def draw(self, t: int, status: list[str]) -> None:
        if status != self._status:
            self._status = list(status)
            self.page_updates.put({"status": self._status})

    def show_history(self, entries: list[tuple[int, float]]) -> None:
        """The newest labels, (id, mu) newest first, for the page's list."""
        self.page_updates.put({"history": [{"id": i, "mu": mu} for i, mu in entries]})

    def close(self, message: str | None = None) -> None:
        self.pair_id, self._next = None, None
        self.page_updates.put({"pair": None, "next": None,
                               "notice": message or "no pair to label now"})


def _content_key(left: np.ndarray, right: np.ndarray) -> bytes:
    digest = hashlib.blake2b(digest_size=16)
    for frames in (left, right):
        digest.update(np.ascontiguousarray(frames).data)
    return digest.digest()
