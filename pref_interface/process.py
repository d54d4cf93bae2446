"""The labelling steps of the loop: clips in, labels out (stored first, then sent on).

    A2C --ClipObserver--> clips --> Labelling --> PreferenceStore
                                             \\-> preferences --> reward-predictor trainer

`launch/loop.py:labelling_loop` runs the steps in order; this module holds what each one does.
"""
from __future__ import annotations

import queue
import time
from dataclasses import replace
from typing import Any

import numpy as np

from clips.clip import Clip, ClipOrder, Preference
from pref_interface.config import InterfaceConfig
from pref_interface.labellers.teachers import Labeller, make_teacher
from pref_interface.labelling import InterfaceStats, LabelEditor, increment
from pref_interface.queries.pairs import ClipBuffer
from pref_interface.queries.schedule import FRAMESKIP, LabelSchedule
from pref_interface.queries.selection import PREDICTOR_SELECTIONS, make_pair_scorer
from pref_interface.queries.sorting import rebuild_sorters
from pref_interface.store import PreferenceStore
from runtime.scalars import Telemetry

CLIP_QUEUE_MAXSIZE = 4  # A2C drops clips rather than wait for the interface
LOG_EVERY_S = 5.0  # how often labelling writes its TensorBoard scalars
GATHER_BATCH = 16  # pairs drawn at a time while no trainer paces the labelling
# A person's first pair is held back this long at most until a second pair is drawn, so that the
# page has the next pair ready from the first answer on.
FIRST_PAIR_HOLD_S = 3.0


def make_labeller(config: InterfaceConfig, answers: Any | None = None, stop: Any | None = None,
                  stats: InterfaceStats | None = None, val_accuracy: Any | None = None,
                  n_stored: int = 0, labels: LabelEditor | None = None,
                  has_trainer: bool = True, reinsert: Any | None = None) -> Labeller:
    """The labeller the config asks for. A person (`synthetic=False`) needs `answers`, the queue
    of key tokens from the process that owns the terminal; `stop`, `stats`, `val_accuracy`
    (the trainer's, or None), `n_stored` (labels already in the store) and `has_trainer` (a
    trainer takes the labels) feed the prompt; `labels` lets the person change stored labels
    and `reinsert` place a sorted clip again (the labelling page)."""
    if config.synthetic:
        return make_teacher(config.teacher, rng=np.random.default_rng(
            np.random.SeedSequence(config.seed).spawn(3)[2]),
            episode_end_penalty=config.episode_end_penalty)
    if answers is None:
        raise ValueError("human labelling needs the answers queue of a terminal key reader")
    from pref_interface.labellers.human import HumanLabeller

    target = config.stop_after_labels - n_stored if config.stop_after_labels is not None else None
    player = config.clip_player
    if player == "web":
        from pref_interface.labellers.web.player import WebPlayer

        player = WebPlayer(config.page_updates)
    return HumanLabeller(answers, player, stop, stats, val_accuracy, target,
                         has_trainer=has_trainer,
                         keep_typed_ahead=config.keep_typed_ahead, labels=labels,
                         reinsert=reinsert)


class Labelling:
    """The labelling side of the loop as its steps: clips in from the agent (`take_clips`), pairs
    never shown before drawn from them (`draw_pairs`: pair selection), each answered by the
    labeller (`label`), then committed to the label store and sent to the predictor's trainer
    (`commit`). Synthetic labels are made as fast as the trainer takes them (`max_in_flight`);
    a person gets one pair at a time, with the next one drawn ahead.

    Args:
        channels: launch.loop.Channels: `clips` from the agent's clip source; `preferences`, the
            labels to the trainer (never dropped; None while gathering: store only); `stop`;
            `answers`, a person's keys (see `make_labeller`).
        store_path: the label store (SQLite); every label is committed there before it is sent.
        labeller: overrides the one the config chooses (scripted teachers, tests).
        log_dir: where to write TensorBoard scalars (labels so far, labels/s, clips dropped).
        val_accuracy: the trainer's, for a human labeller's prompt (see `make_labeller`).
        make_predictor: builds, in this process, the ensemble's P[left > right] per member
            (for disagreement selection), e.g. a partial of reward_predictor's
            `PreferencePredictor`.
        agent_steps: A2C's shared step counter (for a label schedule and the TensorBoard x-axis).
    """

    def __init__(self, config: InterfaceConfig, channels: Any, *, stats: InterfaceStats,
                 store_path: str, labeller: Labeller | None = None, log_dir: str | None = None,
                 val_accuracy: Any | None = None, make_predictor: Any | None = None,
                 agent_steps: Any | None = None) -> None:
        self.config, self.stats, self.agent_steps = config, stats, agent_steps
        self.clips, self.preferences = channels.clips, channels.preferences
        self.has_trainer = self.preferences is not None
        pair_seq, val_seq = np.random.SeedSequence(config.seed).spawn(2)
        self.pair_rng = np.random.default_rng(pair_seq)
        self.buffer = ClipBuffer(config.max_segs, config.val_fraction, seed=val_seq,
                                 max_pairs_per_clip=config.max_pairs_per_clip)
        self.store = PreferenceStore(store_path)
        # --queries sort: a sorter per split (labels are made within a split), its order rebuilt
        # from the stored labels when a run resumes.
        self.sorters = rebuild_sorters(self.store.iter_latest(len(self.store)),
                                       config.max_segs) if config.queries == "sort" else None
        self.sort_split: dict[int, bool] = {}  # the split of each clip a sorting query is out on
        self.sort_asked = [0, 0]  # sorting queries asked in the training and validation splits
        if self.sorters is not None:
            self._send_order()  # a resumed trainer starts from the rebuilt order
        self.n_stored = stats.labels_stored.value = len(self.store)
        # A person's changes to stored labels; with sorting, a changed comparison's clip is
        # placed again, so that the order agrees with the labels (and with their replay).
        self.editor = LabelEditor(self.store, self.preferences, after_edit=self._label_edited
                                  if self.sorters is not None else None)
        self.labeller = labeller if labeller is not None else make_labeller(
            config, channels.answers, channels.stop, stats, val_accuracy, self.n_stored, self.editor,
            has_trainer=self.has_trainer,
            reinsert=self.reinsert if self.sorters is not None else None)
        self.person = self.labeller.source == "human"
        self.telemetry = Telemetry(log_dir, every_s=LOG_EVERY_S)
        self.n_at_dump = self.n_stored
        predictor = make_predictor() if make_predictor and config.query_selection in PREDICTOR_SELECTIONS \
            else None
        self.score = make_pair_scorer(config.query_selection, predictor)
        self.schedule = None if config.label_schedule == "none" else LabelSchedule(
            config.label_schedule, config.max_labels, config.total_frames,
            n_initial=min(config.initial_labels, config.max_labels),
            anneal_every=config.anneal_every_frames)
        self.pending: list = []  # pairs drawn and not yet labelled (a person's next one)
        self.n_asked, self.first_drawn = 0, 0.0  # a person's pairs asked; when the first came
        # Reached stop_after_labels or the person stopped: the trainer drains `preferences`.
        self.done = False

    def take_clips(self) -> None:
        """Every clip the agent has sent into the pool pairs are drawn from."""
        for clip_id, clip in _drain_clips(self.clips, self.buffer, self.stats):
            if self.sorters is not None:
                self.sorters[self.buffer.is_validation(clip_id)].offer(clip_id, clip)
        target = self.config.stop_after_labels
        self.done = self.done or (target is not None and self.n_stored >= target)

    def record(self) -> None:
        """Labels so far and per second, clips received and dropped, written every few seconds
        at the agent's steps when it shares its counter, else at the label count."""
        t = self.telemetry
        if not t.due():
            return
        t.record("labels/total", self.n_stored)
        t.record("labels/per_sec", (self.n_stored - self.n_at_dump) / t.since_dump())
        t.record("segments/received", self.stats.clips_received.value)
        t.record("segments/dropped", self.stats.clips_dropped.value)
        if self.sorters is not None:
            t.record("sorting/clips_sorted", sum(len(s) for s in self.sorters.values()))
            t.record("sorting/classes", sum(s.n_classes for s in self.sorters.values()))
        t.dump(self.agent_steps.value if self.agent_steps is not None else self.n_stored)
        self.n_at_dump = self.n_stored

    def draw_pairs(self) -> list:
        """The pairs to label now (pair selection, within the label schedule's budget): all that
        are drawn for a teacher; one for a person, the next drawn ahead. Empty: nothing to do
        yet (a person's first pair waits a moment for a second)."""
        wanted = _labels_wanted(self.config, self.stats, self.schedule, self.n_stored,
                                self.agent_steps, self.person,
                                has_trainer=self.has_trainer) - len(self.pending)
        if self.sorters is not None:
            return self._sorting_queries(min(wanted, 1 if self.person else 2))
        if wanted > 0:
            self.pending += self.buffer.sample_new_pairs(wanted, self.pair_rng, self.score,
                                                         self.config.oversampling)
        if self.person and len(self.pending) == 1 and wanted > 0 and self.n_asked == 0:
            self.first_drawn = self.first_drawn or time.monotonic()
            if time.monotonic() - self.first_drawn < FIRST_PAIR_HOLD_S:
                return []
        pairs, self.pending = ((self.pending[:1], self.pending[1:]) if self.person
                               else (self.pending, []))
        self.n_asked += len(pairs)
        return pairs

    def _sorting_queries(self, wanted: int) -> list:
        """Up to `wanted` comparisons of a clip being sorted with a sorted clip (its left), one
        per split at most (the next depends on the answer), the split whose share of queries is
        behind `val_fraction` first."""
        behind = self.sort_asked[1] < self.config.val_fraction * sum(self.sort_asked)
        queries = []
        for split in (True, False) if behind else (False, True):
            query = self.sorters[split].next_query() if len(queries) < wanted else None
            if query is not None:
                queries.append(query)
                self.sort_split[query[0]] = split
                self.sort_asked[split] += 1
        if queries:
            self._show_order()
        return queries

    def reinsert(self, is_validation: bool, clip_id: int) -> str:
        """A person's request to take a sorted clip out and insert it again; the prompt's
        reply."""
        if not self.sorters[is_validation].reinsert(clip_id):
            return f"clip {clip_id} is not sorted now"
        self._show_order()
        return f"clip {clip_id} is placed again next"

    def _label_edited(self, before: Preference) -> None:
        """A sorting comparison was changed or deleted: the clip it placed (its left), if sorted
        now, is placed again by fresh comparisons (a clip still being placed keeps its path)."""
        clip_id = self.sorters[before.is_validation].sorted_id(before.left.key)
        if clip_id is not None:
            self.reinsert(before.is_validation, clip_id)

    def _show_order(self) -> None:
        """A person sees the sorted clips (on the labelling page) after every query and answer."""
        self.labeller.show_order(self.sorters)

    def label(self, pair: tuple) -> Preference | None:
        """The labeller's answer as a label; None for an incomparable pair (§2.2.2: not
        stored; a clip being sorted is dropped). Raises LabellingStopped when the labeller
        stops."""
        left_id, left, _, right = pair
        if self.pending:
            self.labeller.upcoming(self.pending[0][1], self.pending[0][3])
        if self.sorters is not None and self.person and self.pair_rng.random() < 0.5:
            # The clip being sorted is always the stored label's left; a person sees it on
            # either side, so that its side tells them nothing.
            mu = self.labeller.label(right, left)
            mu = None if mu is None else 1.0 - mu
        else:
            mu = self.labeller.label(left, right)
        split = (self.sort_split.pop(left_id) if self.sorters is not None
                 else self.buffer.is_validation(left_id))
        if mu is None:
            if self.sorters is not None:
                self._answer_sorter(split, None)
            return None
        return Preference(left, right, mu, self.labeller.source, is_validation=split)

    def _answer_sorter(self, split: bool, mu: float | None) -> None:
        """The answer to a sorting query; when it ends an insertion in the training split the
        trainer gets the new order (for --implied_pairs)."""
        sorter = self.sorters[split]
        sorter.answer(mu)
        if not split and sorter.inserting is None:
            self._send_order()
        self._show_order()

    def _send_order(self) -> None:
        if self.has_trainer:
            sorter = self.sorters[False]
            self.preferences.put(ClipOrder([[sorter.clip(i).key for i in cls]
                                           for cls in sorter.classes()]))

    def commit(self, pref: Preference) -> None:
        """Into the store first, then to the trainer: a label is never sent that is not
        committed."""
        label_id = self.store.add(pref)
        self.n_stored = self.stats.labels_stored.value = self.n_stored + 1
        if self.has_trainer:
            self.preferences.put(replace(pref, label_id=label_id))
        if self.sorters is not None:  # the sorted order moves only once the label is stored
            self._answer_sorter(pref.is_validation, pref.mu)
        increment(self.stats.labels_total)
        self.labeller.stored(label_id)
        if self.person:  # a person may have deleted labels meanwhile
            self.n_stored = self.stats.labels_stored.value = len(self.store)

    def idle(self) -> None:
        """No pair to ask now: a person's edits and re-insertions from the page are taken
        anyway (and Ctrl-D stops labelling) rather than waiting for the next pair."""
        self.labeller.idle()

    def close(self) -> None:
        self.store.close()
        self.telemetry.close()
        self.labeller.close()
        if not self.done and self.has_trainer and hasattr(self.preferences, "cancel_join_thread"):
            # Shutting down: the trainer may have stopped reading, and a label still buffered in
            # the queue would hold up this process's exit. Every label is in the store anyway.
            self.preferences.cancel_join_thread()


def _labels_wanted(config: InterfaceConfig, stats: InterfaceStats, schedule: LabelSchedule | None,
                   n_stored: int, agent_steps: Any | None, human: bool, has_trainer: bool) -> int:
    """How many pairs to have in hand now: for a person, the pair shown and the next one (the
    labelling page loads it ahead); synthetic labels fill the free in-flight slots (so the
    trainer is never starved nor flooded), or without a trainer a batch of GATHER_BATCH; all
    within the schedule's budget."""
    wanted = config.max_in_flight - stats.labels_in_flight if has_trainer else GATHER_BATCH
    if config.stop_after_labels is not None:
        wanted = min(wanted, config.stop_after_labels - n_stored)
    if schedule is not None and agent_steps is not None:
        wanted = min(wanted, schedule.labels_due(agent_steps.value * FRAMESKIP) - n_stored)
    return max(0, min(wanted, 2 if human else wanted))


def _drain_clips(clips: Any, buffer: ClipBuffer, stats: InterfaceStats
                 ) -> list[tuple[int, Clip]]:
    """Every clip waiting on the queue, into the buffer; returns them with their ids."""
    added = []
    while True:
        try:
            clip = clips.get_nowait()
        except queue.Empty:
            return added
        added.append((buffer.add(clip), clip))
        increment(stats.clips_received)
