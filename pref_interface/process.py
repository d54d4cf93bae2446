"""The preference-interface process: segments in, labels out (stored first, then sent on).

    A2C --ClipObserver--> seg_queue --> run_pref_interface --> PreferenceStore
                                                            \\-> pref_queue --> reward-predictor trainer
"""
from __future__ import annotations

import queue
import time
from typing import Any

import numpy as np

from pref_interface.config import InterfaceConfig
from pref_interface.labelling import InterfaceStats, LabelEditor, LabellingStopped, increment
from pref_interface.pairs import SegmentBuffer
from pref_interface.segment import Preference
from pref_interface.sender import QueueSender
from pref_interface.store import PreferenceStore
from pref_interface.schedule import FRAMESKIP, LabelSchedule
from pref_interface.selection import make_pair_scorer
from pref_interface.teachers import Labeller, make_teacher
from runtime.scalars import ScalarWriter

SEGMENT_QUEUE_MAXSIZE = 4  # A2C drops segments rather than wait for the interface
IDLE_SLEEP_S = 0.02
GATHER_BATCH = 16  # pairs drawn at a time while no trainer paces the labelling
# A person's first pair is held back this long at most until a second pair is drawn, so that the
# page has the next pair ready from the first answer on.
FIRST_PAIR_HOLD_S = 3.0


def make_labeller(config: InterfaceConfig, answers: Any | None = None, stop_event: Any | None = None,
                  stats: InterfaceStats | None = None, val_accuracy: Any | None = None,
                  n_stored: int = 0, labels: LabelEditor | None = None,
                  has_trainer: bool = True) -> Labeller:
    """The labeller the config asks for. A person (`synthetic=False`) needs `answers`, the queue
    of key tokens from the process that owns the terminal; `stop_event`, `stats`, `val_accuracy`
    (the trainer's, or None), `n_stored` (labels already in the store) and `has_trainer` (a
    trainer takes the labels) feed the prompt; `labels` lets the person change stored labels
    (the labelling page)."""
    if config.synthetic:
        return make_teacher(config.teacher, rng=np.random.default_rng(
            np.random.SeedSequence(config.seed).spawn(3)[2]),
            episode_end_penalty=config.episode_end_penalty)
    if answers is None:
        raise ValueError("human labelling needs the answers queue of a terminal key reader")
    from pref_interface.human import HumanLabeller

    target = config.stop_after_labels - n_stored if config.stop_after_labels is not None else None
    player = config.clip_player
    if player == "web":
        from pref_interface.web.player import WebPlayer

        player = WebPlayer(config.page_updates)
    return HumanLabeller(answers, player, stop_event, stats, val_accuracy, target,
                         has_trainer=has_trainer,
                         keep_typed_ahead=config.keep_typed_ahead, labels=labels)


def run_pref_interface(config: InterfaceConfig, *, seg_queue: Any, pref_queue: Any | None,
                       stop_event: Any, stats: InterfaceStats, store_path: str,
                       labeller: Labeller | None = None,
                       log_dir: str | None = None, answers: Any | None = None,
                       val_accuracy: Any | None = None, make_predictor: Any | None = None,
                       agent_steps: Any | None = None) -> None:
    """Body of the preference-interface process.

    Until `stop_event` is set: take the segments A2C sent, pick pairs never shown before, label
    them, commit each label to the store at `store_path`, then put it on `pref_queue` (never
    dropped). Synthetic labels are made as fast as the trainer takes them (`max_in_flight`).
    Returns when `stop_event` is set, on Ctrl-C, once the store holds `stop_after_labels`, or
    when the labeller raises LabellingStopped.

    Args:
        labeller: overrides the one the config chooses (scripted teachers, tests).
        log_dir: where to write TensorBoard scalars (labels so far, labels/s, clips dropped).
        answers, val_accuracy: for a human labeller (see `make_labeller`).
        make_predictor: builds, in this process, the ensemble's P[left > right] per member
            (for disagreement selection), e.g. a partial of reward_predictor's
            `PreferencePredictor`.
        agent_steps: A2C's shared step counter (for a label schedule and the TensorBoard x-axis).
    """
    has_trainer = pref_queue is not None  # None: gathering, the labels only go to the store
    pair_seq, val_seq = np.random.SeedSequence(config.seed).spawn(2)
    pair_rng = np.random.default_rng(pair_seq)
    buffer = SegmentBuffer(config.max_segs, config.val_fraction, seed=val_seq,
                           max_pairs_per_clip=config.max_pairs_per_clip)
    store = PreferenceStore(store_path)
    n_stored = stats.labels_stored.value = len(store)
    labeller = labeller if labeller is not None else make_labeller(
        config, answers, stop_event, stats, val_accuracy, n_stored, LabelEditor(store, pref_queue),
        has_trainer=has_trainer)
    tb = _LabelLog(log_dir, stats, n_stored, agent_steps)
    predictor = make_predictor() if make_predictor and config.selection != "random" else None
    score = make_pair_scorer(config.selection, predictor)
    schedule = None if config.label_schedule == "none" else LabelSchedule(
        config.label_schedule, config.max_labels, config.total_frames,
        n_initial=min(config.initial_labels, config.max_labels),
        anneal_every=config.anneal_every_frames)
    done = False  # reached stop_after_labels: the reader of pref_queue is expected to drain it
    pending: list = []  # pairs drawn and not yet labelled (a person's next one: see below)
    n_asked, first_drawn = 0, 0.0  # a person's pairs asked so far; when the first was drawn
    try:
        while not stop_event.is_set():
            if config.stop_after_labels is not None and n_stored >= config.stop_after_labels:
                done = True
                return
            _drain_segments(seg_queue, buffer, stats)
            tb.maybe_log(n_stored)
            person = labeller.source == "human"
            wanted = _labels_wanted(config, stats, schedule, n_stored, agent_steps, person,
                                    has_trainer=has_trainer) - len(pending)
            if wanted > 0:
                pending += buffer.sample_new_pairs(wanted, pair_rng, score, config.oversample)
            if person and len(pending) == 1 and wanted > 0 and n_asked == 0:
                first_drawn = first_drawn or time.monotonic()  # wait a moment for a next pair
                hold_first = time.monotonic() - first_drawn < FIRST_PAIR_HOLD_S
            else:
                hold_first = False
            if not pending or hold_first:
                time.sleep(IDLE_SLEEP_S)
                continue
            pairs, pending = (pending[:1], pending[1:]) if person else (pending, [])
            n_asked += len(pairs)
            for left_id, left, right_id, right in pairs:
                if pending:
                    labeller.upcoming(pending[0][1], pending[0][3])
                mu = labeller.label(left, right)
                if mu is None:  # incomparable: not stored (§2.2.2)
                    continue
                pref = Preference(left, right, mu, labeller.source,
                                  is_validation=buffer.is_validation(left_id))
                label_id = store.add(pref)  # committed before anyone hears of it
                n_stored = stats.labels_stored.value = n_stored + 1
                if has_trainer:  # the clips travel packed: the trainer holds them so
                    pref_queue.put(Preference(buffer.packed(left_id), buffer.packed(right_id),
                                              mu, pref.source, pref.is_validation, label_id))
                increment(stats.labels_total)
                labeller.stored(label_id)
                if person:  # a person may have deleted labels meanwhile
                    n_stored = stats.labels_stored.value = len(store)
    except LabellingStopped:
        done = True  # the trainer (if any) keeps running and drains pref_queue
    except KeyboardInterrupt:
        pass  # every label made so far is already committed
    finally:
        store.close()
        tb.close()
        labeller.close()
        if not done and has_trainer and hasattr(pref_queue, "cancel_join_thread"):
            # Shutting down: the trainer may have stopped reading, and a label still buffered in
            # the queue would hold up this process's exit. Every label is in the store anyway.
            pref_queue.cancel_join_thread()


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


class _LabelLog:
    """TensorBoard scalars of the labelling side, written every few seconds."""

    def __init__(self, log_dir: str | None, stats: InterfaceStats, n_stored: int,
                 agent_steps: Any | None = None, every_s: float = 5.0) -> None:

        self.writer = ScalarWriter(log_dir) if log_dir else None
        self.stats, self.every_s = stats, every_s
        self.t_last, self.n_last = time.monotonic(), n_stored
        self.agent_steps = agent_steps

    def maybe_log(self, n_stored: int) -> None:
        now = time.monotonic()
        if self.writer is None or now - self.t_last < self.every_s:
            return
        # x-axis: agent steps when A2C shares its counter, else the label count
        step = self.agent_steps.value if self.agent_steps is not None else n_stored
        self.writer.add_scalar("labels/total", n_stored, step)
        self.writer.add_scalar("labels/per_sec", (n_stored - self.n_last) / (now - self.t_last),
                               step)
        self.writer.add_scalar("segments/received", self.stats.segments_received.value, step)
        self.writer.add_scalar("segments/dropped", self.stats.segments_dropped.value, step)
        self.t_last, self.n_last = now, n_stored

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def _drain_segments(seg_queue: Any, buffer: SegmentBuffer, stats: InterfaceStats) -> None:
    while True:
        try:
            seg = seg_queue.get_nowait()
        except queue.Empty:
            return
        buffer.add(seg)
        increment(stats.segments_received)


class ClipObserver:
    """A2C rollout observer: cuts clips from every rollout and sends them without blocking."""

    def __init__(self, n_envs: int, seg_queue: Any, dropped_counter: Any | None = None) -> None:
        from pref_interface.cutter import SegmentCutter

        self.cutter = SegmentCutter(n_envs)
        self.sender = QueueSender(seg_queue, dropped_counter)

    def __call__(self, rollout: Any) -> None:
        for seg in self.cutter.observe(rollout.obs, rollout.actions, rollout.true_rewards,
                                       rollout.dones):
            self.sender.send(seg)

    def close(self) -> None:
        """A2C is exiting: let a clip the interface has started reading arrive whole."""
        self.sender.close()


def make_clip_observers(seg_queue: Any, dropped_counter: Any, n_envs: int) -> list[ClipObserver]:
    """The observers the A2C process attaches (use functools.partial for the first two args)."""
    return [ClipObserver(n_envs, seg_queue, dropped_counter)]
