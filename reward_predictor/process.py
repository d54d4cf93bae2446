"""The reward-predictor trainer process: labels in from a queue, weights out to shared memory."""
from __future__ import annotations

import logging
import queue
import time
from typing import Any, Iterator

import numpy as np
import torch

from runtime.precision import use_bf16
from runtime.process_setup import reuse_freed_memory
from runtime.scalars import ScalarWriter
from pref_interface.segment import LabelEdit, Preference
from reward_predictor.config import TrainerConfig, TrainerStats
from reward_predictor.ensemble import RewardPredictorEnsemble
from reward_predictor.nets import make_reward_net
from reward_predictor.shared import SharedWeights
from reward_predictor.trainer import RewardPredictorTrainer

log = logging.getLogger(__name__)

IDLE_SLEEP_S = 0.05  # wait between queue polls while there is nothing to train on
REST_POLL_S = 0.005  # while resting (duty < 1), how often the trainer checks whether A2C waits
PRETRAIN_VALIDATE_EVERY_EPOCHS = 5  # pretraining's validation (and adaptive L2) cadence


def build_ensemble(config: TrainerConfig, device: str = "cpu") -> RewardPredictorEnsemble:
    """The ensemble the config describes, on `device` (on the CPU it is also the template for
    SharedWeights and the consumers' copy)."""
    ensemble = RewardPredictorEnsemble(
        lambda: make_reward_net(config.env_kind, config.dropout, config.batchnorm),
        n_members=config.n_members, lr=config.lr, reward_std=config.reward_std,
        noise=config.label_noise)
    ensemble.bf16 = use_bf16(config.precision)
    return ensemble.to(device)  # before any optimiser state exists, so that follows the weights


def run_trainer(config: TrainerConfig, *, pref_queue: Any, shared_weights: SharedWeights,
                stop_event: Any, stats: Any, log_dir: str) -> None:
    """Body of the trainer process; returns when `stop_event` is set (or on KeyboardInterrupt),
    after a final publish and checkpoint.

    Every label on `pref_queue` is kept (the queue is drained, never dropped from). While at least
    one training label is held the ensemble trains continuously (App. A: the predictor keeps
    training on the label buffer); weights are published to `shared_weights` every few steps.
    """

    trainer = _set_up(config, config.torch_threads, config.initial_prefs_path)
    ensemble = trainer.ensemble
    shared_weights.publish(ensemble)
    writer = ScalarWriter(log_dir, purge_step=trainer.steps or None)  # from a checkpoint: resumed
    start_step, threads = trainer.steps, config.torch_threads
    last_publish_step, last_publish_t = trainer.steps, time.monotonic()
    last_ckpt_step = trainer.steps
    rate_step, rate_t = trainer.steps, time.monotonic()
    metrics: dict = {}
    try:
        while not stop_event.is_set():
            for item in _drain(pref_queue):
                if isinstance(item, LabelEdit):  # a person changed a label already sent
                    trainer.edit(item)
                    continue
                trainer.add(item)
                with stats.labels_received.get_lock():
                    stats.labels_received.value += 1
            if trainer.n_train == 0:
                time.sleep(IDLE_SLEEP_S)
                continue
            wanted = config.torch_threads
            if shared_weights.consumer_waiting and config.threads_while_agent_idle:
                wanted = config.threads_while_agent_idle  # A2C is idle: take its threads
            if wanted != threads:
                torch.set_num_threads(wanted)
                threads = wanted
            t_step = time.monotonic()
            metrics = trainer.train_steps(1)
            step = trainer.steps
            shared_weights.labels_trained = (step - start_step) * config.batch_size
            now = time.monotonic()
            if config.duty < 1.0:  # leave the agent its share of the cores
                _rest((now - t_step) * (1.0 - config.duty) / config.duty, stop_event,
                      shared_weights)
            if (step - last_publish_step >= config.publish_every_steps
                    or now - last_publish_t >= config.publish_every_s):
                shared_weights.publish(ensemble)
                last_publish_step, last_publish_t = step, now
            if step % config.validate_every_steps == 0:
                val = _validate(trainer, stats, config.val_max_pairs)
                steps_per_sec = (step - rate_step) / max(now - rate_t, 1e-9)
                rate_step, rate_t = step, now
                _log_progress(trainer, metrics, val, steps_per_sec, stats, writer)
            if config.ckpt_path and config.ckpt_interval > 0 and \
                    step - last_ckpt_step >= config.ckpt_interval:
                trainer.save(config.ckpt_path)
                last_ckpt_step = step
    except KeyboardInterrupt:
        log.info("reward predictor trainer interrupted at step %d", trainer.steps)
    finally:
        shared_weights.publish(ensemble)
        if config.ckpt_path and trainer.steps > 0:
            trainer.save(config.ckpt_path)
        writer.close()
        shared_weights.release()


def _set_up(config: TrainerConfig, threads: int, prefs_path: str | None) -> RewardPredictorTrainer:
    """What the trainer and pretraining processes do first: the trainer the config describes,
    its checkpoint loaded (CheckpointError ends the process with its message) and the latest
    labels of `prefs_path` added."""
    if config.keep_freed_memory:  # otherwise the process started with malloc tunables
        reuse_freed_memory()
    torch.set_num_threads(threads)
    torch.manual_seed(config.seed)
    trainer = RewardPredictorTrainer(build_ensemble(config, config.device), config.max_prefs,
                                     config.batch_size, config.seed, adaptive_l2=config.adaptive_l2)
    if config.load_ckpt_path:
        trainer.load(config.load_ckpt_path)
        log.info("reward predictor loaded from %s (step %d)", config.load_ckpt_path, trainer.steps)
    for pref in load_prefs(prefs_path, config.max_prefs):
        trainer.add(pref)
    return trainer


def load_prefs(path: str | None, max_prefs: int) -> Iterator[Preference]:
    """The latest `max_prefs` labels of a preference store, oldest first, one at a time (none if
    `path` is None)."""
    if path is None:
        return
    from pref_interface.store import PreferenceStore

    with PreferenceStore(path, create=False) as store:
        yield from store.iter_latest(max_prefs)


def run_pretraining(config: TrainerConfig, *, stop_event: Any, stats: TrainerStats,
                    log_dir: str) -> None:
    """Body of the pretraining process: fit the ensemble to the labels of
    `config.initial_prefs_path` for `config.pretrain_epochs` (App. A: 200 epochs on the first 500
    labels) and checkpoint it, also when stopped early."""

    # No A2C runs beside pretraining, so its threads are free as when it waits for the predictor.
    trainer = _set_up(config, config.threads_while_agent_idle or config.torch_threads,
                      config.initial_prefs_path)
    stats.labels_received.value = trainer.n_labels
    writer = ScalarWriter(log_dir)

    def progress(epoch: int, metrics: dict) -> None:
        stats.epoch.value = epoch
        if epoch % PRETRAIN_VALIDATE_EVERY_EPOCHS == 0 or epoch == config.pretrain_epochs:
            val = _validate(trainer, stats, config.val_max_pairs)
            _log_progress(trainer, metrics, val, 0.0, stats, writer)

    try:
        trainer.pretrain(config.pretrain_epochs, progress, should_stop=stop_event.is_set)
    finally:
        if config.ckpt_path:
            trainer.save(config.ckpt_path)
        writer.close()


def _rest(seconds: float, stop_event: Any, shared_weights: SharedWeights) -> None:
    """Sleep up to `seconds`; wake early on stop or when A2C starts waiting for the predictor."""
    end = time.monotonic() + seconds
    while not shared_weights.consumer_waiting:
        left = end - time.monotonic()
        if left <= 0 or stop_event.wait(min(left, REST_POLL_S)):
            return


def _drain(pref_queue: Any) -> list[Preference | LabelEdit]:
    prefs = []
    while True:
        try:
            prefs.append(pref_queue.get_nowait())
        except queue.Empty:
            return prefs


def _validate(trainer: RewardPredictorTrainer, stats: Any, val_max_pairs: int) -> dict | None:
    """A validation pass, then each member's L2 adapted to its validation loss (App. A; a no-op
    without adaptive L2); None while there are no validation labels."""
    if trainer.n_val == 0:
        return None
    val = trainer.validate(val_max_pairs)
    val["l2"] = trainer.adapt_regularisation(val)
    if not np.isnan(val["val_accuracy"]):
        stats.val_accuracy.value = val["val_accuracy"]
    return val


def _log_progress(trainer: RewardPredictorTrainer, metrics: dict, val: dict | None,
                  steps_per_sec: float, stats: Any, writer: Any) -> None:
    step = trainer.steps
    writer.add_scalar("reward_predictor/train_loss", metrics["loss"], step)
    if not np.isnan(metrics["accuracy"]):
        writer.add_scalar("reward_predictor/train_accuracy", metrics["accuracy"], step)
    writer.add_scalar("reward_predictor/steps_per_sec", steps_per_sec, step)
    writer.add_scalar("labels/received", stats.labels_received.value, step)
    writer.add_scalar("reward_predictor/clips_held_mb", trainer.clips.nbytes / 2**20, step)
    if val is not None:
        writer.add_scalar("reward_predictor/val_loss", val["val_loss"], step)
        if not np.isnan(val["val_accuracy"]):
            writer.add_scalar("reward_predictor/val_accuracy", val["val_accuracy"], step)
        for m, l2 in enumerate(val["l2"]):
            writer.add_scalar(f"reward_predictor/l2_member{m}", l2, step)
        if not np.isnan(val["true_return_correlation"]):
            writer.add_scalar("reward_predictor/true_return_correlation",
                              val["true_return_correlation"], step)
    writer.flush()
