"""Several people labelling one run at once, each on their own labelling page (`--labellers`).

The labelling process hands pairs out (`open`) and takes answers as they come, from whoever gives
them (`answers`); the page's server in the main process decides who sees which pair, gives a pair
of a person who left to another, and shows a share of the pairs (`--overlap`) to two people. Each
stored label names its labeller; two answers to one pair measure how well the two people agree.

    labelling process: Team --open pairs--> page server --a pair each--> browsers
    browsers --answers--> page server --PairAnswer(pair, key, labeller)--> Team
"""
from __future__ import annotations

import itertools
import os
import queue
import re
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

import numpy as np

from clips.clip import Clip, LabelEdit, Preference
from pref_interface.labellers.keys import ANSWER_KEYS, EOF, PairAnswer, until_withdrawn
from pref_interface.labellers.web.sprites import sprite_png

LABELLER_NAME = re.compile(r"[A-Za-z0-9_-]{1,32}")
PAIRS_EACH = 2  # pairs out per person: the one shown and the next, loaded ahead
WITHDRAWN_ALL = "*"  # `PairWithdrawn`'s pair id when every pair is withdrawn


def parse_labellers(text: str) -> list[str]:
    """`--labellers`: names separated by commas ("ann,bob"), or a count ("3": p1, p2, p3).
    ValueError, in one line, for a bad or repeated name."""
    text = text.strip()
    if text.isdigit():
        if not 1 <= int(text) <= 64:
            raise ValueError(f"a count of labellers is 1 to 64, got {text!r}")
        return [f"p{i}" for i in range(1, int(text) + 1)]
    return check_labellers([n.strip() for n in text.split(",")])


def check_labellers(names: list[str]) -> list[str]:
    """The names, or ValueError, in one line, for none, a bad one or a repeated one."""
    names = list(names)
    if not names:
        raise ValueError("at least one labeller")
    bad = [n for n in names if not isinstance(n, str) or not LABELLER_NAME.fullmatch(n)]
    if bad:
        raise ValueError(f"a labeller's name is 1-32 letters, digits, _ or -, got {bad[0]!r}")
    if len(set(names)) != len(names):
        raise ValueError("each labeller's name once")
    return names


@dataclass(frozen=True)
class TeamAnswer:
    """One person's answer to an open pair: `mu`, or None for incomparable."""

    pair_id: str
    labeller: str
    mu: float | None


class Agreement:
    """How often two people gave the same answer to a pair both were shown (`--overlap`), and how
    often each person's clear answer (left or right better) is the one the predictor's ensemble
    finds more likely."""

    def __init__(self) -> None:
        self.first: dict[str, TeamAnswer] = {}  # pair id -> the first of its two answers
        self.counts: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])  # agreed, pairs

    def add_ensemble(self, labeller: str, mu: float, p_left: float) -> None:
        """A person's answer `mu` against the ensemble's mean P[left better] (ties: no count)."""
        if mu in (0.0, 1.0) and p_left != 0.5:
            self.counts[(labeller, "ensemble")][0] += (p_left > 0.5) == (mu == 1.0)
            self.counts[(labeller, "ensemble")][1] += 1

    def add(self, answer: TeamAnswer, copies: int) -> None:
        if copies < 2:
            return
        other = self.first.pop(answer.pair_id, None)
        if other is None:
            self.first[answer.pair_id] = answer
            return
        self.add_pair(other.labeller, other.mu, answer.labeller, answer.mu)

    def add_pair(self, a: str, mu_a: float | None, b: str, mu_b: float | None) -> None:
        """Two people's answers to one pair."""
        key = tuple(sorted((a, b)))
        self.counts[key][0] += mu_a == mu_b
        self.counts[key][1] += 1

    def shares(self) -> dict[str, float]:
        """'ann-bob' (or 'ann-ensemble') -> the share of their shared pairs answered alike."""
        return {f"{a}-{b}": agreed / n for (a, b), (agreed, n) in sorted(self.counts.items()) if n}

    def described(self) -> str:
        """One line, e.g. "ann-bob 80% of 10, ann-ensemble 75% of 40"."""
        return ", ".join(f"{a}-{b} {agreed / n:.0%} of {n}"
                         for (a, b), (agreed, n) in sorted(self.counts.items()) if n)


def stored_agreement(labels: Iterable[Preference]) -> Agreement:
    """The agreement over the stored labels: between labellers, on the labels of one pair of
    clips by two people (`--overlap`), whichever way round each was shown; and each person's
    with the ensemble, where its answer was kept with the label."""
    by_pair: dict[tuple[bytes, bytes], list[tuple[str, float]]] = defaultdict(list)
    agreement = Agreement()
    for pref in labels:
        if pref.labeller is None:
            continue
        if pref.ensemble_p is not None:
            agreement.add_ensemble(pref.labeller, pref.mu, pref.ensemble_p)
        key, mu = (pref.left.key, pref.right.key), pref.mu
        if key[0] > key[1]:
            key, mu = key[::-1], 1.0 - mu
        by_pair[key].append((pref.labeller, mu))
    for answers in by_pair.values():
        for (a, mu_a), (b, mu_b) in itertools.combinations(answers, 2):
            if a != b:
                agreement.add_pair(a, mu_a, b, mu_b)
    return agreement


class Team:
    """The labelling process's side of several people labelling: pairs out to the page's server,
    answers back with their labeller. Edits of stored labels from the pages go to `editor`.

    Args:
        names: the labellers.
        page_updates: the queue to the page's server (main process).
        answers: the page's answers and edits (`PairAnswer`, `LabelEdit`); the terminal's
            Ctrl-D (`EOF`) stops labelling.
        editor: applies a person's change to a stored label (pref_interface.labelling).
    """

    source = "human"

    def __init__(self, names: list[str], page_updates: Any, answers: Any,
                 editor: Any | None = None) -> None:
        self.names, self.page_updates, self.answers_in = list(names), page_updates, answers
        self.editor = editor
        self._ids = (f"{os.getpid()}-{n}" for n in itertools.count(1))
        # The pairs out now: id -> [query, answers still wanted, copies asked]
        self.open: dict[str, list] = {}
        self.agreement = Agreement()
        self._answered: TeamAnswer | None = None  # the answer being stored now
        self._status: list[str] | None = None
        self.page_updates.put({"labelling": True})  # the pages take changes from now on

    @property
    def pairs_wanted(self) -> int:
        """Pairs to keep out at once: the shown one and the next for each person."""
        return PAIRS_EACH * len(self.names)

    @property
    def n_open(self) -> int:
        return len(self.open)

    @property
    def pairs_to_open(self) -> int:
        return self.pairs_wanted - len(self.open)

    @property
    def outstanding(self) -> int:
        """Answers still to come for the pairs out."""
        return sum(entry[1] for entry in self.open.values())

    def plan(self, budget: int, rng: np.random.Generator, overlap: float) -> list[int]:
        """How many people each of the next pairs goes to: two with probability `overlap` (none
        for a team of one, where a second copy could never be answered), else one, within
        `budget` answers. Planned before the pairs are drawn, so none is drawn that the budget
        cannot open."""
        overlap = overlap if len(self.names) > 1 else 0.0
        copies: list[int] = []
        while budget > 0:
            copies.append(min(2 if rng.random() < overlap else 1, budget))
            budget -= copies[-1]
        return copies

    def hand_out(self, queries: list, copies: list[int]) -> None:
        """Open these queries (left_id, left, right_id, right), each to as many people as
        `plan` gave it."""
        for query, n in zip(queries, copies):
            self.open[self.open_pair(query[1], query[3], n)] = [query, n, n]

    def answered(self, answers: Iterable[TeamAnswer] | None = None
                 ) -> Iterator[tuple[TeamAnswer, tuple]]:
        """Each answer to a pair out (of `answers`, else those given since the last call), with
        its query, in order; two people's answers to one pair go to `agreement`. Answers to
        pairs no longer out are dropped."""
        for answer in self.answers() if answers is None else answers:
            entry = self.open.get(answer.pair_id)
            if entry is None:
                continue  # a pair withdrawn, or answered by as many people as it was given to
            entry[1] -= 1
            if entry[1] == 0:
                del self.open[answer.pair_id]
            self.agreement.add(answer, copies=entry[2])
            yield answer, entry[0]

    def last_answers(self, wait_s: float) -> Iterator[TeamAnswer]:
        """The run is stopping: every pair is withdrawn from the pages, which then take no
        answer, and the answers they took before are given (the people saw them taken), waiting
        at most `wait_s` for the pages' word that the pairs are withdrawn."""
        self.page_updates.put({"pair": None, "next": None, "withdrawn": WITHDRAWN_ALL})
        for token in until_withdrawn(self.answers_in, WITHDRAWN_ALL, wait_s):
            if isinstance(token, PairAnswer) and token.labeller in self.names:
                self._answered = TeamAnswer(token.pair_id, token.labeller,
                                            ANSWER_KEYS.get(token.key))
                yield self._answered

    def open_pair(self, left: Clip, right: Clip, copies: int = 1) -> str:
        """Hand a pair out, to be answered by `copies` different people; returns its id."""
        pair_id = next(self._ids)
        lf, rf = left.step_frames(), right.step_frames()
        self.page_updates.put({"open": {"id": pair_id, "frames": [len(lf), len(rf)],
                                        "copies": copies},
                               "sprites": (sprite_png(lf), sprite_png(rf))})
        return pair_id

    def answers(self) -> Iterator[TeamAnswer]:
        """The answers given since the last call, in order; edits are applied as they come and
        confirmed to the pages. Raises LabellingStopped at the terminal's Ctrl-D."""
        from pref_interface.labelling import LabellingStopped

        while True:
            try:
                token = self.answers_in.get_nowait()
            except queue.Empty:
                return
            if isinstance(token, PairAnswer) and token.labeller in self.names:
                answer = TeamAnswer(token.pair_id, token.labeller, ANSWER_KEYS.get(token.key))
                self._answered = answer
                yield answer
            elif isinstance(token, LabelEdit) and self.editor is not None:
                # The page shows the edit once the store holds it; a label gone is unlisted.
                done = self.editor.edit(token)
                self.page_updates.put({"edited": {"label": token.label_id,
                                                  "mu": token.mu if done else None}})
            elif token == EOF:
                raise LabellingStopped

    def stored(self, label_id: int) -> None:
        """The answer just yielded is in the store: its person's page lists it (a team's pairs
        are never shown swapped)."""
        a = self._answered
        if a is not None:
            self.page_updates.put({"stored": {"pair": a.pair_id, "labeller": a.labeller,
                                              "label": label_id, "mu": a.mu}})

    def show_status(self, lines: list[str]) -> None:
        """The lines every page shows under the clips, sent when they change."""
        if lines != self._status:
            self._status = list(lines)
            self.page_updates.put({"status": self._status})

    def close(self, message: str | None = None) -> None:
        """Labelling is over: every open pair is withdrawn from the pages."""
        self.page_updates.put({"pair": None, "next": None, "labelling": False,
                               "notice": message or "labelling has stopped"})

    # the Labeller protocol's hooks (pref_interface.labellers.teachers.Labeller)
    def label(self, left: Clip, right: Clip) -> float | None:
        raise TypeError("a team answers through open() and answers(), one pair at a time is "
                        "a single labeller's")

    def upcoming(self, left: Clip, right: Clip) -> None:
        pass

    def idle(self) -> None:
        pass

    def show_order(self, sorters: dict) -> None:
        pass
