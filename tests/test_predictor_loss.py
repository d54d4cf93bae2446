"""Reward predictor loss: the noisy Bradley-Terry model, reward normalisation and adaptive L2."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from clips.clip import Clip, Preference
from reward_predictor import (
    AtariRewardNet,
    MovingDotRewardNet,
    RewardPredictorEnsemble,
    RewardPredictorTrainer,
    RunningNormaliser,
    preference_loss,
)
from reward_predictor.regularisation import INITIAL_ADAPTIVE_L2, MIN_L2, adapt_l2
from tests.helpers import random_pref, reward_clip

torch.set_num_threads(1)


# ---- preference model -------------------------------------------------------------------------
def _loss(delta: float, mu: float, noise: float) -> float:
    loss, _ = preference_loss(torch.tensor([delta]), torch.tensor([0.0]), torch.tensor([mu]), noise)
    return float(loss)


def test_equal_returns_make_either_side_equally_likely():
    assert _loss(0.0, 1.0, 0.1) == pytest.approx(math.log(2), abs=1e-6)
    assert _loss(0.0, 1.0, 0.0) == pytest.approx(math.log(2), abs=1e-6)
    assert _loss(0.0, 0.5, 0.1) == pytest.approx(math.log(2), abs=1e-6)


def test_noisy_bradley_terry_matches_hand_computed_values():
    s = 1 / (1 + math.exp(-2.0))  # sigmoid(2) = 0.880797
    assert _loss(2.0, 1.0, 0.1) == pytest.approx(-math.log(0.05 + 0.9 * s), abs=1e-6)  # 0.171
    assert _loss(2.0, 0.0, 0.1) == pytest.approx(-math.log(0.05 + 0.9 * (1 - s)), abs=1e-6)
    tie = -(0.5 * math.log(0.05 + 0.9 * s) + 0.5 * math.log(0.05 + 0.9 * (1 - s)))
    assert _loss(2.0, 0.5, 0.1) == pytest.approx(tie, abs=1e-6)
    assert _loss(2.0, 1.0, 0.0) == pytest.approx(-math.log(s), abs=1e-6)  # plain model: 0.127


def test_label_noise_bounds_the_loss_of_a_confidently_contradicted_label():
    # Sec. 2.2.3: a 10% chance of a uniformly random answer puts a floor of 0.05 under P'.
    assert _loss(-100.0, 1.0, 0.1) == pytest.approx(-math.log(0.05), abs=1e-4)  # 2.9957
    assert _loss(-100.0, 1.0, 0.1) < 3.0
    assert _loss(-100.0, 1.0, 0.0) == pytest.approx(100.0, abs=1e-4)


def test_label_noise_downweights_the_gradient_of_contradicted_labels():
    def grad(delta: float, noise: float) -> float:
        d = torch.tensor([delta], requires_grad=True)
        loss, _ = preference_loss(d, torch.zeros(1), torch.ones(1), noise)
        loss.backward()
        return float(d.grad[0])

    p = 1 / (1 + math.exp(5.0))  # sigmoid(-5)
    assert grad(-5.0, 0.0) == pytest.approx(-(1 - p), abs=1e-5)  # -0.9933
    assert grad(-5.0, 0.1) == pytest.approx(-0.9 * p * (1 - p) / (0.05 + 0.9 * p), abs=1e-5)  # -0.107
    assert abs(grad(-5.0, 0.1)) < 0.2 * abs(grad(-5.0, 0.0))


def test_accuracy_counts_only_labels_that_are_not_ties():
    left = torch.tensor([1.0, 1.0, 0.0, 5.0, 2.0])
    right = torch.tensor([0.0, 0.0, 1.0, 0.0, 2.0])
    mu = torch.tensor([1.0, 0.0, 0.0, 0.5, 1.0])  # right, wrong, right, tie, wrong (delta 0)
    _, acc = preference_loss(left, right, mu)
    assert acc == pytest.approx(2 / 4)
    _, acc = preference_loss(left[3:4], right[3:4], mu[3:4])
    assert math.isnan(acc)


# ---- normalisation ----------------------------------------------------------------------------
def test_rewards_are_normalised_to_mean_zero_and_std_0_05():
    torch.manual_seed(0)
    norm = RunningNormaliser()
    for _ in range(50):
        norm.update(3.0 + 2.0 * torch.randn(800))
    out = norm(3.0 + 2.0 * torch.randn(100_000))
    assert float(out.mean()) == pytest.approx(0.0, abs=2e-3)
    assert float(out.std()) == pytest.approx(0.05, abs=2e-3)  # App. A.2: std 0.05
    assert set(norm.state_dict()) == {"count", "mean", "var"}


def test_the_agent_gets_rewards_of_the_target_std_despite_dropout():
    # Training-mode outputs with dropout 0.5 are far more spread out than the eval-mode outputs
    # the agent receives; a normaliser fit to the former gave the agent ~1/50 of the target std.
    rng = np.random.default_rng(0)
    torch.manual_seed(0)
    prefs = [random_pref(rng) for _ in range(64)]
    ens = RewardPredictorEnsemble(lambda: AtariRewardNet(dropout=0.5, batchnorm=True),
                                  ensemble_size=1, lr=1e-3)
    for _ in range(12):
        ens.train_step([[prefs[j] for j in rng.integers(0, 64, 8)]])
    windows = np.stack([np.lib.stride_tricks.sliding_window_view(p.left.frames(), 4, axis=0)
                        for p in prefs[:16]])  # (16, 25, 84, 84, 4)
    obs = windows.transpose(0, 1, 4, 2, 3).reshape(-1, 4, 84, 84)
    std = ens.reward(obs, np.zeros(len(obs), np.int64)).std()
    assert 0.025 < std < 0.1, std  # App. A.2: std 0.05


def test_normaliser_merges_batches_exactly():
    rng = np.random.default_rng(0)
    batches = [rng.normal(i, 1 + i, size=n) for i, n in enumerate([5, 100, 37, 1])]
    norm = RunningNormaliser(max_count=None)
    for b in batches:
        norm.update(torch.from_numpy(b))
    everything = np.concatenate(batches)
    assert float(norm.count) == len(everything)
    assert float(norm.mean) == pytest.approx(everything.mean(), rel=1e-9)
    assert float(norm.var) == pytest.approx(everything.var(), rel=1e-9)


# ---- adaptive L2 (App. A; Ibarz et al. 2018) ---------------------------------------------------

def test_l2_moves_up_when_validation_loss_is_high_and_down_when_low():
    l2 = [1e-4] * 4
    new = adapt_l2(l2, val_loss=[2.0, 1.3, 1.0, 1.6], train_loss=[1.0, 1.0, 1.0, 1.0])
    assert new[0] > 1e-4  # 2.0 > 1.5x: over-fitting
    assert new[1] == 1e-4  # between 1.1x and 1.5x: leave it
    assert new[2] < 1e-4  # 1.0 < 1.1x
    assert new[3] > 1e-4
    assert adapt_l2([1e-4], [float("nan")], [1.0]) == [1e-4]  # no validation labels yet


def test_l2_is_never_negative():
    coef = [1e-4, 0.0, -1.0]
    for _ in range(500):
        coef = adapt_l2(coef, [0.1] * 3, [1.0] * 3)
        assert all(c >= 0.0 for c in coef)
    assert coef[0] == MIN_L2 and coef[1] == 0.0 and coef[2] == 0.0
    assert adapt_l2([0.0], [9.0], [1.0]) == [MIN_L2]  # raised from zero


def dot_prefs(rng: np.random.Generator, n: int, is_validation: bool) -> list[Preference]:
    def reward_clip():
        return Clip.pack(rng.integers(0, 256, (5, 84, 84), dtype=np.uint8), rng.integers(0, 5, 2),
                       rng.normal(size=2).astype(np.float32))
    return [Preference(reward_clip(), reward_clip(), float(rng.choice([0.0, 1.0])),
                       is_validation=is_validation)
            for _ in range(n)]


def test_trainer_adapts_each_members_l2_after_validation():
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    ens = RewardPredictorEnsemble(MovingDotRewardNet, ensemble_size=3)
    fixed = RewardPredictorTrainer(ens, seed=0)
    assert fixed.adapt_regularisation({"member_val_loss": [9.0] * 3,
                                       "member_inbag_loss": [1.0] * 3}) == [0.0] * 3  # switched off
    trainer = RewardPredictorTrainer(ens, seed=0, adaptive_l2=True)
    assert ens.l2 == [INITIAL_ADAPTIVE_L2] * 3  # Ibarz et al. 2018: start at 1e-4
    new = trainer.adapt_regularisation({"member_val_loss": [2.0, 1.2, 0.5],
                                        "member_inbag_loss": [1.0, 1.0, 1.0]})
    assert new == ens.l2 and new[0] > 1e-4 and new[1] == 1e-4 and new[2] < 1e-4
    for pref in dot_prefs(rng, 12, False) + dot_prefs(rng, 6, True):
        trainer.add(pref)
    trainer.train_steps(2)
    metrics = trainer.validate()
    assert len(metrics["member_inbag_loss"]) == 3 and len(metrics["member_val_loss"]) == 3
    assert all(c > 0 for c in trainer.adapt_regularisation())


def test_a_loaded_checkpoint_keeps_the_l2_setting_of_the_run_that_loads_it(tmp_path):
    """--no_adaptive_l2 on a predictor trained with it trains without L2; adaptive L2 on one
    trained without it starts from 1e-4; adaptive on adaptive goes on where it was."""
    torch.manual_seed(0)
    adaptive = RewardPredictorTrainer(RewardPredictorEnsemble(MovingDotRewardNet, 2), adaptive_l2=True)
    adaptive.ensemble.l2 = [3e-3, 5e-5]
    adaptive.save(str(tmp_path / "adaptive.pt"))
    RewardPredictorTrainer(RewardPredictorEnsemble(MovingDotRewardNet, 2)).save(str(tmp_path / "none.pt"))
    for saved, on, want in (("adaptive", False, [0.0, 0.0]), ("none", True, [INITIAL_ADAPTIVE_L2] * 2),
                            ("adaptive", True, [3e-3, 5e-5])):
        trainer = RewardPredictorTrainer(RewardPredictorEnsemble(MovingDotRewardNet, 2), adaptive_l2=on)
        trainer.load(str(tmp_path / f"{saved}.pt"))
        assert trainer.ensemble.l2 == pytest.approx(want), (saved, on)


def test_inbag_loss_weights_labels_by_the_members_bootstrap_counts():
    torch.manual_seed(0)
    ens = RewardPredictorEnsemble(MovingDotRewardNet, ensemble_size=2)
    prefs = dot_prefs(np.random.default_rng(1), 4, False)
    plain = ens.evaluate(prefs, weights=np.ones((4, 2)))
    assert np.allclose(plain["member_weighted_loss"], plain["member_loss"], atol=1e-6)
    only_first = ens.evaluate(prefs, weights=np.array([[1, 0], [0, 0], [0, 0], [0, 0]]))
    assert only_first["member_weighted_loss"][0] == pytest.approx(ens.evaluate(prefs[:1])["member_loss"][0],
                                                                  abs=1e-5)
    assert only_first["member_weighted_loss"][1] == pytest.approx(plain["member_loss"][1], abs=1e-6)


# ---- noise model (§2.2.3) ----------------------------------------------------------------------

class CornerNet(nn.Module):
    """r = 10 * w * (top-left pixel of the newest frame) / 255: one weight to read gradients off."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.ones(1, 1))

    def forward(self, obs: torch.Tensor, actions: torch.Tensor | None = None) -> torch.Tensor:
        return obs[..., -1, 0, 0].float() / 255.0 * 10.0 * self.w[0, 0]


def test_plain_bradley_terry_without_noise_changes_the_gradients():
    """noise=0 is the plain model: a confidently contradicted label pulls with full force."""
    # r_left 0, r_right 10
    pref = Preference(reward_clip([0.0], value=0), reward_clip([0.0], value=255), mu=1.0)

    def grad(noise: float) -> float:
        ens = RewardPredictorEnsemble(CornerNet, ensemble_size=1, noise=noise)
        ens._optimizers = [torch.optim.SGD(ens.members[0].parameters(), lr=1.0)]
        loss = ens.train_step([[pref]])["loss"]
        assert math.isfinite(loss)
        return 1.0 - float(ens.members[0].w.detach())  # SGD with lr 1: the step is the gradient

    delta = -10.0
    p = 1 / (1 + math.exp(-delta))
    assert grad(0.0) == pytest.approx(10 * (1 - p), rel=1e-4)  # d/dw of -log sigmoid(-10 w)
    assert grad(0.1) == pytest.approx(10 * 0.9 * p * (1 - p) / (0.05 + 0.9 * p), rel=1e-3)
    assert grad(0.1) < 0.01 * grad(0.0)


def test_each_validation_records_the_ratio_adaptive_l2_keeps():
    """TensorBoard's train_loss is a minibatch's in training mode; the ratio that adaptive L2
    holds within 1.1-1.5 is recorded per member, from eval-mode losses."""
    from types import SimpleNamespace

    from reward_predictor.process import _validate

    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    trainer = RewardPredictorTrainer(RewardPredictorEnsemble(MovingDotRewardNet, ensemble_size=2),
                                     seed=0, adaptive_l2=True)
    for pref in dot_prefs(rng, 12, False) + dot_prefs(rng, 6, True):
        trainer.add(pref)
    trainer.train_steps(2)
    recorded: dict[str, float] = {}
    telemetry = SimpleNamespace(record=lambda tag, value: recorded.__setitem__(tag, value))
    stats = SimpleNamespace(labels_received=SimpleNamespace(value=18),
                            val_accuracy=SimpleNamespace(value=float("nan")))
    real_validate = trainer.validate
    seen = []
    trainer.validate = lambda max_pairs: seen.append(real_validate(None)) or seen[-1]
    _validate(trainer, stats, 100, telemetry)
    val = seen[0]
    for m in range(2):
        assert recorded[f"reward_predictor/val_to_train_member{m}"] == pytest.approx(
            val["member_val_loss"][m] / val["member_inbag_loss"][m])


def test_validation_labels_that_are_all_ties_are_said_so_not_left_blank():
    """An accuracy counts the labels that prefer a clip: while every validation label is a tie,
    the status says so rather than showing the blank of a run not validated yet."""
    from dataclasses import replace
    from types import SimpleNamespace

    from reward_predictor.config import VAL_TIES_ONLY, TrainerStats
    from reward_predictor.process import _validate

    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    trainer = RewardPredictorTrainer(RewardPredictorEnsemble(MovingDotRewardNet, ensemble_size=2),
                                     seed=0)
    for pref in dot_prefs(rng, 8, False) + [replace(p, mu=0.5) for p in dot_prefs(rng, 4, True)]:
        trainer.add(pref)
    recorded: dict[str, float] = {}
    telemetry = SimpleNamespace(record=lambda tag, value: recorded.__setitem__(tag, value))
    stats = TrainerStats(*(SimpleNamespace(value=v) for v in (12, float("nan"), 0)))
    _validate(trainer, stats, 100, telemetry)
    assert stats.val_accuracy.value == VAL_TIES_ONLY
    assert "reward_predictor/val_accuracy" not in recorded and "reward_predictor/val_loss" in recorded
    assert stats.val_accuracy_text() == "val acc - (ties only)"
    stats.val_accuracy.value = 0.8  # an accuracy shown once stays through a subset of ties
    _validate(trainer, stats, 100, telemetry)
    assert stats.val_accuracy.value == 0.8 and stats.val_accuracy_text() == "val acc 80%"
    stats.val_accuracy.value = float("nan")
    assert stats.val_accuracy_text() == "val acc -"
