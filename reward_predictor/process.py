"""The predictor trainer's steps in the loop: labels in from a queue, weights out to shared
memory; and pretraining on the first labels.

`launch/loop.py:predictor_loop` runs the trainer's steps in order; this module holds what each
step does."""
from __future__ import annotations

import logging
import queue
import time
from typing import Any, Collection, Iterator

import numpy as np
import torch

from clips.clip import ClipOrder, LabelEdit, Preference
from reward_predictor.config import VAL_TIES_ONLY, TrainerConfig, TrainerStats
from reward_predictor.ensemble import RewardPredictorEnsemble
from reward_predictor.nets import make_reward_net
from reward_predictor.pace import ahead_of_agent
from reward_predictor.shared import SharedWeights
from reward_predictor.threads import ThreadChoice
from reward_predictor.trainer import RewardPredictorTrainer
from runtime.precision import use_bf16
from runtime.process_setup import reuse_freed_memory
from runtime.queues import QueueReader
from runtime.scalars import Telemetry

log = logging.getLogger(__name__)

REST_POLL_S = 0.005  # while resting (duty < 1), how often the trainer checks whether A2C waits
PRETRAIN_VALIDATE_EVERY_EPOCHS = 5  # pretraining's validation (and adaptive L2) cadence


def build_ensemble(config: TrainerConfig, device: str = "cpu") -> RewardPredictorEnsemble:
    """The ensemble the config describes, on `device` (on the CPU it is also the template for
    SharedWeights and the consumers' copy)."""
    ensemble = RewardPredictorEnsemble(
        lambda: make_reward_net(config.env_kind, config.dropout, config.batchnorm),
        ensemble_size=config.ensemble_size, lr=config.lr, reward_std=config.reward_std,
        noise=config.label_noise)
    ensemble.bf16 = use_bf16(config.precision, device)
    return ensemble.to(device)  # before any optimiser state exists, so that follows the weights


def build_trainer(config: TrainerConfig, device: str = "cpu") -> RewardPredictorTrainer:
    """The trainer the config describes (its label budget, batch, seed, adaptive L2, implied
    pairs and loss), over `build_ensemble`'s ensemble on `device`."""
    return RewardPredictorTrainer(build_ensemble(config, device), config.max_prefs,
                                  config.batch_size, config.seed, adaptive_l2=config.adaptive_l2,
                                  implied_pairs=config.implied_pairs, loss=config.loss)


class PredictorTraining:
    """The predictor's trainer as the loop's steps: labels in from the labelling side
    (`take_labels`), one training step of the ensemble on the label buffer (`train_step`; App. A:
    it keeps training on the buffer), the weights published to the agent's r̂ (`publish_if_due`),
    a validation pass that also adapts L2 (`validate_if_due`), a checkpoint (`checkpoint_if_due`).

    `channels` (launch.loop.Channels): labels come on `preferences` (every one kept: the queue
    is drained, never dropped from), the weights go to `reward_weights`, `stop` ends it.
    """

    def __init__(self, config: TrainerConfig, channels: Any, *, stats: Any, log_dir: str) -> None:
        self.config, self.stats = config, stats
        # read in a thread: a label the labelling process was killed part-way through sending
        # never holds up this process
        self.preferences = QueueReader(channels.preferences, "labels-reader")
        self.reward_weights: SharedWeights = channels.reward_weights
        self.stop: Any = channels.stop
        self.trainer = _set_up(config, config.torch_threads, config.initial_prefs_path)
        self.reward_weights.publish(self.trainer.ensemble)
        # From a checkpoint: resumed, and its step starts a new session in TensorBoard.
        self.telemetry = Telemetry(log_dir, purge_step=self.trainer.steps or None)
        self.start_step = self.last_publish_step = self.last_ckpt_step = self.trainer.steps
        self.steps_at_dump = self.trainer.steps
        self.last_publish_t = time.monotonic()
        self.thread_choice = _thread_choice(config)
        self.step_seconds = 0.0  # how long the last step took

    @property
    def ahead_of_agent(self) -> bool:
        """Trained on as many labels per agent step as the ceiling allows (never without one)."""
        return ahead_of_agent(self.reward_weights, self.config.max_labels_per_step)

    @property
    def has_labels(self) -> bool:
        """At least one training label is held (nothing to train on before)."""
        return self.trainer.n_train > 0

    def take_labels(self) -> None:
        """Every label (and every change a person made to one) the labelling side has sent."""
        for item in _drain(self.preferences):
            if isinstance(item, LabelEdit):
                self.trainer.edit(item)
                continue
            if isinstance(item, ClipOrder):  # the sorted clips changed (--queries sort)
                self.trainer.set_order(item)
                continue
            if item.labeller not in self.config.left_out:
                self.trainer.add(item)
            with self.stats.labels_received.get_lock():
                self.stats.labels_received.value += 1

    def train_step(self) -> None:
        """One step of every member on a batch of labels; while A2C waits for the predictor,
        its threads too, as long as that makes steps faster (`ThreadChoice`). Then a rest, so
        the agent keeps its share of the cores (`duty`)."""
        config = self.config
        wanted = self.thread_choice.take(self.reward_weights.consumer_waiting)
        t_step = time.monotonic()
        metrics = self.trainer.train_steps(1)
        self.reward_weights.labels_trained = (self.trainer.steps - self.start_step) * \
            config.batch_size
        self.step_seconds = time.monotonic() - t_step
        # A step on borrowed threads counts only if A2C waited throughout: one that A2C's own
        # work overlapped (it resumes within a poll of the step before) says nothing of others.
        if wanted == config.torch_threads or self.reward_weights.consumer_waiting:
            self.thread_choice.record(wanted, self.step_seconds)
        _record_training(self.telemetry, metrics)
        if config.duty < 1.0:
            _rest(self.step_seconds * (1.0 - config.duty) / config.duty, self.stop,
                  self.reward_weights)

    def publish_if_due(self) -> None:
        now = time.monotonic()
        if (self.trainer.steps - self.last_publish_step >= self.config.publish_every_steps
                or now - self.last_publish_t >= self.config.publish_every_s):
            self.reward_weights.publish(self.trainer.ensemble)
            self.last_publish_step, self.last_publish_t = self.trainer.steps, now

    def validate_if_due(self) -> None:
        """Every `validate_every_steps`: validation, L2 adapted to it, and the figures written."""
        step = self.trainer.steps
        if step % self.config.validate_every_steps:
            return
        t = self.telemetry
        t.record("reward_predictor/steps_per_sec",
                 (step - self.steps_at_dump) / max(t.since_dump(), 1e-9))
        self.steps_at_dump = step
        # 1 while steps on A2C's idle threads are faster than on the trainer's own (ThreadChoice)
        t.record("reward_predictor/borrowing_pays", float(self.thread_choice.borrowing_pays))
        _validate(self.trainer, self.stats, self.config.val_max_pairs, t)
        t.dump(step)

    def checkpoint_if_due(self) -> None:
        config = self.config
        if config.ckpt_path and config.ckpt_interval > 0 and \
                self.trainer.steps - self.last_ckpt_step >= config.ckpt_interval:
            self.trainer.save(config.ckpt_path)
            self.last_ckpt_step = self.trainer.steps

    def close(self) -> None:
        """The last weights published and saved."""
        try:
            self.reward_weights.publish(self.trainer.ensemble)
            if self.config.ckpt_path and self.trainer.steps > 0:
                self.trainer.save(self.config.ckpt_path)
        finally:
            self.telemetry.close(self.trainer.steps)
            self.reward_weights.release()


def _set_up(config: TrainerConfig, threads: int, prefs_path: str | None) -> RewardPredictorTrainer:
    """What the trainer and pretraining processes do first: the trainer the config describes,
    its checkpoint loaded (CheckpointError ends the process with its message) and the latest
    labels of `prefs_path` added."""
    if config.keep_freed_memory:  # otherwise the process started with malloc tunables
        reuse_freed_memory()
    torch.set_num_threads(threads)
    torch.manual_seed(config.seed)
    trainer = build_trainer(config, config.device)
    if config.load_ckpt_path:
        trainer.load(config.load_ckpt_path)
        log.info("reward predictor loaded from %s (step %d)", config.load_ckpt_path, trainer.steps)
    for pref in load_prefs(prefs_path, config.max_prefs, config.left_out):
        trainer.add(pref)
    return trainer


def _thread_choice(config: TrainerConfig) -> ThreadChoice:
    """The trainer's own threads, and those it may borrow while the agent waits (or none runs)."""
    return ThreadChoice(config.torch_threads,
                        config.threads_while_agent_idle or config.torch_threads)


def _record_training(telemetry: Telemetry, metrics: dict) -> None:
    """A training step's loss and accuracy (the minibatch's, in training mode)."""
    telemetry.record("reward_predictor/train_loss", metrics["loss"])
    if not np.isnan(metrics["accuracy"]):
        telemetry.record("reward_predictor/train_accuracy", metrics["accuracy"])
    if "rank_loss" in metrics:
        telemetry.record("reward_predictor/rank_loss", metrics["rank_loss"])


def load_prefs(path: str | None, max_prefs: int, left_out: Collection[str] = ()
               ) -> Iterator[Preference]:
    """The latest `max_prefs` labels of a preference store but those of `left_out` labellers,
    oldest first, one at a time (none if `path` is None)."""
    if path is None:
        return
    from pref_interface.store import PreferenceStore

    with PreferenceStore(path, create=False) as store:
        yield from store.iter_latest(max_prefs, left_out)


def run_pretraining(config: TrainerConfig, *, stop: Any, stats: TrainerStats,
                    log_dir: str) -> None:
    """Body of the pretraining process: fit the ensemble to the labels of
    `config.initial_prefs_path` for `config.pretrain_epochs` (App. A: 200 epochs on the first 500
    labels) and checkpoint it, also when stopped early."""

    # No A2C runs beside pretraining: its threads are free as when it waits for the predictor,
    # and borrowed on the same terms (while they make steps faster).
    trainer = _set_up(config, config.torch_threads, config.initial_prefs_path)
    threads = _thread_choice(config)
    stats.labels_received.value = trainer.n_labels
    telemetry = Telemetry(log_dir)

    def progress(epoch: int, metrics: dict) -> None:
        stats.epoch.value = epoch
        if epoch % PRETRAIN_VALIDATE_EVERY_EPOCHS == 0 or epoch == config.pretrain_epochs:
            _record_training(telemetry, metrics)
            _validate(trainer, stats, config.val_max_pairs, telemetry)
            telemetry.dump(trainer.steps)

    try:
        trainer.pretrain(config.pretrain_epochs, progress, should_stop=stop.is_set,
                         threads=threads)
    finally:
        if config.ckpt_path:
            trainer.save(config.ckpt_path)
        telemetry.close()


def _rest(seconds: float, stop: Any, reward_weights: SharedWeights) -> None:
    """Sleep up to `seconds`; wake early on stop or when A2C starts waiting for the predictor."""
    end = time.monotonic() + seconds
    while not reward_weights.consumer_waiting:
        left = end - time.monotonic()
        if left <= 0 or stop.wait(min(left, REST_POLL_S)):
            return


def _drain(preferences: Any) -> list[Preference | LabelEdit]:
    prefs = []
    while True:
        try:
            prefs.append(preferences.get_nowait())
        except queue.Empty:
            return prefs


def _validate(trainer: RewardPredictorTrainer, stats: Any, val_max_pairs: int,
              telemetry: Telemetry) -> None:
    """A validation pass (none while there are no validation labels), then each member's L2
    adapted to its validation loss (App. A; a no-op without adaptive L2); the figures recorded.
    The accuracy shared is VAL_TIES_ONLY until a validation label that prefers a clip is scored."""
    t = telemetry
    t.record("labels/received", stats.labels_received.value)
    t.record("reward_predictor/clips_held_mb", trainer.clips.nbytes / 2**20)
    if trainer.implied_pairs:
        t.record("reward_predictor/implied_pairs", trainer.n_implied)
    if trainer.n_val == 0:
        return
    val = trainer.validate(val_max_pairs)
    t.record("reward_predictor/val_loss", val["val_loss"])
    if np.isnan(val["val_accuracy"]):  # every validation label scored is a tie
        if np.isnan(stats.val_accuracy.value):  # a subset's: an accuracy shown earlier stays
            stats.val_accuracy.value = VAL_TIES_ONLY
    else:
        stats.val_accuracy.value = val["val_accuracy"]
        t.record("reward_predictor/val_accuracy", val["val_accuracy"])
    for m, l2 in enumerate(trainer.adapt_regularisation(val)):
        t.record(f"reward_predictor/l2_member{m}", l2)
        # what adaptive L2 keeps within 1.1-1.5 (App. A): both losses in eval mode
        val_loss, train_loss = val["member_val_loss"][m], val["member_inbag_loss"][m]
        if train_loss > 0 and np.isfinite(val_loss / train_loss):
            t.record(f"reward_predictor/val_to_train_member{m}", val_loss / train_loss)
    if not np.isnan(val["true_return_correlation"]):
        t.record("reward_predictor/true_return_correlation", val["true_return_correlation"])
