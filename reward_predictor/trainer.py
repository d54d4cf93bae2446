"""Fits the reward-predictor ensemble to the most recent labels."""
from __future__ import annotations

import dataclasses
import math
import os
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable, Iterable

import numpy as np
import torch

from clips.clip import Clip, ClipOrder, LabelEdit, Preference
from reward_predictor.clip_pool import ClipPool
from reward_predictor.config import BATCH_SIZE, LOSSES, MAX_PREFS, VAL_MAX_PAIRS
from reward_predictor.ensemble import RewardPredictorEnsemble, bootstrap_counts
from reward_predictor.loss import rank_targets
from reward_predictor.regularisation import INITIAL_ADAPTIVE_L2, adapt_l2
from reward_predictor.threads import ThreadChoice
from runtime.outputs import written_whole

CHECKPOINT_FORMAT = 1


class CheckpointError(Exception):
    """A reward-predictor checkpoint is missing, unreadable or does not fit the ensemble."""


def _optimizer_state_fits(saved: object, net: torch.nn.Module) -> bool:
    """Whether `saved` is an optimiser state for as many parameters as `net` has (what torch's
    load_state_dict checks), so a checkpoint can be checked without making an optimiser."""
    groups = saved.get("param_groups") if isinstance(saved, dict) else None
    return (isinstance(groups, list) and "state" in saved
            and sum(len(g.get("params", ())) for g in groups) == len(list(net.parameters())))


@dataclass(frozen=True)
class _HeldLabel:
    """A label as the trainer holds it: its clips are keys into the trainer's ClipPool."""

    seq: int
    left: bytes
    right: bytes
    mu: float
    source: str
    is_validation: bool
    label_id: int | None


class RewardPredictorTrainer:
    """Holds the latest `max_prefs` labels and trains the ensemble on them.

    Clips are held packed, each once however many labels share it, and expanded for the batch
    being trained on or scored. Validation labels (`Preference.is_validation`, App. A: 1/e of the
    data held out) are kept apart and never trained on. The label budget counts both kinds; the
    oldest label goes first. Each training label carries one bootstrap count per member, drawn
    when it arrives, and a member's minibatch is drawn with probability proportional to its
    counts.

    With `adaptive_l2`, each member's L2 coefficient starts at 1e-4 (unless already set) and
    `adapt_regularisation` moves it after each validation pass (App. A; Ibarz et al. 2018).
    """

    def __init__(self, ensemble: RewardPredictorEnsemble, max_prefs: int = MAX_PREFS,
                 batch_size: int = BATCH_SIZE, seed: int = 0, adaptive_l2: bool = False,
                 implied_pairs: bool = False, loss: str = "preference") -> None:
        if loss not in LOSSES:
            raise ValueError(f"loss {loss!r} is none of {', '.join(LOSSES)}")
        assert max_prefs >= 1 and batch_size >= 1, (max_prefs, batch_size)
        self.ensemble = ensemble
        self.adaptive_l2 = adaptive_l2
        if adaptive_l2:
            ensemble.l2 = [c if c > 0 else INITIAL_ADAPTIVE_L2 for c in ensemble.l2]
        self.max_prefs = max_prefs
        self.batch_size = batch_size
        self.rng = np.random.default_rng(seed)
        self.steps = 0
        self._seq = 0
        self.clips = ClipPool()
        self._train: deque[_HeldLabel] = deque()
        self._train_counts: deque[np.ndarray] = deque()
        self._counts_cache: np.ndarray | None = None
        self._val: deque[_HeldLabel] = deque()
        self._ids: set[int] = set()  # the store's ids of the labels held
        # --implied_pairs: pairs (better, worse) of sorted clips in different classes, at most as
        # many as the training labels, drawn afresh whenever the order changes.
        self.implied_pairs = implied_pairs
        self._implied: list[tuple[bytes, bytes]] = []
        # --predictor_loss rank|both: the sorted clips' keys and rank targets (loss.rank_targets)
        self.loss = loss
        self._ranked: tuple[list[bytes], np.ndarray] = ([], np.zeros(0, np.float32))

    # ---- labels -------------------------------------------------------------------------------
    def add(self, pref: Preference) -> None:
        """Store a label, dropping the oldest one once `max_prefs` are held. A label held already
        (its store id) is not held twice: at start-up one stored while the store was read comes
        from both the store and the labelling queue."""
        if pref.label_id is not None:
            if pref.label_id in self._ids:
                return
            self._ids.add(pref.label_id)
        label = _HeldLabel(self._seq, self.clips.add(pref.left), self.clips.add(pref.right),
                           pref.mu, pref.source, pref.is_validation, pref.label_id)
        if pref.is_validation:
            self._val.append(label)
        else:
            self._train.append(label)
            self._train_counts.append(bootstrap_counts(1, self.ensemble.ensemble_size, self.rng)[0])
            self._counts_cache = None
        self._seq += 1
        while self.n_labels > self.max_prefs:
            if self._val and (not self._train or self._val[0].seq < self._train[0].seq):
                old = self._val.popleft()
            else:
                old = self._train.popleft()
                self._train_counts.popleft()
                self._counts_cache = None
            self._ids.discard(old.label_id)
            self.clips.release(old.left)
            self.clips.release(old.right)

    def edit(self, edit: LabelEdit) -> bool:
        """Apply a person's change to a stored label (new mu, or deleted) to the copy held here;
        False when that label is not held."""
        for held in (self._train, self._val):
            for k, label in enumerate(held):
                if label.label_id != edit.label_id:
                    continue
                if edit.mu is not None:
                    held[k] = dataclasses.replace(label, mu=edit.mu)
                    return True
                del held[k]
                if held is self._train:
                    del self._train_counts[k]
                    self._counts_cache = None
                self._ids.discard(label.label_id)
                self.clips.release(label.left)
                self.clips.release(label.right)
                return True
        return False

    def set_order(self, order: ClipOrder) -> None:
        """What the sorted order gives the trainer: its clips' rank targets (a rank loss), and
        with `implied_pairs` up to `n_train` pairs of clips in different classes, drawn
        uniformly from all such pairs."""
        keys = [key for cls in order.classes for key in cls]
        rank = np.repeat(np.arange(len(order.classes)), [len(c) for c in order.classes])
        if self.loss != "preference":
            self._ranked = (keys, rank_targets(rank, max(len(order.classes), 1)))
        if not self.implied_pairs:
            return
        n = len(keys)
        if n < 2 or len(order.classes) < 2:
            self._implied = []
            return
        a, b = self.rng.integers(0, n, (2, 4 * max(self.n_train, 1)))
        cross = rank[a] != rank[b]
        better = np.where(rank[a] > rank[b], a, b)[cross]
        worse = np.where(rank[a] > rank[b], b, a)[cross]
        self._implied = [(keys[i], keys[j]) for i, j in zip(better, worse)][:self.n_train]

    @property
    def n_implied(self) -> int:
        """Implied pairs drawn from the latest order (--implied_pairs)."""
        return len(self._implied)

    def held_labels(self) -> list[Preference]:
        """Every label held, oldest first (its clips packed, as held)."""
        return [Preference(self.clips.get(x.left), self.clips.get(x.right), x.mu, x.source,
                           x.is_validation)
                for x in sorted([*self._train, *self._val], key=lambda label: label.seq)]

    def _batch_clip(self, key: bytes) -> Clip:
        """A held clip for a training batch: expanded, unless the members run from each clip's
        kept features (`ensemble.ClipFeatures`), which read its frames once."""
        clip = self.clips.get(key)
        return clip if self.ensemble.clip_features is not None else clip.expand()

    def _expand(self, labels: Iterable[_HeldLabel]) -> list[Preference]:
        """Labels as Preferences, each clip expanded once however often it appears."""
        clips: dict[bytes, Clip] = {}

        def clip(key: bytes) -> Clip:
            if key not in clips:
                clips[key] = self._batch_clip(key)
            return clips[key]
        return [Preference(clip(x.left), clip(x.right), x.mu, x.source, x.is_validation)
                for x in labels]

    @property
    def n_labels(self) -> int:
        return len(self._train) + len(self._val)

    @property
    def n_train(self) -> int:
        return len(self._train)

    @property
    def n_val(self) -> int:
        return len(self._val)

    def bootstrap_counts(self) -> np.ndarray:
        """int (n_train, ensemble_size): how often each member's resample holds each training label."""
        if self._counts_cache is None:
            self._counts_cache = (np.stack(self._train_counts) if self._train_counts else
                                  np.zeros((0, self.ensemble.ensemble_size), dtype=np.int64))
        return self._counts_cache

    def sample_batches(self) -> list[list[Preference]]:
        """One minibatch of `batch_size` training labels per member, drawn with replacement with
        probability proportional to the member's bootstrap counts."""
        assert self._train, "no training labels yet"
        counts = self.bootstrap_counts()
        drawn = []
        for m in range(self.ensemble.ensemble_size):
            weights = counts[:, m].astype(np.float64)
            total = weights.sum()
            # A member whose resample is still empty (few labels) trains on all of them.
            p = weights / total if total > 0 else None
            drawn += [self._train[i] for i in self.rng.choice(len(self._train), self.batch_size, p=p)]
        # With --implied_pairs each member's batch also gets as many pairs the sorted order
        # implies (better clip left) as it has labels, from those whose clips are still held.
        implied = [(b, w) for b, w in self._implied if b in self.clips and w in self.clips]
        k = min(self.batch_size, len(implied))
        for _ in range(self.ensemble.ensemble_size if k else 0):
            drawn += [_HeldLabel(-1, *implied[i], 1.0, "implied", False, None)
                      for i in self.rng.choice(len(implied), k)]
        prefs = self._expand(drawn)  # each clip expanded once for all members' batches
        b, n = self.batch_size, self.batch_size * self.ensemble.ensemble_size
        return [prefs[m * b:(m + 1) * b] + prefs[n + m * k:n + (m + 1) * k]
                for m in range(self.ensemble.ensemble_size)]

    # ---- training -----------------------------------------------------------------------------
    def sample_ranked(self) -> list[tuple[list[Clip], np.ndarray]] | None:
        """For a rank loss: per member, `2 * batch_size` sorted clips still held (as many as a
        batch of labels has) and their rank targets; None without a rank loss or an order."""
        keys, targets = self._ranked
        held = [i for i, key in enumerate(keys) if key in self.clips]
        if self.loss == "preference" or len(held) < 2:
            return None
        drawn = [self.rng.choice(held, 2 * self.batch_size) for _ in range(self.ensemble.ensemble_size)]
        expanded = {i: self._batch_clip(keys[i]) for i in np.unique(np.concatenate(drawn))}
        return [([expanded[i] for i in idx], targets[idx]) for idx in drawn]  # each clip once

    def train_steps(self, n: int = 1) -> dict:
        """`n` optimiser steps per member; returns the metrics of the last one."""
        metrics: dict = {}
        for _ in range(n):
            ranked = self.sample_ranked()
            metrics = self.ensemble.train_step(
                self.sample_batches(), ranked,
                preference_weight=0.0 if self.loss == "rank" and ranked else 1.0)
            self.steps += 1
        return metrics

    def pretrain(self, n_epochs: int, progress_cb: Callable[[int, dict], None] | None = None,
                 should_stop: Callable[[], bool] | None = None,
                 threads: ThreadChoice | None = None) -> dict:
        """Train for `n_epochs` passes over the training labels (App. A: 200 epochs on the initial
        500 labels before RL starts). An epoch is ceil(n_train / batch_size) steps; `progress_cb`
        gets (epoch number from 1, metrics of the epoch's last step). `should_stop` is asked
        before every step, so a stop request is honoured within one step. With `threads`, each
        step runs on the torch threads it chooses, and its time is recorded there."""
        assert self._train, "no training labels to pretrain on"
        metrics: dict = {}
        steps_per_epoch = math.ceil(self.n_train / self.batch_size)
        for epoch in range(1, n_epochs + 1):
            for _ in range(steps_per_epoch):
                if should_stop is not None and should_stop():
                    return metrics
                if threads is None:
                    metrics = self.train_steps(1)
                    continue
                n = threads.take(agent_waiting=True)  # nothing else of the run's is working
                start = time.monotonic()
                metrics = self.train_steps(1)
                threads.record(n, time.monotonic() - start)
            if progress_cb is not None:
                progress_cb(epoch, metrics)
        return metrics

    def validate(self, max_pairs: int | None = VAL_MAX_PAIRS) -> dict:
        """Eval-mode loss and accuracy on the validation labels and on a sample of the training
        labels (so the two losses can be compared, as adaptive L2 does). At most `max_pairs`
        random labels of each kind are scored; None scores them all. NaN where a set is empty.

        `member_train_loss` is each member's mean loss on the training sample; `member_inbag_loss`
        weights that sample by the member's bootstrap counts, i.e. it is the loss on the member's
        own resample, what the member is fit to (about 1/e of the training labels are out of its
        bag and would pull the plain figure towards the validation loss).
        `true_return_correlation` is that of the validation clips (see `evaluate`)."""
        val = self._expand(self._val[i] for i in self._subset_indices(len(self._val), max_pairs))
        train_idx = self._subset_indices(len(self._train), max_pairs)
        train = self._expand(self._train[i] for i in train_idx)
        v = self.ensemble.evaluate(val)
        t = self.ensemble.evaluate(train, weights=self.bootstrap_counts()[train_idx])
        return {"val_loss": v["loss"], "val_accuracy": v["accuracy"],
                "train_loss": t["loss"], "train_accuracy": t["accuracy"],
                "member_val_loss": v["member_loss"], "member_train_loss": t["member_loss"],
                "member_inbag_loss": t["member_weighted_loss"],
                "true_return_correlation": v["true_return_correlation"]}

    def adapt_regularisation(self, metrics: dict | None = None) -> list[float]:
        """Adaptive L2 (App. A): move each member's coefficient to keep its validation loss within
        1.1-1.5x its training loss; returns the coefficients (unchanged when `adaptive_l2` is off).

        `metrics` is this pass's `validate()` result (validated afresh if None); the member's
        in-bag loss serves as its training loss.
        """
        if not self.adaptive_l2:
            return list(self.ensemble.l2)
        if metrics is None:
            metrics = self.validate()
        self.ensemble.l2 = adapt_l2(self.ensemble.l2, metrics["member_val_loss"],
                                    metrics["member_inbag_loss"])
        return list(self.ensemble.l2)

    def _subset_indices(self, n: int, max_pairs: int | None) -> np.ndarray:
        if max_pairs is None or n <= max_pairs:
            return np.arange(n)
        return self.rng.choice(n, size=max_pairs, replace=False)

    # ---- checkpoints --------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Weights, normalisers, optimiser states, L2 coefficients and step count (no labels)."""
        return {"format": CHECKPOINT_FORMAT,
                "n_members": self.ensemble.ensemble_size,
                "model": self.ensemble.state_dict(),
                "optimizers": [opt.state_dict() for opt in self.ensemble.optimizers],
                "l2": list(self.ensemble.l2),
                "steps": self.steps}

    def save(self, path: str) -> None:
        """Write a checkpoint atomically (a crash mid-write leaves the previous one intact)."""
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with written_whole(path, f".tmp{os.getpid()}") as tmp:
            torch.save(self.state_dict(), tmp)

    def load(self, path: str, optimizers: bool = True) -> None:
        """Restore a checkpoint written by `save`; raises CheckpointError with a one-line reason.
        With `optimizers=False` the optimiser states are checked but not restored (an ensemble
        that is only used, never trained, then makes no optimiser)."""
        if not os.path.isfile(path):
            raise CheckpointError(f"reward predictor checkpoint not found: {path}")
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as e:  # torch raises several types for truncated or foreign files
            raise CheckpointError(f"unreadable reward predictor checkpoint {path}: not a torch "
                                  f"checkpoint, or a damaged one ({type(e).__name__})") from e
        if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
            raise CheckpointError(f"not a reward predictor checkpoint (format {CHECKPOINT_FORMAT}): {path}")
        if state["n_members"] != self.ensemble.ensemble_size:
            raise CheckpointError(f"checkpoint {path} has {state['n_members']} ensemble members, "
                                  f"expected {self.ensemble.ensemble_size}")
        # Check the fit before copying anything, so a mismatch leaves the ensemble untouched.
        current, saved = self.ensemble.state_dict(), state.get("model", {})
        wrong = sorted(set(current) ^ set(saved)) or [
            k for k in current if tuple(current[k].shape) != tuple(saved[k].shape)]
        if wrong:
            raise CheckpointError(f"checkpoint {path} does not fit this reward predictor "
                                  f"(e.g. {wrong[0]}): another env kind, batchnorm setting or format?")
        opt_states = state.get("optimizers")
        if not (isinstance(opt_states, list) and len(opt_states) == self.ensemble.ensemble_size
                and all(map(_optimizer_state_fits, opt_states, self.ensemble.members))):
            raise CheckpointError(f"checkpoint {path} does not fit this reward predictor: "
                                  f"its optimiser states are missing or for other nets")
        try:
            self.ensemble.load_state_dict(state["model"])
            if optimizers:
                for opt, opt_state in zip(self.ensemble.optimizers, opt_states):
                    opt.load_state_dict(opt_state)
        except (RuntimeError, KeyError, ValueError) as e:
            reason = str(e).strip().splitlines()[0]
            raise CheckpointError(f"checkpoint {path} does not fit this reward predictor: {reason}") from e
        # Adaptive L2 goes on from the saved coefficients (from 1e-4 where they were off); without
        # it, this trainer's own (none) stay whatever the checkpoint's run used.
        if self.adaptive_l2:
            self.ensemble.l2 = [float(x) if x > 0 else INITIAL_ADAPTIVE_L2 for x in state["l2"]]
        self.steps = int(state["steps"])
