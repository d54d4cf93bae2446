"""Reward predictor: preference model and its noise (§2.2.3), normalisation, bootstrapped
ensemble, adaptive L2 (App. A), weight sharing, checkpoints, the trainer process, and learning
the MovingDot reward from labels."""
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
import torch.nn.functional as F
from torch import nn

from launch.loop import run_predictor_trainer
from pref_interface.clip import Clip, Preference
from pref_interface.store import PreferenceStore
from reward_predictor import (
    AtariRewardNet,
    CheckpointError,
    MovingDotRewardNet,
    RewardPredictorEnsemble,
    RewardPredictorTrainer,
    RunningNormaliser,
    SharedWeights,
    TrainerConfig,
    TrainerStats,
    bootstrap_counts,
    build_ensemble,
    make_reward_net,
    preference_loss,
)
from reward_predictor.ensemble import clip_returns, take_batchnorm_statistics
from reward_predictor.nets import FirstConv, NormActDrop, dropout_half
from reward_predictor.pace import PredictorPace, labels_per_member
from reward_predictor.process import run_pretraining
from reward_predictor.regularisation import INITIAL_ADAPTIVE_L2, MIN_L2, adapt_l2
from reward_predictor.reward_fn import PredictedReward
from tests.helpers import random_clip, reward_clip

torch.set_num_threads(1)


# ---- synthetic data ---------------------------------------------------------------------------
def random_pref(rng: np.random.Generator, is_validation: bool = False, t: int = 25) -> Preference:
    return Preference(random_clip(rng, t), random_clip(rng, t), float(rng.choice([0.0, 0.5, 1.0])),
                      is_validation=is_validation)


# MovingDot drawn directly at 84x84, no env code: a 2x2 dot whose top-left corner walks on the
# integer grid, 2 px per agent step (the env's 4 px per step in 210x160 is 1.6-2.1 px here).
DOT_STEP = {0: (0, 0), 1: (0, 2), 2: (2, 0), 3: (0, -2), 4: (-2, 0)}  # noop, down, right, up, left
DOT_CENTRE = np.array([41.5, 41.5])  # the frame's centre, in pixel-centre coordinates


def _render_dot(p: np.ndarray) -> np.ndarray:
    frame = np.zeros((84, 84), np.uint8)
    frame[p[1]:p[1] + 2, p[0]:p[0] + 2] = 255
    return frame


def moving_dot_clip(rng: np.random.Generator, t: int = 25) -> Clip:
    """A random walk; true reward +1 per step that ends closer to the centre, -1 farther, 0 equal."""
    p = rng.integers(0, 83, size=2)  # (x, y) of the dot's top-left pixel
    frames = [_render_dot(p)] * 3
    actions = rng.integers(0, 5, t)
    rewards = np.zeros(t, np.float32)
    for i, a in enumerate(actions):
        frames.append(_render_dot(p))  # the newest frame of the stack seen at step i
        q = np.clip(p + DOT_STEP[int(a)], 0, 82)
        rewards[i] = np.sign(np.linalg.norm(p + 0.5 - DOT_CENTRE) - np.linalg.norm(q + 0.5 - DOT_CENTRE))
        p = q
    return Clip.pack(np.stack(frames), actions.astype(np.int64), rewards)


def moving_dot_pref(rng: np.random.Generator, is_validation: bool) -> Preference:
    """Labelled by true return, as the synthetic oracle does; equal returns are a tie."""
    left, right = moving_dot_clip(rng), moving_dot_clip(rng)
    diff = left.true_return - right.true_return
    return Preference(left, right, 1.0 if diff > 0 else 0.0 if diff < 0 else 0.5,
                      is_validation=is_validation)


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
                                  n_members=1, lr=1e-3)
    for _ in range(12):
        ens.train_step([[prefs[j] for j in rng.integers(0, 64, 8)]])
    windows = np.stack([np.lib.stride_tricks.sliding_window_view(p.left.frames(), 4, axis=0)
                        for p in prefs[:16]])  # (16, 25, 84, 84, 4)
    obs = windows.transpose(0, 1, 4, 2, 3).reshape(-1, 4, 84, 84)
    std = ens.reward(obs, np.zeros(len(obs), np.int64)).std()
    assert 0.025 < std < 0.1, std  # App. A.2: std 0.05


def _running_to_actual_variance(net: AtariRewardNet, clips: list[Clip]) -> list[float]:
    """Per batch-norm layer, the median over channels of running variance / the variance of the
    layer's input in an eval-mode pass over `clips`: 1 when the statistics fit what the agent's
    net computes."""
    inputs = []
    hooks = [bn.register_forward_hook(lambda mod, inp, out: inputs.append(inp[0].float()))
             for bn in net.norms]
    was_training = net.training
    net.eval()
    with torch.no_grad():
        clip_returns(net, clips)
    net.train(was_training)
    for hook in hooks:
        hook.remove()
    return [(bn.running_var / x.transpose(0, 1).flatten(1).var(1)).median().item()
            for bn, x in zip(net.norms, inputs)]


def test_batch_norm_statistics_fit_the_net_the_agent_gets():
    # The agent's eval-mode net normalises each batch-norm layer's input by the running statistics.
    # A running average over past training batches (with dropout, and with older weights) did not
    # fit it, and on Pong a member's accuracy then swung by 0.3 within 10 steps (see train_step).
    rng = np.random.default_rng(0)
    torch.manual_seed(0)
    prefs = [random_pref(rng, t=5) for _ in range(8)]
    ens = RewardPredictorEnsemble(lambda: AtariRewardNet(dropout=0.5, batchnorm=True), n_members=1)
    for _ in range(3):
        ens.train_step([prefs])
    ratios = _running_to_actual_variance(ens.members[0], [p.left for p in prefs])
    assert all(abs(r - 1.0) < 0.01 for r in ratios), ratios  # a running average: 20 to 2,700 here


def test_batch_norm_statistics_of_a_saved_net_can_be_retaken():
    rng = np.random.default_rng(1)
    torch.manual_seed(1)
    clips = [random_clip(rng, 5) for _ in range(8)]
    net = AtariRewardNet(dropout=0.5, batchnorm=True)
    with torch.no_grad():
        for _ in range(30):
            clip_returns(net, clips)  # statistics gathered with dropout on (training mode)
    assert max(_running_to_actual_variance(net, clips)) > 1.25
    take_batchnorm_statistics(net, clips)
    assert all(abs(r - 1.0) < 0.01 for r in _running_to_actual_variance(net, clips))
    assert net.training and all(bn.training and bn.momentum == 0.1 for bn in net.norms)


def test_one_pass_batch_norm_statistics_are_those_of_the_eval_pass_they_return():
    # take_batchnorm_statistics sets each layer's statistics from its input in the very pass whose
    # outputs it returns, so both fit the eval-mode net the agent gets.
    rng = np.random.default_rng(2)
    torch.manual_seed(2)
    clips = [random_clip(rng, 5) for _ in range(6)]
    net = AtariRewardNet(dropout=0.5, batchnorm=True)
    reference = AtariRewardNet(dropout=0.5, batchnorm=True)
    reference.load_state_dict(net.state_dict())
    raw = take_batchnorm_statistics(net, clips)
    net.eval()
    with torch.no_grad():
        torch.testing.assert_close(raw, clip_returns(net, clips)[1], rtol=1e-5, atol=1e-6)
    net.train()
    assert all(abs(r - 1.0) < 1e-4 for r in _running_to_actual_variance(net, clips))
    # Batch norm's own plain average over a training-mode pass normalises each layer by its biased
    # variance while gathering, so the next layer's statistics differ by about 1/(frames x pixels).
    with torch.no_grad():
        reference.eval()
        for bn in reference.norms:
            bn.reset_running_stats()
            bn.momentum = None
            bn.train()
        clip_returns(reference, clips)
        reference.eval()
        torch.testing.assert_close(raw, clip_returns(reference, clips)[1], rtol=1e-2, atol=1e-3)


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


# ---- networks ---------------------------------------------------------------------------------
def test_atari_reward_net_is_the_paper_architecture():
    net = AtariRewardNet(dropout=0.5, batchnorm=True)
    assert [(c.kernel_size, c.stride, c.out_channels) for c in net.convs] == [
        ((7, 7), (3, 3), 16), ((5, 5), (2, 2), 16), ((3, 3), (1, 1), 16), ((3, 3), (1, 1), 16)]
    assert net.fc.out_features == 64 and net.out.out_features == 1
    obs = torch.randint(0, 256, (6, 4, 84, 84), dtype=torch.uint8)
    out = net(obs, torch.zeros(6, dtype=torch.int64))
    assert out.shape == (6,) and out.dtype == torch.float32
    net.eval()
    assert torch.equal(net(obs), net(obs))  # no dropout at evaluation
    # The clip view (N, T, 4, 84, 84) of overlapping windows gives the same numbers.
    frames = torch.randint(0, 256, (2, 8, 84, 84), dtype=torch.uint8)
    windows = frames.unfold(1, 4, 1).permute(0, 1, 4, 2, 3)
    assert torch.allclose(net(windows), net(windows.contiguous().reshape(-1, 4, 84, 84)).reshape(2, 5))


def test_fast_dropout_drops_each_unit_with_probability_one_half():
    torch.manual_seed(0)
    x = torch.ones(200, 16, 26, 26).to(memory_format=torch.channels_last)
    out = dropout_half(x)
    assert out.stride() == x.stride()
    assert set(out.unique().tolist()) == {0.0, 2.0}  # kept units scaled by 1 / (1 - p)
    assert float((out == 0).float().mean()) == pytest.approx(0.5, abs=2e-3)
    flat = out.flatten()
    assert abs(float(torch.corrcoef(torch.stack([flat[:-1], flat[1:]]))[0, 1])) < 0.01
    # each bit of the random words it is drawn from, the sign bit too, is a fair coin (in memory
    # order, which channels-last is as NHWC; 7 standard deviations of 33,800 draws a bit)
    in_memory = out.permute(0, 2, 3, 1).reshape(-1, 64)
    assert float(((in_memory == 0).float().mean(0) - 0.5).abs().max()) < 0.02
    net = AtariRewardNet(dropout=0.5)
    obs = torch.randint(0, 256, (4, 4, 84, 84), dtype=torch.uint8)
    assert not torch.equal(net(obs), net(obs))  # active while training


def test_the_first_convolution_from_bytes_matches_one_on_floats():
    # FirstConv converts chunks of frames to float in forward and again in backward.
    torch.manual_seed(0)
    frames = torch.randint(0, 256, (450, 84, 84, 4), dtype=torch.uint8)  # 3 chunks of 200 or less
    floats = frames.float().permute(0, 3, 1, 2)
    for bias in (None, torch.randn(16, requires_grad=True)):
        weight = torch.randn(16, 4, 7, 7, requires_grad=True)
        plain = F.conv2d(floats, weight, bias, 3)
        grad = torch.randn_like(plain)
        expected = torch.autograd.grad(plain, [weight] + ([bias] if bias is not None else []), grad)
        out = FirstConv.apply(frames, weight, bias, (3, 3))
        assert out.is_contiguous(memory_format=torch.channels_last)
        assert torch.allclose(out, plain, rtol=1e-5, atol=1e-3)
        got = torch.autograd.grad(out, [weight] + ([bias] if bias is not None else []), grad)
        for g, e in zip(got, expected):
            assert torch.allclose(g, e, rtol=1e-4, atol=1e-3 * float(e.abs().max()))


def test_batch_norm_leaky_relu_and_dropout_in_one_step_match_the_three():
    torch.manual_seed(0)
    fused, plain = nn.BatchNorm2d(16), nn.BatchNorm2d(16)
    with torch.no_grad():
        fused.weight.uniform_(0.5, 1.5)
        fused.bias.uniform_(-0.5, 0.5)
    plain.load_state_dict(fused.state_dict())
    x = torch.randn(64, 16, 26, 26).to(memory_format=torch.channels_last)
    x_fused, x_plain = x.clone().requires_grad_(), x.clone().requires_grad_()
    torch.manual_seed(1)  # the same dropout mask for both
    out_fused = NormActDrop.apply(x_fused, fused.weight, fused.bias, fused)
    torch.manual_seed(1)
    out_plain = dropout_half(F.leaky_relu(plain(x_plain), 0.01))
    assert torch.equal(out_fused, out_plain)
    grad = torch.randn_like(out_plain)
    (out_fused * grad).sum().backward()
    (out_plain * grad).sum().backward()
    assert torch.allclose(x_fused.grad, x_plain.grad, rtol=1e-5, atol=1e-6)
    assert torch.allclose(fused.weight.grad, plain.weight.grad, rtol=1e-5, atol=1e-5)
    assert torch.allclose(fused.bias.grad, plain.bias.grad, rtol=1e-5, atol=1e-5)
    assert torch.equal(fused.running_mean, plain.running_mean)
    assert torch.equal(fused.running_var, plain.running_var)


def test_the_paper_net_trains_as_its_plain_layers_would():
    # The whole net with its fused training path against the same layers called one by one.
    torch.manual_seed(0)
    net = AtariRewardNet(dropout=0.5, batchnorm=True)
    obs = torch.randint(0, 256, (40, 4, 84, 84), dtype=torch.uint8)
    torch.manual_seed(2)
    out = net(obs)
    out.sum().backward()
    got = [p.grad.clone() for p in net.parameters()]
    net.zero_grad()
    torch.manual_seed(2)
    x = obs.float().to(memory_format=torch.channels_last)
    for i, (conv, norm) in enumerate(zip(net.convs, net.norms)):
        x = F.conv2d(x, conv.weight / 255.0, conv.bias, conv.stride) if i == 0 else conv(x)
        x = dropout_half(F.leaky_relu(norm(x), 0.01))
    plain = net.out(F.leaky_relu(net.fc(x.flatten(1)), 0.01)).reshape(40)
    assert torch.allclose(out, plain, rtol=1e-4, atol=1e-4)
    plain.sum().backward()
    for g, p in zip(got, net.parameters()):
        assert torch.allclose(g, p.grad, rtol=1e-3, atol=1e-4 * float(p.grad.abs().max())), p.shape


def test_moving_dot_net_finds_the_dot():
    net = make_reward_net("moving_dot", 0.0, False)
    assert isinstance(net, MovingDotRewardNet)
    obs = np.zeros((2, 4, 84, 84), np.uint8)
    obs[0, -1] = _render_dot(np.array([0, 0]))
    obs[1, -1] = _render_dot(np.array([82, 41]))
    obs[1, 0] = _render_dot(np.array([0, 0]))  # older frames are ignored
    pos = net.dot_position(torch.from_numpy(obs))
    assert torch.allclose(pos, torch.tensor([[-1 + 1 / 83, -1 + 1 / 83], [1 - 1 / 83, 0.0]]), atol=1e-5)
    with pytest.raises(ValueError):
        make_reward_net("mujoco", 0.0, False)


def test_moving_dot_members_score_from_each_clips_kept_dot_positions_as_from_its_frames(
        monkeypatch):
    rng = np.random.default_rng(4)
    ens = RewardPredictorEnsemble(MovingDotRewardNet, n_members=2)
    features = ens.clip_features
    clips = [moving_dot_clip(rng) for _ in range(5)] + [moving_dot_clip(rng, t=7)]
    clips.append(clips[0])  # a clip twice in one batch, as in a batch of labels
    for net in ens.members:
        want = clip_returns(net, clips)  # from the frames
        got = clip_returns(net, clips, features)
        torch.testing.assert_close(got, want)
    assert len(features) == 6
    seen = []
    monkeypatch.setattr(MovingDotRewardNet, "features",
                        lambda net, obs: seen.append(obs.shape[0]) or net.dot_position(obs))
    ens.member_returns(clips + [moving_dot_clip(rng)])
    assert seen == [1]  # only the new clip's frames were read
    # Training runs from them too: the kept positions carry no gradient, the head gets it.
    trainer = RewardPredictorTrainer(ens, seed=0)
    for _ in range(4):
        trainer.add(moving_dot_pref(rng, False))
    assert np.isfinite(trainer.train_steps(2)["loss"])
    features.max_clips = 3  # the least recently used go
    seen.clear()
    for batch in (clips[:2], clips[:2], clips[2:3]):
        clip_returns(ens.members[0], batch, features)
    assert len(features) == 3 and seen == [1]


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
    trainer = RewardPredictorTrainer(RewardPredictorEnsemble(MovingDotRewardNet, n_members=1),
                                     batch_size=16, seed=0)
    labels = [moving_dot_pref(rng, False) for _ in range(20)]
    for p in labels:
        trainer.add(p)
    assert (trainer.bootstrap_counts() == 1).all()
    seen = {_label_key(p) for _ in range(30) for p in trainer.sample_batches()[0]}
    assert seen == {_label_key(p) for p in labels}


def test_members_train_only_on_their_bootstrap_resample():
    rng = np.random.default_rng(2)
    trainer = RewardPredictorTrainer(RewardPredictorEnsemble(MovingDotRewardNet, n_members=3), seed=3)
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
    trainer = RewardPredictorTrainer(RewardPredictorEnsemble(MovingDotRewardNet, n_members=2),
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
    ens = RewardPredictorEnsemble(lambda: _ScaledNewestPixel(next(scales)), n_members=3)
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
                                  n_members=3)
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
    ens = RewardPredictorEnsemble(lambda: AtariRewardNet(dropout=0.5, batchnorm=True), n_members=3)
    ens.train_step([[random_pref(rng) for _ in range(2)] for _ in range(3)])
    clips = [random_clip(rng, 25 if i % 3 else 12) for i in range(40)]
    assert ens._stacked_members() is not None
    got = ens.member_returns(clips)
    assert ens.training  # its mode is kept
    for m, net in enumerate(ens.members):
        with torch.no_grad():
            want = clip_returns(net.eval(), clips)[0]
        torch.testing.assert_close(got[m], want, rtol=1e-4, atol=1e-5)


def test_train_step_fits_each_member_and_tracks_its_reward_statistics():
    torch.manual_seed(0)
    rng = np.random.default_rng(4)
    ens = RewardPredictorEnsemble(lambda: AtariRewardNet(dropout=0.5, batchnorm=True), n_members=2,
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
def _atari_trainer(seed: int) -> RewardPredictorTrainer:
    torch.manual_seed(seed)
    ens = RewardPredictorEnsemble(lambda: AtariRewardNet(dropout=0.5, batchnorm=True), n_members=2)
    return RewardPredictorTrainer(ens, batch_size=2, seed=seed)


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

    restored = _atari_trainer(1)
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
    moving_dot = RewardPredictorTrainer(RewardPredictorEnsemble(MovingDotRewardNet, n_members=2))
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
    run_predictor_trainer(config, pref_queue=prefs, shared_weights=shared,
                stop_event=_InterruptAfter(stats, 40), stats=stats, log_dir=str(tmp_path / "tb"))
    assert stats.labels_received.value == 40 and prefs.empty()
    assert 0.0 <= stats.val_accuracy.value <= 1.0
    assert shared.version >= 2  # at start, and during training
    state = torch.load(tmp_path / "rp.pt", weights_only=True)
    assert state["steps"] >= 100
    assert any(f.startswith("events.out.tfevents") for f in os.listdir(tmp_path / "tb"))


def test_trainer_process_stops_on_its_event(tmp_path):
    ctx = mp.get_context("spawn")
    config = TrainerConfig(env_kind="moving_dot", ensemble_size=1, duty=1.0)
    shared = SharedWeights(ctx)
    stats = TrainerStats.create(ctx)
    stop = threading.Event()
    worker = threading.Thread(target=run_predictor_trainer, args=(config,), kwargs=dict(
        pref_queue=queue.Queue(), shared_weights=shared, stop_event=stop, stats=stats,
        log_dir=str(tmp_path)))
    worker.start()
    stop.set()
    worker.join(timeout=30)
    assert not worker.is_alive() and stats.labels_received.value == 0
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
        run_pretraining(config, stop_event=threading.Event(), stats=stats,
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
        env_kind="moving_dot", ensemble_size=1, batch_size=16, validate_every_steps=1000, **config),),
        kwargs=dict(pref_queue=prefs, shared_weights=shared, stop_event=stop, stats=stats,
                    log_dir=str(tmp_path)))
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
            deadline = time.monotonic() + 60.0
            while shared.labels_trained < allowed and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(1.0)  # at duty 1 it would train hundreds of steps more in this time
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


# ---- learning ---------------------------------------------------------------------------------
def test_predictor_learns_that_closer_to_centre_is_preferred():
    """A few hundred synthetic MovingDot labels take the predictor past 90% validation accuracy."""
    rng = np.random.default_rng(0)
    torch.manual_seed(0)
    ens = RewardPredictorEnsemble(MovingDotRewardNet, n_members=1, lr=3e-3)
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
    ens = RewardPredictorEnsemble(lambda: AtariRewardNet(), n_members=1)
    ens.bf16 = True  # the nets' sums come out in bf16 and are gathered into fp32 returns
    prefs = [random_pref(rng, t=5), random_pref(rng, t=7), random_pref(rng, t=5)]
    metrics = ens.train_step([prefs])
    assert np.isfinite(metrics["loss"])


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


def test_the_paper_pace_counts_each_member_or_the_whole_ensemble():
    # App. A.2's "1 label per 10 RL timesteps" for "the predictor": per member by default; read
    # for the ensemble, each of 3 members trains on a third of it.
    assert labels_per_member(0.1, "member", 3) == 0.1
    assert labels_per_member(0.1, "ensemble", 3) == pytest.approx(0.1 / 3)
    with pytest.raises(ValueError, match="neither"):
        labels_per_member(0.1, "members", 3)


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
    ens = RewardPredictorEnsemble(MovingDotRewardNet, n_members=3)
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


def test_inbag_loss_weights_labels_by_the_members_bootstrap_counts():
    torch.manual_seed(0)
    ens = RewardPredictorEnsemble(MovingDotRewardNet, n_members=2)
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
        ens = RewardPredictorEnsemble(CornerNet, n_members=1, noise=noise)
        ens._optimizers = [torch.optim.SGD(ens.members[0].parameters(), lr=1.0)]
        loss = ens.train_step([[pref]])["loss"]
        assert math.isfinite(loss)
        return 1.0 - float(ens.members[0].w.detach())  # SGD with lr 1: the step is the gradient

    delta = -10.0
    p = 1 / (1 + math.exp(-delta))
    assert grad(0.0) == pytest.approx(10 * (1 - p), rel=1e-4)  # d/dw of -log sigmoid(-10 w)
    assert grad(0.1) == pytest.approx(10 * 0.9 * p * (1 - p) / (0.05 + 0.9 * p), rel=1e-3)
    assert grad(0.1) < 0.01 * grad(0.0)
