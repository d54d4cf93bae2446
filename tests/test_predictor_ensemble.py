"""Reward predictor ensemble: bootstrap resamples, held labels, the members' rewards and training."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from clips.clip import Preference
from reward_predictor import (
    AtariRewardNet,
    MovingDotRewardNet,
    RewardPredictorEnsemble,
    RewardPredictorTrainer,
    bootstrap_counts,
)
from tests.helpers import _render_dot, moving_dot_pref, random_clip, random_pref

torch.set_num_threads(1)


# ---- ensemble and bootstrap -------------------------------------------------------------------
def test_bootstrap_counts_are_poisson_one():
    counts = bootstrap_counts(30_000, 3, np.random.default_rng(0))
    assert counts.shape == (30_000, 3)
    assert counts.mean() == pytest.approx(1.0, abs=0.02)
    assert counts.var() == pytest.approx(1.0, abs=0.03)
    assert (counts == 0).mean() == pytest.approx(math.exp(-1), abs=0.01)
    assert not np.array_equal(counts[:, 0], counts[:, 1])  # members resample independently


def _label_key(p: Preference) -> tuple:
    """A label by its content (the trainer holds clips packed, so not the same objects)."""
    return p.left.frames().tobytes(), p.right.frames().tobytes(), p.mu, p.is_validation


def test_a_single_predictor_uses_every_label():
    rng = np.random.default_rng(1)
    trainer = RewardPredictorTrainer(RewardPredictorEnsemble(MovingDotRewardNet, ensemble_size=1),
                                     batch_size=16, seed=0)
    labels = [moving_dot_pref(rng, False) for _ in range(20)]
    for p in labels:
        trainer.add(p)
    assert (trainer.bootstrap_counts() == 1).all()
    seen = {_label_key(p) for _ in range(30) for p in trainer.sample_batches()[0]}
    assert seen == {_label_key(p) for p in labels}


def test_members_train_only_on_their_bootstrap_resample():
    rng = np.random.default_rng(2)
    trainer = RewardPredictorTrainer(RewardPredictorEnsemble(MovingDotRewardNet, ensemble_size=3), seed=3)
    labels = [moving_dot_pref(rng, False) for _ in range(30)]
    for p in labels:
        trainer.add(p)
    counts = trainer.bootstrap_counts()
    drawn = np.zeros_like(counts)
    index = {_label_key(p): i for i, p in enumerate(labels)}
    assert len(index) == len(labels)
    for _ in range(300):
        for m, batch in enumerate(trainer.sample_batches()):
            for p in batch:
                drawn[index[_label_key(p)], m] += 1
    assert (drawn[counts == 0] == 0).all()
    # Labels with count 2 are drawn about twice as often as those with count 1.
    for m in range(3):
        ones, twos = drawn[counts[:, m] == 1, m], drawn[counts[:, m] == 2, m]
        if len(ones) and len(twos):
            assert 1.4 < twos.mean() / ones.mean() < 2.8


def test_only_the_latest_labels_are_kept_and_validation_is_held_out():
    rng = np.random.default_rng(3)
    trainer = RewardPredictorTrainer(RewardPredictorEnsemble(MovingDotRewardNet, ensemble_size=2),
                                     max_prefs=6, seed=0)
    labels = [moving_dot_pref(rng, is_validation=(i % 3 == 0)) for i in range(10)]
    for p in labels:
        trainer.add(p)
    assert trainer.n_labels == 6 and trainer.n_val == 2 and trainer.n_train == 4
    assert [_label_key(p) for p in trainer.held_labels()] == [_label_key(p) for p in labels[4:]]
    drawn = {_label_key(p) for _ in range(20) for batch in trainer.sample_batches() for p in batch}
    assert drawn <= {_label_key(p) for p in labels[4:] if not p.is_validation}


class _ScaledNewestPixel(nn.Module):
    """A stub reward net: `scale` times the top-left pixel of the newest frame."""

    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.tensor(scale))

    def forward(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        return obs[..., -1, 0, 0].float() * self.scale


def test_ensemble_reward_is_the_mean_of_normalised_members():
    scales = iter([1.0, -2.0, 0.5])
    ens = RewardPredictorEnsemble(lambda: _ScaledNewestPixel(next(scales)), ensemble_size=3)
    stats = [(10.0, 4.0), (-5.0, 100.0), (0.0, 0.25)]  # (mean, var) per member
    for norm, (mean, var) in zip(ens.normalisers, stats):
        norm.mean.fill_(mean)
        norm.var.fill_(var)
    obs = np.zeros((3, 4, 84, 84), np.uint8)
    obs[:, -1, 0, 0] = [0, 10, 200]
    out = ens.reward(obs, np.zeros(3, np.int64))
    assert out.dtype == np.float32 and out.shape == (3,)
    pixel = np.array([0.0, 10.0, 200.0])
    expected = np.mean([(pixel * s - m) / math.sqrt(v) * 0.05
                        for s, (m, v) in zip([1.0, -2.0, 0.5], stats)], axis=0)
    np.testing.assert_allclose(out, expected, rtol=1e-5)
    # Same answer from torch tensors.
    np.testing.assert_allclose(ens.reward(torch.from_numpy(obs), torch.zeros(3, dtype=torch.int64)), out)


@pytest.mark.parametrize("batchnorm", [True, False])
def test_the_agent_gets_the_members_rewards_from_one_stacked_pass(batchnorm):
    # All members in one pass (batch norm folded in, grouped convolutions) against each member
    # run alone, in fp32, before and after a training step changes every member's weights.
    torch.manual_seed(0)
    rng = np.random.default_rng(7)
    ens = RewardPredictorEnsemble(lambda: AtariRewardNet(dropout=0.5, batchnorm=batchnorm),
                                  ensemble_size=3)
    obs = torch.from_numpy(rng.integers(0, 256, (30, 4, 84, 84), dtype=np.uint8))
    actions = torch.zeros(30, dtype=torch.int64)

    def one_by_one() -> np.ndarray:
        ens.eval()
        with torch.no_grad():
            per_member = [norm(net(obs)) for net, norm in zip(ens.members, ens.normalisers)]
        return torch.stack(per_member).mean(0).numpy()

    for norm in ens.normalisers:
        norm.update(torch.randn(100) * 0.01)
    for _ in range(2):
        stacked = ens._stacked_members()
        with torch.no_grad():
            raw = stacked(obs)
        assert raw.shape == (3, 30)
        for m, net in enumerate(ens.members):
            with torch.no_grad():
                assert torch.allclose(raw[m], net.eval()(obs), rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(ens.reward(obs, actions), one_by_one(), rtol=1e-4, atol=1e-7)
        ens.train_step([[random_pref(rng) for _ in range(2)] for _ in range(3)])
        assert ens._stacked_members() is not stacked  # new weights: rebuilt


def test_validation_scores_clips_with_the_stacked_members_as_each_member_alone_would():
    # Clips of two lengths over several chunks (MAX_FRAMES_PER_FORWARD), fp32: the stacked
    # pass gives each member's return of each clip, in the clips' order.
    from reward_predictor.ensemble import clip_returns

    torch.manual_seed(1)
    rng = np.random.default_rng(8)
    ens = RewardPredictorEnsemble(lambda: AtariRewardNet(dropout=0.5, batchnorm=True), ensemble_size=3)
    ens.train_step([[random_pref(rng) for _ in range(2)] for _ in range(3)])
    clips = [random_clip(rng, 25 if i % 3 else 12) for i in range(40)]
    assert ens._stacked_members() is not None
    got = ens.member_returns(clips)
    assert ens.training  # its mode is kept
    for m, net in enumerate(ens.members):
        with torch.no_grad():
            want = clip_returns(net.eval(), clips)[0]
        torch.testing.assert_close(got[m], want, rtol=1e-4, atol=1e-5)


def test_the_members_as_one_net_follow_batch_norm_statistics_taken_anew():
    """experiments.batchnorm_shift scores the members, re-takes their statistics and scores them
    again: the one-net snapshot must not give the old numbers."""
    from reward_predictor.ensemble import take_batchnorm_statistics

    torch.manual_seed(2)
    rng = np.random.default_rng(9)
    ens = RewardPredictorEnsemble(lambda: AtariRewardNet(dropout=0.5, batchnorm=True), ensemble_size=2)
    clips = [random_clip(rng, 25) for _ in range(8)]
    before = ens.member_returns(clips)
    for net in ens.members:
        take_batchnorm_statistics(net, [random_clip(rng, 25) for _ in range(8)])
    after = ens.member_returns(clips)
    ens._stacked = None  # built afresh from the members as they are now
    torch.testing.assert_close(after, ens.member_returns(clips))
    assert not torch.allclose(before, after)


def test_train_step_fits_each_member_and_tracks_its_reward_statistics():
    torch.manual_seed(0)
    rng = np.random.default_rng(4)
    ens = RewardPredictorEnsemble(lambda: AtariRewardNet(dropout=0.5, batchnorm=True), ensemble_size=2,
                                  l2=1e-3)
    batches = [[random_pref(rng) for _ in range(3)] for _ in range(2)]
    before = [m.out.weight.detach().clone() for m in ens.members]
    metrics = ens.train_step(batches)
    assert {"loss", "accuracy", "l2_penalty", "member_loss", "member_accuracy"} <= set(metrics)
    assert len(metrics["member_loss"]) == 2 and metrics["l2_penalty"] > 0
    for m, w in zip(ens.members, before):
        assert not torch.equal(m.out.weight, w)
    for norm in ens.normalisers:
        assert float(norm.count) == 2 * 3 * 25  # every step of both clips of 3 pairs
    prob = ens.predict_preference([p.left for p in batches[0]], [p.right for p in batches[0]])
    assert prob.shape == (2, 3) and ((prob > 0) & (prob < 1)).all()
    ev = ens.evaluate(batches[0])
    assert np.isfinite(ev["loss"]) and len(ev["member_loss"]) == 2


# ---- learning ---------------------------------------------------------------------------------
def test_predictor_learns_that_closer_to_centre_is_preferred():
    """A few hundred synthetic MovingDot labels take the predictor past 90% validation accuracy."""
    rng = np.random.default_rng(0)
    torch.manual_seed(0)
    ens = RewardPredictorEnsemble(MovingDotRewardNet, ensemble_size=1, lr=3e-3)
    trainer = RewardPredictorTrainer(ens, seed=0)
    for i in range(700):
        trainer.add(moving_dot_pref(rng, is_validation=i >= 500))
    before = trainer.validate(None)["val_accuracy"]
    trainer.pretrain(40)
    after = trainer.validate(None)
    assert after["val_accuracy"] > 0.9, (before, after)
    # The reward given to the agent is higher for moving towards the centre.
    obs = np.zeros((4, 4, 84, 84), np.uint8)
    for i, x in enumerate([10, 10, 70, 70]):
        obs[i, -1] = _render_dot(np.array([x, 41]))
    reward = ens.reward(obs, np.array([2, 4, 4, 2]))  # right, left, left, right
    assert reward[0] > reward[1] and reward[2] > reward[3]


def test_bf16_training_takes_clips_of_different_lengths_in_one_batch():
    rng = np.random.default_rng(7)
    ens = RewardPredictorEnsemble(lambda: AtariRewardNet(), ensemble_size=1)
    ens.bf16 = True  # the nets' sums come out in bf16 and are gathered into fp32 returns
    prefs = [random_pref(rng, t=5), random_pref(rng, t=7), random_pref(rng, t=5)]
    metrics = ens.train_step([prefs])
    assert np.isfinite(metrics["loss"])


def test_eval_mode_puts_the_nets_mode_back_also_after_an_error():
    from reward_predictor.ensemble import eval_mode

    net = torch.nn.Sequential(torch.nn.Dropout(0.5))
    with pytest.raises(RuntimeError):
        with eval_mode(net):
            assert not net.training
            raise RuntimeError("a pass that failed")
    assert net.training
