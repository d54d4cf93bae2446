"""Query modes: how labelling turns the clips it holds into the questions it asks.

`Labelling` (pref_interface/process.py) calls one `QueryMode` and nothing else about the kind of
question: `--queries pairs` asks about fresh blind pairs (§2.2.4's pair selection), `--queries
sort` places each new clip among the clips sorted so far (queries/sorting.py). A new mode is a
class here with the same methods, a name in `QUERY_MODES` and a line in `make_query_mode`.

A query is `(left_id, left, right_id, right)`; its label keeps that order.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable, Iterable, Protocol

import numpy as np

from clips.clip import Clip, ClipOrder, Preference
from pref_interface.queries.pairs import ClipBuffer, PairScorer
from pref_interface.queries.selection import PREDICTOR_SELECTIONS, make_pair_scorer
from pref_interface.queries.sorting import Query, rebuild_sorters

if TYPE_CHECKING:
    from pref_interface.config import LabellingConfig

# A person's first pair is held back this long at most until a second pair is drawn, so that the
# page has the next pair ready from the first answer on.
FIRST_PAIR_HOLD_S = 3.0


class QueryMode(Protocol):
    """What `Labelling` asks of a mode, in the order of a query's life."""

    # A person's requests on the labelling page, or None where the mode has none: place a sorted
    # clip again (`reinsert(is_validation, clip_id) -> reply`), and what follows a person's
    # change to a stored label (`after_edit(label_before)`).
    reinsert: Callable[[bool, int], str] | None
    after_edit: Callable[[Preference], None] | None
    # How a person sees the mode's state (the sorted order), set once the labeller exists.
    show: Callable[[dict], None]

    def offer(self, clip_id: int, clip: Clip) -> None:
        """A clip from the agent, already in the pool under `clip_id`."""

    def draw(self, wanted: int) -> list[Query]:
        """Up to `wanted` queries to ask now (pairs already in hand count against it)."""

    def upcoming(self) -> Query | None:
        """The query after the one being asked, for the page to load ahead; None if unknown."""

    def show_swapped(self) -> bool:
        """Whether a person sees this query's clips the other way round (the label keeps the
        query's order)."""

    def split(self, left_id: int) -> bool:
        """The split (True: validation) of the query on `left_id`, which is being answered."""

    def answered(self, is_validation: bool, mu: float | None) -> None:
        """The answer (None: incomparable, not stored) once it is stored."""

    def scalars(self) -> dict[str, float]:
        """The mode's own TensorBoard scalars."""


class BlindPairs:
    """`--queries pairs`: pairs of clips never compared before, drawn from the pool and ranked
    by the pair selection (`score`, with `oversampling` candidates per pair drawn; §2.2.4).
    A teacher gets every pair drawn at once; a person gets one, with the next drawn ahead."""

    reinsert = None
    after_edit = None

    def __init__(self, buffer: ClipBuffer, rng: np.random.Generator, score: PairScorer | None,
                 oversampling: int, person: bool) -> None:
        self.buffer, self.rng, self.score = buffer, rng, score
        self.oversampling, self.person = oversampling, person
        self.pending: list[Query] = []  # drawn, not yet asked (a person's next one)
        self.n_asked, self.first_drawn = 0, 0.0

    def show(self, state: dict) -> None:
        pass  # a blind pair has no state to show

    def offer(self, clip_id: int, clip: Clip) -> None:
        pass  # the pool (`buffer`) is all a blind pair needs

    def draw(self, wanted: int) -> list[Query]:
        wanted -= len(self.pending)
        if wanted > 0:
            self.pending += self.buffer.sample_new_pairs(wanted, self.rng, self.score,
                                                         self.oversampling)
        if self.person and len(self.pending) == 1 and wanted > 0 and self.n_asked == 0:
            self.first_drawn = self.first_drawn or time.monotonic()
            if time.monotonic() - self.first_drawn < FIRST_PAIR_HOLD_S:
                return []
        queries, self.pending = ((self.pending[:1], self.pending[1:]) if self.person
                                 else (self.pending, []))
        self.n_asked += len(queries)
        return queries

    def upcoming(self) -> Query | None:
        return self.pending[0] if self.pending else None

    def show_swapped(self) -> bool:
        return False

    def split(self, left_id: int) -> bool:
        return self.buffer.is_validation(left_id)

    def answered(self, is_validation: bool, mu: float | None) -> None:
        pass

    def scalars(self) -> dict[str, float]:
        return {}


class Sorting:
    """`--queries sort`: each new clip is placed among the sorted clips of its split by one
    comparison at a time, the new clip always the label's left; the order is rebuilt from the
    stored labels on a resume, and the trainer gets the training split's order (`send`) for
    `--implied_pairs`. A person sees the order after every query and answer (`show`, set once
    the labeller exists), and may ask for a sorted clip to be placed again.

    Args:
        labels: the stored labels, oldest first, to rebuild the order from.
        send: puts a `ClipOrder` to the trainer; None without a trainer.
    """

    def __init__(self, buffer: ClipBuffer, labels: Iterable[Preference], max_clips: int,
                 val_fraction: float, rng: np.random.Generator, person: bool,
                 send: Callable[[Any], None] | None) -> None:
        self.buffer, self.rng, self.person, self.send = buffer, rng, person, send
        self.val_fraction = val_fraction
        self.sorters = rebuild_sorters(labels, max_clips)  # keyed by is_validation
        self.asked_split: dict[int, bool] = {}  # the split of each clip a query is out on
        self.asked = [0, 0]  # queries asked in the training and validation splits
        self.show: Callable[[dict], None] = lambda sorters: None
        self._send_order()  # a resumed trainer starts from the rebuilt order

    def offer(self, clip_id: int, clip: Clip) -> None:
        self.sorters[self.buffer.is_validation(clip_id)].offer(clip_id, clip)

    def draw(self, wanted: int) -> list[Query]:
        """One query per split at most (the next depends on the answer), the split whose share
        of queries is behind `val_fraction` first; a person gets one at a time."""
        wanted = min(wanted, 1 if self.person else 2)
        behind = self.asked[1] < self.val_fraction * sum(self.asked)
        queries = []
        for split in (True, False) if behind else (False, True):
            query = self.sorters[split].next_query() if len(queries) < wanted else None
            if query is not None:
                queries.append(query)
                self.asked_split[query[0]] = split
                self.asked[split] += 1
        if queries:
            self.show(self.sorters)
        return queries

    def upcoming(self) -> Query | None:
        return None  # the page loads the next clip from the order's view

    def show_swapped(self) -> bool:
        # The clip being sorted is always the label's left; a person sees it on either side, so
        # that its side tells them nothing.
        return self.person and self.rng.random() < 0.5

    def split(self, left_id: int) -> bool:
        return self.asked_split.pop(left_id)

    def answered(self, is_validation: bool, mu: float | None) -> None:
        """The sorter takes the answer; an insertion ended in the training split sends the
        trainer the new order."""
        sorter = self.sorters[is_validation]
        sorter.answer(mu)
        if not is_validation and sorter.inserting is None:
            self._send_order()
        self.show(self.sorters)

    def reinsert(self, is_validation: bool, clip_id: int) -> str:
        """A person's request to take a sorted clip out and insert it again; the prompt's
        reply."""
        if not self.sorters[is_validation].reinsert(clip_id):
            return f"clip {clip_id} is not sorted now"
        self.show(self.sorters)
        return f"clip {clip_id} is placed again next"

    def after_edit(self, before: Preference) -> None:
        """A comparison was changed or deleted: the clip it placed (its left), if sorted now, is
        placed again by fresh comparisons (a clip still being placed keeps its path)."""
        clip_id = self.sorters[before.is_validation].sorted_id(before.left.key)
        if clip_id is not None:
            self.reinsert(before.is_validation, clip_id)

    def scalars(self) -> dict[str, float]:
        return {"sorting/clips_sorted": sum(len(s) for s in self.sorters.values()),
                "sorting/classes": sum(s.n_classes for s in self.sorters.values())}

    def _send_order(self) -> None:
        if self.send is not None:
            sorter = self.sorters[False]
            self.send(ClipOrder([[sorter.clip(i).key for i in cls] for cls in sorter.classes()]))


QUERY_MODES = ("pairs", "sort")  # --queries


def make_query_mode(config: LabellingConfig, buffer: ClipBuffer, labels: Iterable[Preference],
                    rng: np.random.Generator, person: bool, make_predictor: Callable | None,
                    send: Callable[[Any], None] | None) -> QueryMode:
    """The mode `config.queries` names, over the clip pool `buffer`; `labels`, the stored ones
    oldest first (sorting rebuilds its order from them); `make_predictor` builds the ensemble's
    preference per member where the pair selection asks it; `send` puts to the trainer."""
    if config.queries == "sort":
        return Sorting(buffer, labels, config.max_clips, config.val_fraction, rng, person, send)
    predictor = (make_predictor() if make_predictor is not None
                 and config.query_selection in PREDICTOR_SELECTIONS else None)
    return BlindPairs(buffer, rng, make_pair_scorer(config.query_selection, predictor),
                      config.oversampling, person)
