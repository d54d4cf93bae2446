"""Reward predictor trainer: shared weights, checkpoints, the trainer process, its pace and r-hat."""
from __future__ import annotations

import math
import multiprocessing as mp
import os
import queue
import threading
import time

import numpy as np
import pytest
import torch
from torch import nn

from launch.loop import Channels, run_predictor_trainer
from pref_interface.store import PreferenceStore
from reward_predictor import (
    AtariRewardNet,
    CheckpointError,
    MovingDotRewardNet,
    RewardPredictorEnsemble,
    RewardPredictorTrainer,
    SharedWeights,
    TrainerConfig,
    TrainerStats,
    build_ensemble,
)
from reward_predictor.pace import PredictorPace, labels_per_member
from reward_predictor.process import run_pretraining
from reward_predictor.reward_fn import PredictedReward
from tests.helpers import moving_dot_pref, random_pref, wait_until

torch.set_num_threads(1)


# ---- shared weights across processes ----------------------------------------------------------
def _checksum(module: nn.Module) -> float:
    return float(sum(t.double().sum() for t in module.state_dict().values()))


def _consumer(shared: SharedWeights, out: mp.Queue, go: mp.Event) -> None:
    torch.set_num_threads(1)
    net = AtariRewardNet(batchnorm=True)
    out.put(("first", shared.pull(net), shared.pull(net), shared.version, _checksum(net)))
    go.wait(30)
    for _ in range(300):
        if shared.pull(net):
            break
        go.wait(0.01)
    out.put(("second", shared.version, _checksum(net)))


def test_shared_weights_reach_a_spawned_process():
    ctx = mp.get_context("spawn")
    torch.manual_seed(0)
    template = AtariRewardNet(batchnorm=True)
    shared = SharedWeights(ctx)  # made without a module, as the supervising process makes it
    assert shared.publish(template) == 1
    out, go = ctx.Queue(), ctx.Event()
    proc = ctx.Process(target=_consumer, args=(shared, out, go), daemon=True)
    proc.start()
    try:
        tag, pulled_first, pulled_again, version, checksum = out.get(timeout=60)
        assert tag == "first" and pulled_first and not pulled_again and version == 1
        assert checksum == pytest.approx(_checksum(template))
        trained = AtariRewardNet(batchnorm=True)  # different weights
        trained.norms[0].running_mean.fill_(3.0)  # buffers travel too
        assert shared.publish(trained) == 2
        go.set()
        tag, version, checksum = out.get(timeout=60)
        assert tag == "second" and version == 2
        assert checksum == pytest.approx(_checksum(trained))
    finally:
        proc.join(timeout=30)
        if proc.is_alive():
            proc.kill()


# ---- checkpoints ------------------------------------------------------------------------------
def _atari_trainer(seed: int, adaptive_l2: bool = False) -> RewardPredictorTrainer:
    torch.manual_seed(seed)
    ens = RewardPredictorEnsemble(lambda: AtariRewardNet(dropout=0.5, batchnorm=True), ensemble_size=2)
    return RewardPredictorTrainer(ens, batch_size=2, seed=seed, adaptive_l2=adaptive_l2)


def _trained_atari_trainer(rng: np.random.Generator, steps: int) -> RewardPredictorTrainer:
    """The seed-0 trainer after four random labels and `steps` training steps."""
    trainer = _atari_trainer(0)
    for _ in range(4):
        trainer.add(random_pref(rng, t=5))
    trainer.train_steps(steps)
    return trainer


def test_checkpoint_round_trip(tmp_path):
    rng = np.random.default_rng(5)
    trainer = _trained_atari_trainer(rng, 2)
    trainer.ensemble.l2 = [1e-4, 3e-4]
    path = str(tmp_path / "rp" / "ckpt.pt")
    trainer.save(path)
    state = torch.load(path, weights_only=True)  # plain tensors, numbers, dicts and lists only
    assert state["steps"] == 2

    restored = _atari_trainer(1, adaptive_l2=True)  # its coefficients go on from the saved ones
    restored.load(path)
    assert restored.steps == 2 and restored.ensemble.l2 == [1e-4, 3e-4]
    for k, v in trainer.ensemble.state_dict().items():
        assert torch.equal(v, restored.ensemble.state_dict()[k]), k
    for a, b in zip(trainer.ensemble.optimizers, restored.ensemble.optimizers):
        sa, sb = a.state_dict()["state"], b.state_dict()["state"]
        assert sa.keys() == sb.keys()
        for i in sa:
            assert torch.equal(sa[i]["exp_avg"], sb[i]["exp_avg"])
    obs = rng.integers(0, 256, (3, 4, 84, 84), dtype=np.uint8)
    np.testing.assert_array_equal(trainer.ensemble.reward(obs, np.zeros(3, np.int64)),
                                  restored.ensemble.reward(obs, np.zeros(3, np.int64)))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_a_predictor_trained_on_the_gpu_gives_the_same_rewards_on_the_cpu(tmp_path):
    """--reward_predictor_device cuda: the trainer's ensemble lives on the GPU, its consumers
    (A2C's reward, query selection) get CPU copies through SharedWeights and checkpoints."""
    rng = np.random.default_rng(6)
    config = TrainerConfig(env_kind="atari", ensemble_size=2, dropout=0.5, batchnorm=True,
                           batch_size=4, adaptive_l2=True)
    trainer = RewardPredictorTrainer(build_ensemble(config, "cuda"), batch_size=4, adaptive_l2=True)
    assert trainer.ensemble.device.type == "cuda"
    for i in range(12):
        trainer.add(random_pref(rng, is_validation=i % 4 == 0, t=5))
    before = _checksum(trainer.ensemble)
    metrics = trainer.train_steps(3)
    assert np.isfinite(metrics["loss"]) and _checksum(trainer.ensemble) != before
    val = trainer.validate()
    trainer.adapt_regularisation(val)
    assert np.isfinite(val["val_loss"]) and not math.isnan(val["true_return_correlation"])

    consumer = build_ensemble(config)  # CPU, as in the A2C process
    shared = SharedWeights()
    shared.publish(trainer.ensemble)
    assert shared.pull(consumer)
    obs = rng.integers(0, 256, (6, 4, 84, 84), dtype=np.uint8)
    actions = np.zeros(6, np.int64)
    on_gpu = trainer.ensemble.reward(obs, actions)
    np.testing.assert_allclose(consumer.reward(obs, actions), on_gpu, rtol=1e-2, atol=1e-3)

    path = str(tmp_path / "ckpt.pt")
    trainer.save(path)
    restored = RewardPredictorTrainer(build_ensemble(config))
    restored.load(path)
    np.testing.assert_allclose(restored.ensemble.reward(obs, actions), on_gpu, rtol=1e-2, atol=1e-3)
    back = RewardPredictorTrainer(build_ensemble(config, "cuda"), batch_size=4)
    back.load(path)  # a resumed GPU run: optimiser state follows the weights onto the GPU
    for pref in trainer.held_labels():
        back.add(pref)
    assert np.isfinite(back.train_steps(1)["loss"])


def test_missing_or_corrupt_checkpoint_raises_checkpoint_error(tmp_path):
    trainer = _atari_trainer(0)
    with pytest.raises(CheckpointError, match="not found"):
        trainer.load(str(tmp_path / "nope.pt"))
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"\x00garbage" * 100)
    with pytest.raises(CheckpointError) as err:
        trainer.load(str(bad))
    assert "\n" not in str(err.value)
    torch.save({"format": 1, "n_members": 3}, tmp_path / "other.pt")
    with pytest.raises(CheckpointError, match="3 ensemble members"):
        trainer.load(str(tmp_path / "other.pt"))
    # A predictor of another kind is refused and leaves the weights untouched.
    moving_dot = RewardPredictorTrainer(RewardPredictorEnsemble(MovingDotRewardNet, ensemble_size=2))
    moving_dot.save(str(tmp_path / "md.pt"))
    before = {k: v.clone() for k, v in trainer.ensemble.state_dict().items()}
    with pytest.raises(CheckpointError, match="does not fit"):
        trainer.load(str(tmp_path / "md.pt"))
    assert all(torch.equal(v, trainer.ensemble.state_dict()[k]) for k, v in before.items())


def test_a_predictor_only_used_makes_no_optimiser_but_its_checkpoint_is_still_checked(tmp_path):
    rng = np.random.default_rng(7)
    trainer = _trained_atari_trainer(rng, 1)
    path = str(tmp_path / "ckpt.pt")
    trainer.save(path)
    used = _atari_trainer(1)
    used.load(path, optimizers=False)
    assert used.ensemble._optimizers is None and used.steps == 1
    obs = rng.integers(0, 256, (3, 4, 84, 84), dtype=np.uint8)
    np.testing.assert_array_equal(trainer.ensemble.reward(obs, np.zeros(3, np.int64)),
                                  used.ensemble.reward(obs, np.zeros(3, np.int64)))
    # Optimiser states for other nets are refused either way, before any weight is copied.
    state = torch.load(path, weights_only=True)
    state["optimizers"][1]["param_groups"][0]["params"].pop()
    torch.save(state, tmp_path / "odd.pt")
    for optimizers in (False, True):
        fresh = _atari_trainer(2)
        before = {k: v.clone() for k, v in fresh.ensemble.state_dict().items()}
        with pytest.raises(CheckpointError, match="optimiser states"):
            fresh.load(str(tmp_path / "odd.pt"), optimizers=optimizers)
        assert all(torch.equal(v, fresh.ensemble.state_dict()[k]) for k, v in before.items())


# ---- the trainer process ----------------------------------------------------------------------
class _InterruptAfter:
    """A stop event that raises KeyboardInterrupt (as Ctrl-C would) once labels have arrived."""

    def __init__(self, stats: TrainerStats, n_labels: int) -> None:
        self.stats, self.n_labels, self.checks = stats, n_labels, 0

    def is_set(self) -> bool:
        if self.stats.labels_received.value >= self.n_labels:
            self.checks += 1
            if self.checks > 120:
                raise KeyboardInterrupt
        return False


def test_no_preference_is_dropped_and_the_trainer_checkpoints_on_interrupt(tmp_path):
    rng = np.random.default_rng(6)
    ctx = mp.get_context("spawn")
    config = TrainerConfig(env_kind="moving_dot", ensemble_size=2, lr=1e-3, ckpt_interval=50,
                           ckpt_path=str(tmp_path / "rp.pt"), validate_every_steps=25,
                           duty=1.0, adaptive_l2=False)
    shared = SharedWeights(ctx)
    stats = TrainerStats.create(ctx)
    prefs: queue.Queue = queue.Queue()
    for i in range(40):
        prefs.put(moving_dot_pref(rng, is_validation=(i % 4 == 0)))
    run_predictor_trainer(config, Channels(_InterruptAfter(stats, 40), preferences=prefs,
                                           reward_weights=shared),
                          stats=stats, log_dir=str(tmp_path / "tb"))
    assert stats.labels_received.value == 40 and prefs.empty()
    assert 0.0 <= stats.val_accuracy.value <= 1.0
    assert shared.version >= 2  # at start, and during training
    state = torch.load(tmp_path / "rp.pt", weights_only=True)
    assert state["steps"] >= 100
    assert any(f.startswith("events.out.tfevents") for f in os.listdir(tmp_path / "tb"))


def test_trainer_process_stops_on_its_event(tmp_path):
    """Also while it waits for its first label: then it has nothing to save."""
    ctx = mp.get_context("spawn")
    config = TrainerConfig(env_kind="moving_dot", ensemble_size=1, duty=1.0,
                           ckpt_path=str(tmp_path / "rp.pt"))
    shared = SharedWeights(ctx)
    stats = TrainerStats.create(ctx)
    stop = threading.Event()
    worker = threading.Thread(target=run_predictor_trainer, args=(
        config, Channels(stop, preferences=queue.Queue(), reward_weights=shared)),
        kwargs=dict(stats=stats, log_dir=str(tmp_path)))
    worker.start()
    stop.set()
    worker.join(timeout=30)
    assert not worker.is_alive()
    assert not (tmp_path / "rp.pt").exists()


def test_pretraining_may_take_the_threads_a2c_is_not_using_yet(tmp_path, monkeypatch):
    """No A2C runs beside pretraining: it may borrow the threads the run gives A2C too, on the
    terms training borrows them while A2C waits (tests/test_threads.py)."""

    rng = np.random.default_rng(9)
    with PreferenceStore(str(tmp_path / "prefs.sqlite")) as store:
        for i in range(8):
            store.add(moving_dot_pref(rng, is_validation=i % 4 == 0))
    config = TrainerConfig(env_kind="moving_dot", ensemble_size=1, torch_threads=1,
                           threads_while_agent_idle=2,
                           initial_prefs_path=str(tmp_path / "prefs.sqlite"), pretrain_epochs=1)
    offered = []
    real_pretrain = RewardPredictorTrainer.pretrain

    def pretrain(self, *args, threads=None, **kwargs):
        offered.append((threads.own, threads.borrowed))
        return real_pretrain(self, *args, threads=threads, **kwargs)

    monkeypatch.setattr(RewardPredictorTrainer, "pretrain", pretrain)
    stats = TrainerStats.create(mp.get_context("spawn"))
    try:
        run_pretraining(config, stop=threading.Event(), stats=stats,
                        log_dir=str(tmp_path / "tb"))
    finally:
        torch.set_num_threads(1)  # the suite's setting (conftest)
    assert offered == [(1, 2)] and stats.epoch.value == 1


def trainer_on_a_thread(tmp_path, **config) -> tuple[SharedWeights, threading.Event,
                                                     threading.Thread]:
    """A MovingDot trainer (one member, batches of 16) on 20 training labels, started on a
    thread as its process would run: its shared weights, its stop event and the thread."""
    rng = np.random.default_rng(8)
    ctx = mp.get_context("spawn")
    shared = SharedWeights(ctx)
    stats, stop = TrainerStats.create(ctx), threading.Event()
    prefs: queue.Queue = queue.Queue()
    for _ in range(20):
        prefs.put(moving_dot_pref(rng, is_validation=False))
    worker = threading.Thread(target=run_predictor_trainer, args=(TrainerConfig(
        env_kind="moving_dot", ensemble_size=1, batch_size=16, validate_every_steps=1000, **config),
        Channels(stop, preferences=prefs, reward_weights=shared)),
        kwargs=dict(stats=stats, log_dir=str(tmp_path)))
    worker.start()
    return shared, stop, worker


def test_a2c_waits_for_the_trainer_and_the_trainer_stops_resting_for_it(tmp_path):
    """--min_predictor_labels_per_step: the pace blocks until the trainer has trained on enough
    labels. The trainer's duty would rest it ~2,000x its step time (minutes here); a waiting A2C
    wakes it, so the wait ends within the test's time limit only if resting stops."""
    shared, stop, worker = trainer_on_a_thread(tmp_path, duty=5e-4, threads_while_agent_idle=1)
    give_up = threading.Timer(120.0, stop.set)  # a resting trainer would hold the wait for hours
    give_up.start()
    try:
        pace = PredictorPace(shared, min_labels_per_step=0.1)
        assert pace.wait(0, stop) == 0.0  # nothing is owed at the start
        pace.wait(4_800, stop)  # owes 480 labels: 30 steps of 16
        reached = shared.labels_trained
        assert not stop.is_set() and reached >= 480, reached
        assert not shared.consumer_waiting
        assert pace.labels_per_step(4_800) == reached / 4_800
        assert PredictorPace(shared).wait(10**9, stop) == 0.0  # no floor: never waits
    finally:
        give_up.cancel()
        stop.set()
        worker.join(timeout=30)


def test_with_a_ceiling_the_trainer_trains_only_as_far_as_the_agent_has_stepped(tmp_path):
    """--max_predictor_labels_per_step: the trainer, free to train (duty 1), rests while each
    member has trained on that many labels per agent step, and trains on as the agent steps."""
    shared, stop, worker = trainer_on_a_thread(tmp_path, duty=1.0, max_labels_per_step=0.1)
    try:
        pace = PredictorPace(shared)  # no floor: the agent never waits
        for steps, allowed in ((0, 0), (800, 80), (4_800, 480)):
            pace.wait(steps, stop)  # the agent reports its steps before each rollout
            wait_until(lambda: shared.labels_trained >= allowed, 60.0, f"{allowed} labels trained")
            # then a second in which it must not train on: at duty 1 it would do hundreds of steps
            time.sleep(1.0)
            # up to the ceiling, and by at most the one step that crossed it
            assert allowed <= shared.labels_trained < allowed + 16, (steps, shared.labels_trained)
    finally:
        stop.set()
        worker.join(timeout=30)


def test_a_waiting_a2c_gives_up_when_the_run_stops():
    shared = SharedWeights()
    stop = threading.Event()
    threading.Timer(0.2, stop.set).start()
    waited = PredictorPace(shared, min_labels_per_step=1.0).wait(100, stop)  # nobody trains
    assert waited > 0.0 and shared.labels_trained == 0 and not shared.consumer_waiting


def test_the_paper_pace_counts_each_member_or_the_whole_ensemble():
    # App. A.2's "1 label per 10 RL timesteps" for "the predictor": per member by default; read
    # for the ensemble, each of 3 members trains on a third of it.
    assert labels_per_member(0.1, "member", 3) == 0.1
    assert labels_per_member(0.1, "ensemble", 3) == pytest.approx(0.1 / 3)
    with pytest.raises(ValueError, match="none of member, ensemble"):
        labels_per_member(0.1, "members", 3)


# ---- the predicted reward --------------------------------------------------------------------
def test_a2c_scores_with_the_newest_predictor_at_every_call():
    config = TrainerConfig(env_kind="moving_dot", ensemble_size=1)
    old, new = build_ensemble(config), build_ensemble(config)
    with torch.no_grad():
        for p in new.parameters():
            p.add_(0.5)
    shared = SharedWeights()
    shared.publish(old)
    reward = PredictedReward(shared, config)
    obs = np.random.default_rng(0).integers(0, 256, (4, 4, 84, 84), dtype=np.uint8)
    actions = np.zeros(4, np.int64)
    on_old = reward(obs, actions)
    shared.publish(new)
    assert not np.allclose(reward(obs, actions), on_old)


def test_r_hat_comes_from_the_predictor_the_trainer_starts_from_before_it_publishes(tmp_path):
    """A consumer built before the trainer's first publication (the wrapper's first steps) uses
    the pretrained checkpoint, never an untrained copy."""
    from dataclasses import replace

    from reward_predictor.trainer import RewardPredictorTrainer

    config = TrainerConfig(env_kind="moving_dot", ensemble_size=1)
    pretrained = build_ensemble(config)
    with torch.no_grad():
        for p in pretrained.parameters():
            p.add_(0.5)
    RewardPredictorTrainer(pretrained).save(str(tmp_path / "pretrained.pt"))
    pretrained.eval()
    obs = np.random.default_rng(0).integers(0, 256, (4, 4, 84, 84), dtype=np.uint8)
    actions = np.zeros(4, np.int64)
    shared = SharedWeights()  # nothing published yet
    loaded = PredictedReward(shared, replace(config, load_ckpt_path=str(tmp_path / "pretrained.pt")))
    np.testing.assert_allclose(loaded(obs, actions), pretrained.reward(obs, actions), rtol=1e-6)
    assert not np.allclose(PredictedReward(shared, config)(obs, actions), loaded(obs, actions))


# ---- the trainer's process set-up -------------------------------------------------------------
@pytest.mark.parametrize("keep", [False, True])
def test_the_trainer_keeps_freed_memory_only_when_asked(keep, tmp_path, monkeypatch):
    from launch.cli import parse_args
    from launch.configs import trainer_config, trainer_environ
    from reward_predictor import process
    from runtime.process_setup import TRAINER_MALLOC_TUNABLES

    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    run = parse_args(["train_policy_with_preferences", "PongNoFrameskip-v4", "--ensemble_size", "1",
                      "--log_dir", str(tmp_path / "r")]
                     + (["--reward_predictor_keep_freed_memory"] if keep else []))
    config = trainer_config(run, load_from=None, save=False)
    calls = []
    monkeypatch.setattr(process, "reuse_freed_memory", lambda: calls.append(1))
    try:
        process._set_up(config, 1, None)
    finally:
        torch.set_num_threads(1)  # the suite's setting (conftest)
    assert calls == ([1] if keep else [])
    # Otherwise the process starts with glibc's tunables (tests/test_supervisor.py checks them).
    assert trainer_environ(config) == ({} if keep else {"GLIBC_TUNABLES": TRAINER_MALLOC_TUNABLES})


def test_the_trainer_never_takes_more_threads_than_the_machine_has_cores(tmp_path, monkeypatch):
    # While A2C waits, the trainer takes A2C's threads too; past the core count every step slows.
    from launch import configs
    from launch.cli import parse_args

    run = parse_args(["train_policy_with_preferences", "PongNoFrameskip-v4", "--torch_threads", "2",
                      "--reward_predictor_threads", "1", "--log_dir", str(tmp_path / "r")])
    monkeypatch.setattr(configs, "usable_cores", lambda: 2)
    assert configs.trainer_config(run, load_from=None, save=False).threads_while_agent_idle == 2
    monkeypatch.setattr(configs, "usable_cores", lambda: 16)
    assert configs.trainer_config(run, load_from=None, save=False).threads_while_agent_idle == 3


# ---- benchmark ---------------------------------------------------------------------------------
def test_the_step_benchmark_times_every_phase_it_names():
    # bench_reward_predictor_step --phases wraps the functions a train step calls by name; a
    # phase that reads zero means a step no longer goes through it (a renamed or bypassed call).
    from benchmarks.bench_reward_predictor_step import phase_times

    ms = phase_times(threads=1, steps=1, pairs=2, t=5, bf16=False)
    step = ms.pop("step")
    assert all(v > 0 for v in ms.values()), ms
    top = {k: v for k, v in ms.items() if ": " not in k}
    assert sum(top.values()) <= step
    for name, v in ms.items():
        if ": " in name:
            assert v <= ms[name.split(": ")[0]], (name, ms)


def test_a_label_from_both_the_store_and_the_queue_is_held_once():
    """At start-up the trainer reads the store while labelling stores and sends new labels: one
    stored meanwhile arrives twice, and is held once (a person's delete then removes it)."""
    from dataclasses import replace

    from clips.clip import LabelEdit

    rng = np.random.default_rng(0)
    trainer = _atari_trainer(0)
    pref = replace(random_pref(rng, t=5), label_id=7)
    trainer.add(pref)
    trainer.add(pref)  # the queue's copy
    trainer.add(replace(random_pref(rng, t=5), label_id=8))
    assert trainer.n_labels == 2
    assert trainer.edit(LabelEdit(7, None)) and not trainer.edit(LabelEdit(7, None))
    assert trainer.n_labels == 1
    trainer.add(pref)  # a label given back again after its delete is held anew
    assert trainer.n_labels == 2
