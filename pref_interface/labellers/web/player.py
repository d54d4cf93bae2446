"""The labelling process's side of the labelling page: a `ClipPlayer` that sends each pair, the
prompt, the list of recent labels and (`--queries sort`) the sorted clips to the page's server in
the main process.

The browser plays the clips itself, so `draw` only forwards the prompt when it changes. A pair of
two clips the page already holds as thumbnails (a sorting query) is sent by their names alone.
"""
from __future__ import annotations

import functools
import hashlib
import itertools
import os
from typing import Any

import numpy as np

from pref_interface.labellers.web.sprites import sprite_png


class WebPlayer:
    """Shows pairs on the labelling page; `pair_id` names the pair shown now (answers from the
    page carry it, so an answer can only ever label the pair it was given for)."""

    def __init__(self, page_updates: Any) -> None:
        self.page_updates = page_updates
        self.pair_id: str | None = None
        self.prefix = str(os.getpid())  # each phase has a player (and a process) of its own
        self._ids = (f"{self.prefix}-{n}" for n in itertools.count(1))  # unique across phases
        self._status: list[str] | None = None
        self._next: tuple[bytes, str] | None = None  # the preloaded pair: content key, id
        self._thumbs: dict[bytes, str] = {}  # the page's thumbnails: content key -> clip name
        self._names_sent: set[str] = set()  # the clips whose thumbnails the page holds
        self._orders: list[dict] | None = None  # the sorted clips the page shows
        self.page_updates.put({"labelling": True})  # the page takes changes from now on

    def preload(self, left: np.ndarray, right: np.ndarray) -> None:
        """Send the pair that follows the one shown now, so that the page has it before the
        person answers and shows it at once."""
        pair_id = next(self._ids)
        self._next = _content_key(left, right), pair_id
        self.page_updates.put({"next": {"id": pair_id, "frames": [len(left), len(right)]},
                               "sprites": (sprite_png(left), sprite_png(right))})

    def load(self, left: np.ndarray, right: np.ndarray) -> None:
        update: dict = {"next": None}  # a preload for what follows this pair comes after it
        preloaded = self._next is not None and self._next[0] == _content_key(left, right)
        self.pair_id = self._next[1] if preloaded else next(self._ids)
        self._next = None
        pair = {"id": self.pair_id, "frames": [len(left), len(right)]}
        thumbs = [self._thumbs.get(_content_key(frames)) for frames in (left, right)]
        if None not in thumbs:  # both are sorted clips: the page plays their thumbnails
            pair["thumbs"] = thumbs
        elif not preloaded:
            update["sprites"] = sprite_png(left), sprite_png(right)
        update["pair"] = pair
        self.page_updates.put(update)

    def draw(self, t: int, status: list[str]) -> None:
        if status != self._status:
            self._status = list(status)
            self.page_updates.put({"status": self._status})

    def show_history(self, entries: list[tuple[int, float]]) -> None:
        """The newest labels, (id, mu) newest first, for the page's list."""
        self.page_updates.put({"history": [{"id": i, "mu": mu} for i, mu in entries]})

    def show_order(self, sorters: dict) -> None:
        """Each split's sorted clips (`ClipSorter.view`, ids as `clip_name`s), training first,
        with a thumbnail sprite for every clip the page has not had yet."""
        orders, thumbs, shown = [], {}, set()
        for split in (False, True):
            sorter = sorters[split]
            view = sorter.view()
            name = functools.partial(clip_name, split, prefix=self.prefix)
            ids = [i for c in view["classes"] for i in c] + [
                i for i in (view["inserting"], view["upcoming"]) if i is not None]
            for i in ids:
                shown.add(name(i))
                if name(i) not in self._names_sent:
                    frames = sorter.clip(i).step_frames()
                    thumbs[name(i)] = sprite_png(frames)
                    self._thumbs[_content_key(frames)] = name(i)
            orders.append({
                "split": "validation" if split else "training",
                "classes": [[name(i) for i in c] for c in view["classes"]],
                "inserting": None if view["inserting"] is None else name(view["inserting"]),
                "upcoming": None if view["upcoming"] is None else name(view["upcoming"]),
                "path": [[name(i), mu] for i, mu in view["path"]],
                "interval": view["interval"],
                "reinserting": [name(i) for i in view["reinserting"]]})
        if orders == self._orders and not thumbs:
            return  # nothing new to show
        self._thumbs = {k: n for k, n in self._thumbs.items() if n in shown}
        self._names_sent = shown
        self._orders = orders
        self.page_updates.put({"order": orders, "thumbs": thumbs})

    def withdraw(self) -> None:
        """Take the pair shown off the page (the run is stopping): the page refuses an answer to
        it from then on and says so on the answers queue (`PairWithdrawn`), after any answer it
        took. `pair_id` still names the pair."""
        self._next = None
        self.page_updates.put({"pair": None, "next": None, "withdrawn": self.pair_id})

    def close(self, message: str | None = None) -> None:
        self.pair_id, self._next = None, None
        self.page_updates.put({"pair": None, "next": None, "labelling": False,
                               "notice": message or "no pair to label now"})


def clip_name(is_validation: bool, clip_id: int, prefix: str = "") -> str:
    """A sorted clip's name on the page: the player's prefix (clip ids start again in each
    phase), its split's letter and its id, e.g. "4021:t12", "4021:v-3"."""
    return f"{prefix}:{'v' if is_validation else 't'}{clip_id}"


def parse_clip_name(name: str) -> tuple[bool, int] | None:
    """(is_validation, clip id) of a `clip_name`, or None."""
    _, _, local = name.rpartition(":")
    try:
        return {"t": False, "v": True}[local[0]], int(local[1:])
    except (KeyError, IndexError, ValueError, TypeError):
        return None


def _content_key(*clips: np.ndarray) -> bytes:
    """What identifies the frames of a pair (or of one clip) on the page."""
    digest = hashlib.blake2b(digest_size=16)
    for frames in clips:
        digest.update(np.ascontiguousarray(frames).data)
    return digest.digest()
