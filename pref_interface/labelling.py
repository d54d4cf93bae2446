"""What the labellers share with the labelling process: its counters, the signal
that labelling stopped, and a person's edits of stored labels."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from clips.clip import LabelEdit, Preference
from pref_interface.store import PreferenceStore

HISTORY_LENGTH = 10  # a person's latest labels their page lists for changing or deleting


@dataclass
class LabellingStats:
    """Counters shared between processes (each a `multiprocessing.Value('i')`)."""

    labels_total: Any  # labels made and stored by labelling in this phase
    labels_stored: Any  # labels in the store now, earlier phases' and runs' too (as the summary)
    labels_received: Any  # labels taken off `preferences`, incremented by the trainer
    clips_received: Any  # clips labelling took off `clips`
    clips_dropped: Any  # clips A2C dropped because `clips` was full

    @classmethod
    def create(cls, ctx: Any, labels_received: Any | None = None,
               labels_stored: int = 0) -> "LabellingStats":
        """Make the counters with a multiprocessing context (e.g. `get_context("spawn")`);
        pass the trainer's own `labels_received` Value to share it rather than make a new one,
        and the labels the store holds already (the status line's count until labelling
        has opened it)."""
        return cls(ctx.Value("i", 0), ctx.Value("i", labels_stored),
                   labels_received if labels_received is not None else ctx.Value("i", 0),
                   ctx.Value("i", 0), ctx.Value("i", 0))

    @property
    def labels_in_flight(self) -> int:
        return self.labels_total.value - self.labels_received.value


def increment(counter: Any, by: int = 1) -> None:
    """Add to a shared `multiprocessing.Value` under its lock."""
    with counter.get_lock():
        counter.value += by


class LabellingStopped(Exception):
    """Raised by a labeller when whoever answers has had enough (a person pressed Ctrl-D): the
    interface stops asking, keeps every label, and returns."""


class LabelEditor:
    """A person's changes to stored labels: each goes to the store first, then to the trainer
    (when one takes labels), which holds a copy; `after_edit` then gets the label as it was
    (sorting places its clip again)."""

    def __init__(self, store: PreferenceStore, preferences: Any | None,
                 after_edit: Callable[[Preference], None] | None = None) -> None:
        self.store, self.preferences, self.after_edit = store, preferences, after_edit

    def recent(self, n: int) -> list[tuple[int, float]]:
        """(id, mu) of the newest `n` labels, newest first."""
        return self.store.recent_answers(n)

    def shown_swapped(self, ids: list[int]) -> set[int]:
        """Of these labels, those whose pair the person saw right clip first."""
        return self.store.shown_swapped(ids)

    def get(self, label_id: int) -> Preference | None:
        try:
            return self.store.get(label_id)
        except KeyError:
            return None

    def edit(self, edit: LabelEdit) -> bool:
        """Change or delete a stored label; False when there is no such label."""
        try:
            before = self.store.get(edit.label_id) if self.after_edit is not None else None
            if edit.mu is None:
                self.store.delete(edit.label_id)
            else:
                self.store.set_mu(edit.label_id, edit.mu)
        except KeyError:
            return False
        if self.preferences is not None:
            self.preferences.put(edit)
        if before is not None:
            self.after_edit(before)
        return True
