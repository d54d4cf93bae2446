"""The labelling steps of the loop: clips in, labels out (stored first, then sent on).

    A2C --ClipObserver--> clips --> Labelling --> PreferenceStore
                                             \\-> preferences --> reward-predictor trainer

`launch/loop.py:labelling_loop` runs the steps in order; this module holds what each one does.
"""
from __future__ import annotations

import queue
from dataclasses import replace
from typing import Any

import numpy as np

from clips.clip import Clip, Preference
from pref_interface.config import LabellingConfig
from pref_interface.labellers.teachers import Labeller, make_teacher
from pref_interface.labelling import LabellingStats, LabelEditor, increment
from pref_interface.queries.pairs import ClipBuffer
from pref_interface.queries.schedule import FRAMESKIP, LabelSchedule
from pref_interface.queries.modes import make_query_mode
from pref_interface.store import PreferenceStore
from runtime.scalars import Telemetry

CLIP_QUEUE_MAXSIZE = 4  # A2C drops clips rather than wait for labelling
LOG_EVERY_S = 5.0  # how often labelling writes its TensorBoard scalars
GATHER_BATCH = 16  # pairs drawn at a time while no trainer paces the labelling


def make_labeller(config: LabellingConfig, answers: Any | None = None, stop: Any | None = None,
                  stats: LabellingStats | None = None, val_accuracy: Any | None = None,
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
    """The labelling side of the loop as its steps: clips in from the agent (`take_clips`), the
    queries to ask drawn from them (`draw_pairs`, by the query mode: queries/modes.py), each
    answered by the labeller (`label`), then committed to the label store and sent to the
    predictor's trainer (`commit`). Synthetic labels are made as fast as the trainer takes them
    (`max_in_flight`); a person gets one query at a time, with the next one drawn ahead.

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

    def __init__(self, config: LabellingConfig, channels: Any, *, stats: LabellingStats,
                 store_path: str, labeller: Labeller | None = None, log_dir: str | None = None,
                 val_accuracy: Any | None = None, make_predictor: Any | None = None,
                 agent_steps: Any | None = None) -> None:
        self.config, self.stats, self.agent_steps = config, stats, agent_steps
        self.clips, self.preferences = channels.clips, channels.preferences
        self.has_trainer = self.preferences is not None
        pair_seq, val_seq = np.random.SeedSequence(config.seed).spawn(2)
        self.pair_rng = np.random.default_rng(pair_seq)
        self.buffer = ClipBuffer(config.max_clips, config.val_fraction, seed=val_seq,
                                 max_pairs_per_clip=config.max_pairs_per_clip)
        self.store = PreferenceStore(store_path)
        self.n_stored = stats.labels_stored.value = len(self.store)
        person = labeller.source == "human" if labeller is not None else not config.synthetic
        self.mode = make_query_mode(config, self.buffer, self.store.iter_latest(len(self.store)),
                                    self.pair_rng, person, make_predictor,
                                    send=self.preferences.put if self.has_trainer else None)
        # A person's changes to stored labels (with sorting, a changed comparison's clip is
        # placed again, so that the order agrees with the labels and with their replay).
        self.editor = LabelEditor(self.store, self.preferences, after_edit=self.mode.after_edit)
        self.labeller = labeller if labeller is not None else make_labeller(
            config, channels.answers, channels.stop, stats, val_accuracy, self.n_stored, self.editor,
            has_trainer=self.has_trainer, reinsert=self.mode.reinsert)
        self.person = self.labeller.source == "human"
        self.mode.show = self.labeller.show_order
        self.telemetry = Telemetry(log_dir, every_s=LOG_EVERY_S)
        self.n_at_dump = self.n_stored
        self.schedule = None if config.label_schedule == "none" else LabelSchedule(
            config.label_schedule, config.max_labels, config.total_frames,
            n_initial=min(config.initial_labels, config.max_labels),
            anneal_every=config.anneal_every_frames)
        # Reached stop_after_labels or the person stopped: the trainer drains `preferences`.
        self.done = False

    def take_clips(self) -> None:
        """Every clip the agent has sent into the pool pairs are drawn from."""
        for clip_id, clip in _drain_clips(self.clips, self.buffer, self.stats):
            self.mode.offer(clip_id, clip)
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
        t.record("clips/received", self.stats.clips_received.value)
        t.record("clips/dropped", self.stats.clips_dropped.value)
        for tag, value in self.mode.scalars().items():
            t.record(tag, value)
        t.dump(self.agent_steps.value if self.agent_steps is not None else self.n_stored)
        self.n_at_dump = self.n_stored

    def draw_pairs(self) -> list:
        """The queries to ask now, within the label schedule's budget: all that are drawn for a
        teacher; one for a person, the next drawn ahead. Empty: nothing to do yet."""
        return self.mode.draw(_labels_wanted(self.config, self.stats, self.schedule,
                                             self.n_stored, self.agent_steps, self.person,
                                             has_trainer=self.has_trainer))

    def label(self, pair: tuple) -> Preference | None:
        """The labeller's answer as a label; None for an incomparable pair (§2.2.2: not
        stored; a clip being sorted is dropped). Raises LabellingStopped when the labeller
        stops."""
        left_id, left, _, right = pair
        upcoming = self.mode.upcoming()
        if upcoming is not None:
            self.labeller.upcoming(upcoming[1], upcoming[3])
        if self.mode.show_swapped():
            mu = self.labeller.label(right, left)
            mu = None if mu is None else 1.0 - mu
        else:
            mu = self.labeller.label(left, right)
        split = self.mode.split(left_id)
        if mu is None:
            self.mode.answered(split, None)
            return None
        return Preference(left, right, mu, self.labeller.source, is_validation=split)

    def commit(self, pref: Preference) -> None:
        """Into the store first, then to the trainer: a label is never sent that is not
        committed."""
        label_id = self.store.add(pref)
        self.n_stored = self.stats.labels_stored.value = self.n_stored + 1
        if self.has_trainer:
            self.preferences.put(replace(pref, label_id=label_id))
        self.mode.answered(pref.is_validation, pref.mu)  # e.g. the sorted order moves now
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


def _labels_wanted(config: LabellingConfig, stats: LabellingStats, schedule: LabelSchedule | None,
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


def _drain_clips(clips: Any, buffer: ClipBuffer, stats: LabellingStats
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
