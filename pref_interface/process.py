"""The labelling steps of the loop: clips in, labels out (stored first, then sent on).

    A2C --ClipObserver--> clips --> Labelling --> PreferenceStore
                                             \\-> preferences --> reward-predictor trainer

`launch/loop.py:labelling_loop` runs the steps in order; this module holds what each one does.
"""
from __future__ import annotations

import math
import queue
import threading
import time
from dataclasses import replace
from typing import Any, Iterable, Iterator

import numpy as np

from clips.clip import Clip, Preference
from clips.demonstrations import DemonstrationMix, load_demonstrations
from pref_interface.config import LabellingConfig
from pref_interface.labellers.keys import WITHDRAWAL_WAIT_S
from pref_interface.labellers.teachers import Labeller, make_teacher
from pref_interface.labelling import LabellingStats, LabelEditor, increment
from pref_interface.queries.pairs import ClipBuffer
from pref_interface.queries.schedule import FRAMESKIP, LabelSchedule
from pref_interface.queries.modes import make_query_mode
from pref_interface.queries.selection import PREDICTOR_SELECTIONS
from pref_interface.store import PreferenceStore
from runtime.queues import close_sending_end
from runtime.scalars import Telemetry

CLIP_QUEUE_MAXSIZE = 4  # A2C drops clips rather than wait for labelling
LOG_EVERY_S = 5.0  # how often labelling writes its TensorBoard scalars
GATHER_BATCH = 16  # pairs drawn at a time while no trainer paces the labelling
# Nobody answered for this long and this many new pairs wait: the agent cuts no clips (and, while
# gathering, stops playing) until someone answers again.
IDLE_AFTER_S = 20.0
LABEL_FLUSH_S = 1.0  # at the end, the most a label part-way into the trainer's pipe may hold it up
PAIRS_AHEAD = 20


class ClipDemand:
    """Keeps the agent's `clips_wanted` flag set while clips are worth cutting: someone
    answered in the last IDLE_AFTER_S seconds, or fewer than PAIRS_AHEAD new pairs wait and
    labelling takes clips. A thread checks once a second: one person's labeller blocks on the
    pair shown (`asking`), taking no clips meanwhile, for as long as they are away."""

    def __init__(self, event: Any) -> None:
        self.event = event
        self.last_answer = time.monotonic()
        self.pairs_waiting = 0  # updated by labelling's own thread
        self.asking = False  # labelling's thread waits for one person's answer
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="clip-demand", daemon=True)
        self._thread.start()

    def answered(self) -> None:
        """Someone answered: clips are wanted again at once."""
        self.last_answer = time.monotonic()
        self.event.set()

    @property
    def wanted(self) -> bool:
        return (time.monotonic() - self.last_answer < IDLE_AFTER_S
                or (self.pairs_waiting < PAIRS_AHEAD and not self.asking))

    def _watch(self) -> None:
        while not self._closed.wait(1.0):
            if self.wanted:
                self.event.set()
            else:
                self.event.clear()

    def close(self) -> None:
        """Labelling is over: an agent held for clips is let go."""
        self._closed.set()
        self.event.set()


def make_labeller(config: LabellingConfig, answers: Any | None = None, stop: Any | None = None,
                  stats: LabellingStats | None = None, trainer_status: Any | None = None,
                  labels: LabelEditor | None = None, has_trainer: bool = True,
                  reinsert: Any | None = None) -> Labeller:
    """The labeller the config asks for. A person (`synthetic=False`) needs `answers`, the queue
    of key tokens from the process that owns the terminal; `stop`, `stats`, `trainer_status`
    (the trainer's, or None) and `has_trainer` (a trainer takes the labels) feed the prompt;
    `labels` lets the person change stored labels and `reinsert` place a sorted clip again (the
    labelling page)."""
    if config.synthetic:
        return make_teacher(config.teacher, rng=np.random.default_rng(
            np.random.SeedSequence(config.seed).spawn(3)[2]),
            episode_end_penalty=config.episode_end_penalty)
    if answers is None:
        raise ValueError("human labelling needs the answers queue of a terminal key reader")
    if config.labellers:
        from pref_interface.labellers.team import Team

        return Team(list(config.labellers), config.page_updates, answers, labels)
    from pref_interface.labellers.human import HumanLabeller

    player = config.clip_player
    if player == "web":
        from pref_interface.labellers.web.player import WebPlayer

        player = WebPlayer(config.page_updates)
    return HumanLabeller(answers, player, stop, stats, trainer_status, config.stop_after_labels,
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
        log_dir: where to write TensorBoard scalars (labels so far, labels/s, their share of
            ties, clips dropped).
        trainer_status: the trainer's part of a human labeller's prompt (see `make_labeller`).
        make_predictor: builds, in this process, the ensemble's P[left > right] per member
            (for disagreement selection), e.g. a partial of reward_predictor's
            `PreferencePredictor`.
        agent_steps: A2C's shared step counter (for a label schedule and the TensorBoard x-axis).
    """

    def __init__(self, config: LabellingConfig, channels: Any, *, stats: LabellingStats,
                 store_path: str, labeller: Labeller | None = None, log_dir: str | None = None,
                 trainer_status: Any | None = None, make_predictor: Any | None = None,
                 agent_steps: Any | None = None) -> None:
        self.config, self.stats, self.agent_steps = config, stats, agent_steps
        self.clips, self.preferences = channels.clips, channels.preferences
        self.has_trainer = self.preferences is not None
        pair_seq, val_seq = np.random.SeedSequence(config.seed).spawn(2)
        self.pair_rng = np.random.default_rng(pair_seq)
        self.buffer = ClipBuffer(config.max_clips, config.val_fraction, seed=val_seq,
                                 max_pairs_per_clip=config.max_pairs_per_clip)
        self.store = PreferenceStore(store_path)
        # Clips of someone else's play, added to the pool beside the agent's (--demonstrations).
        self.demos = DemonstrationMix(
            load_demonstrations(config.demonstrations), config.demonstration_share,
            config.val_fraction, np.random.default_rng(np.random.SeedSequence(config.seed).spawn(4)[3])
        ) if config.demonstrations else None
        self.n_stored = stats.labels_stored.value = len(self.store)
        self.shown_swapped = False  # the last pair asked was shown right clip first
        if self.demos is not None:  # a resumed run: its counts go on from the stored labels
            for pref in self.store.iter_latest(self.n_stored):
                self.demos.labelled(pref)
        person = labeller.source == "human" if labeller is not None else not config.synthetic
        person = person and not config.labellers  # a team takes every pair drawn, as a teacher
        # The ensemble's P[left > right] per member: for the pair selection that asks it, and to
        # measure how often each of several people agrees with it.
        self.predict = make_predictor() if make_predictor is not None and (
            config.labellers or config.query_selection in PREDICTOR_SELECTIONS) else None
        self.mode = make_query_mode(config, self.buffer, self.store.iter_latest(len(self.store)),
                                    self.pair_rng, person,
                                    (lambda: self.predict) if self.predict is not None else None,
                                    send=self.preferences.put if self.has_trainer else None)
        # A person's changes to stored labels (with sorting, a changed comparison's clip is
        # placed again, so that the order agrees with the labels and with their replay).
        self.editor = LabelEditor(self.store, self.preferences, after_edit=self.mode.after_edit)
        self.labeller = labeller if labeller is not None else make_labeller(
            config, channels.answers, channels.stop, stats, trainer_status, self.editor,
            has_trainer=self.has_trainer, reinsert=self.mode.reinsert)
        self.person = self.labeller.source == "human"
        self.team = self.labeller if config.labellers else None
        self.copies: list[int] = []  # how many people each pair drawn for a team goes to
        self.mode.show = self.labeller.show_order
        self.telemetry = Telemetry(log_dir, every_s=LOG_EVERY_S)
        self.made_at_dump = stats.labels_total.value  # labels made by the last record
        wanted = getattr(channels, "clips_wanted", None)
        self.demand = ClipDemand(wanted) if wanted is not None else None
        self.schedule = None if config.label_schedule == "none" else LabelSchedule(
            config.label_schedule, config.max_labels, config.total_frames,
            n_initial=min(config.initial_labels, config.max_labels),
            anneal_every=config.anneal_every_frames)
        # Reached stop_after_labels or the person stopped: the trainer drains `preferences`.
        self.done = False

    def take_clips(self) -> None:
        """Every clip the agent has sent into the pool pairs are drawn from."""
        arrived = _drain_clips(self.clips, self.buffer, self.stats)
        if self.demos is not None and arrived:
            arrived += [(self.buffer.add(clip, split), clip)
                        for clip, split in self.demos.after(len(arrived))]
        for clip_id, clip in arrived:
            self.mode.offer(clip_id, clip)
        if arrived and self.demand is not None:
            self.demand.pairs_waiting = self.buffer.n_unoffered_pairs
        target = self.config.stop_after_labels
        self.done = self.done or (target is not None and self.n_stored >= target)

    def record(self) -> None:
        """Labels so far, per second and their share of ties, clips received and dropped,
        written every few seconds at the agent's steps when it shares its counter, else at the
        label count."""
        t = self.telemetry
        if not t.due():
            return
        t.record("labels/total", self.n_stored)
        # labels made, not the store's count, which a person's deletions lower
        t.record("labels/per_sec", (self.stats.labels_total.value - self.made_at_dump)
                 / t.since_dump())
        ties = self.store.tie_share()
        if ties is not None:  # near 1, r̂ has almost nothing to learn an order from
            t.record("labels/tie_share", ties)
        t.record("clips/received", self.stats.clips_received.value)
        t.record("clips/dropped", self.stats.clips_dropped.value)
        for tag, value in {**self.mode.scalars(),
                           **(self.demos.scalars() if self.demos is not None else {})}.items():
            t.record(tag, value)
        if self.demand is not None:
            t.record("clips/wanted", float(self.demand.wanted))
        if self.team is not None:
            for names, share in self.team.agreement.shares().items():
                t.record(f"agreement/{names}", share)
            self.team.show_status(team_status(self.n_stored, self.team.n_open,
                                              self.team.agreement.described()))
        t.dump(self.agent_steps.value if self.agent_steps is not None else self.n_stored)
        self.made_at_dump = self.stats.labels_total.value

    def draw_pairs(self) -> list:
        """The queries to ask now, within the label schedule's budget: all that are drawn for a
        teacher; one for a person, the next drawn ahead. Empty: nothing to do yet."""
        # A team's answers still to come count against the label budget.
        outstanding = self.team.outstanding if self.team is not None else 0
        team_pairs = self.team.pairs_to_open + outstanding if self.team is not None else None
        wanted = _labels_wanted(self.config, self.stats, self.schedule, self.n_stored,
                                self.agent_steps, self.person and self.team is None,
                                has_trainer=self.has_trainer, team_pairs=team_pairs) - outstanding
        if self.team is not None:  # a pair shown to two people takes two answers of the budget
            self.copies = self.team.plan(wanted, self.pair_rng, self.config.overlap)
            pairs = self.mode.draw(len(self.copies))
        else:
            pairs = self.mode.draw(wanted)
        if pairs and self.demand is not None:
            self.demand.pairs_waiting = self.buffer.n_unoffered_pairs
        return pairs

    def ask(self, pairs: list) -> Iterator[Preference]:
        """The labels of these pairs and of any asked before, as they are answered: a teacher's
        or a person's one by one (each yielded, so committed, before the next is asked); a
        team's as people answer them, each named by its labeller."""
        if self.team is None:
            for pair in pairs:
                if self.demand is not None:
                    self.demand.asking = True
                pref = self.label(pair)
                if self.demand is not None:
                    self.demand.asking = False
                    self.demand.answered()
                if pref is not None:  # incomparable pairs are not stored (§2.2.2)
                    yield pref
            return
        self.team.hand_out(pairs, self.copies)
        yield from self._team_labels(self.team.answered())

    def _team_labels(self, answered: Iterable[tuple[Any, tuple]]) -> Iterator[Preference]:
        """The team's answers to their pairs as labels, each named by its labeller."""
        for answer, pair in answered:
            if self.demand is not None:
                self.demand.answered()
            p_left = None
            if answer.mu is not None and self.predict is not None:
                p_left = float(np.mean(self.predict([pair[1]], [pair[3]])))
                if math.isfinite(p_left):
                    self.team.agreement.add_ensemble(answer.labeller, answer.mu, p_left)
                else:  # a diverged predictor: no answer to compare, and none kept
                    p_left = None
            if answer.mu is not None:  # the ensemble's answer is kept with it, for the summary
                yield Preference(pair[1], pair[3], answer.mu, "human",
                                 is_validation=self.mode.split(pair[0]),
                                 labeller=answer.labeller, ensemble_p=p_left)

    def label(self, pair: tuple) -> Preference | None:
        """The labeller's answer as a label; None for an incomparable pair (§2.2.2: not
        stored; a clip being sorted is dropped). Raises LabellingStopped when the labeller
        stops."""
        left_id, left, _, right = pair
        upcoming = self.mode.upcoming()
        if upcoming is not None:
            self.labeller.upcoming(upcoming[1], upcoming[3])
        self.shown_swapped = self.mode.show_swapped()
        if self.shown_swapped:
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
        if self.demos is not None:  # the store keeps which clips are demonstrations
            pref = replace(pref, demonstration=self.demos.sides(pref))
        if self.shown_swapped:  # and that a person saw the pair right clip first
            pref = replace(pref, shown_swapped=True)
        label_id = self.store.add(pref)
        self.n_stored = self.stats.labels_stored.value = self.n_stored + 1
        if self.has_trainer:
            self.preferences.put(replace(pref, label_id=label_id))
        self.mode.answered(pref.is_validation, pref.mu)  # e.g. the sorted order moves now
        increment(self.stats.labels_total)
        if self.demos is not None:
            self.demos.labelled(pref)
        self.labeller.stored(label_id)
        self.shown_swapped = False
        if self.person:  # a person may have deleted labels meanwhile
            self.n_stored = self.stats.labels_stored.value = len(self.store)

    def idle(self) -> None:
        """No pair to ask now: a person's edits and re-insertions from the page are taken
        anyway (and Ctrl-D stops labelling) rather than waiting for the next pair."""
        self.labeller.idle()

    def close(self) -> None:
        try:
            if self.team is not None:  # answers the pages took as the run stopped are kept
                for pref in self._team_labels(self.team.answered(
                        self.team.last_answers(WITHDRAWAL_WAIT_S))):
                    self.commit(pref)
        finally:
            self._close()

    def _close(self) -> None:
        try:
            if self.demand is not None:
                self.demand.close()
            self.store.close()
            self.telemetry.close()
        finally:  # the page learns that labelling is over, whatever failed before
            self.labeller.close()
        if not self.done and self.has_trainer:
            # Shutting down: a label part-way into the pipe is written whole while the trainer
            # reads (else its reading thread would wait for the rest forever); one the trainer no
            # longer reads does not hold up this process's exit. Every label is in the store.
            close_sending_end(self.preferences, LABEL_FLUSH_S)


def team_status(n_stored: int, n_open: int, agreement: str) -> list[str]:
    """The lines every labeller's page shows: labels so far, pairs out, agreement."""
    return [f"labels stored {n_stored} | pairs out {n_open}"] + (
        [f"agreement {agreement}"] if agreement else [])


def _labels_wanted(config: LabellingConfig, stats: LabellingStats, schedule: LabelSchedule | None,
                   n_stored: int, agent_steps: Any | None, human: bool, has_trainer: bool,
                   team_pairs: int | None = None) -> int:
    """How many pairs to have in hand now: for a person, the pair shown and the next one (the
    labelling page loads it ahead); for several people, `team_pairs`; synthetic labels fill the
    free in-flight slots (so the trainer is never starved nor flooded), or without a trainer a
    batch of GATHER_BATCH; all within the schedule's budget."""
    if team_pairs is not None:
        wanted = team_pairs
    elif human:  # one person cannot flood the trainer: never kept waiting on it
        wanted = 2
    else:
        wanted = config.max_in_flight - stats.labels_in_flight if has_trainer else GATHER_BATCH
    if config.stop_after_labels is not None:
        wanted = min(wanted, config.stop_after_labels - n_stored)
    if schedule is not None and agent_steps is not None:
        wanted = min(wanted, schedule.labels_due(agent_steps.value * FRAMESKIP) - n_stored)
    return max(0, wanted)


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
