"""The interface process's side of the labelling page: a `ClipPlayer` that sends each pair, the
prompt and the list of recent labels to the page's server in the main process.

The browser plays the clips itself, so `draw` only forwards the prompt when it changes.
"""
from __future__ import annotations

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

    def load(self, left: np.ndarray, right: np.ndarray) -> None:
        self.pair_id = next(self._ids)
        self.page_updates.put({"pair": {"id": self.pair_id, "frames": [len(left), len(right)]},
                               "sprites": (sprite_png(left), sprite_png(right))})

    def draw(self, t: int, status: list[str]) -> None:
        if status != self._status:
            self._status = list(status)
            self.page_updates.put({"status": self._status})

    def show_history(self, entries: list[tuple[int, float]]) -> None:
        """The newest labels, (id, mu) newest first, for the page's list."""
        self.page_updates.put({"history": [{"id": i, "mu": mu} for i, mu in entries]})

    def close(self, message: str | None = None) -> None:
        self.pair_id = None
        self.page_updates.put({"pair": None, "notice": message or "no pair to label now"})
