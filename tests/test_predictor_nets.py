"""Reward nets: the paper's architecture, its fused training path, batch-norm statistics, MovingDot."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from clips.clip import Clip
from reward_predictor import (
    AtariRewardNet,
    MovingDotRewardNet,
    RewardPredictorEnsemble,
    RewardPredictorTrainer,
    make_reward_net,
)
from reward_predictor.ensemble import clip_returns, take_batchnorm_statistics
from reward_predictor.nets import FirstConv, NormActDrop, dropout_half
from tests.helpers import _render_dot, moving_dot_clip, moving_dot_pref, random_clip, random_pref

torch.set_num_threads(1)


# ---- batch-norm statistics -------------------------------------------------------------------
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
    ens = RewardPredictorEnsemble(lambda: AtariRewardNet(dropout=0.5, batchnorm=True), ensemble_size=1)
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
    raw = take_batchnorm_statistics(net, clips)
    assert not raw.requires_grad  # a pass outside training: no graph is kept
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
    ens = RewardPredictorEnsemble(MovingDotRewardNet, ensemble_size=2)
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


def test_clip_returns_are_summed_in_fp32_under_bf16_autocast():
    """bf16 holds about 3 significant digits: summed in it, returns of 16-32 move in steps of
    0.125 and small differences between two clips round to nothing."""
    rng = np.random.default_rng(3)
    torch.manual_seed(3)
    clips = [random_clip(rng, 25) for _ in range(4)]
    net = AtariRewardNet(dropout=0.0, batchnorm=False)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        returns, raw = clip_returns(net, clips)
    assert returns.dtype == torch.float32
    torch.testing.assert_close(returns, raw.float().view(4, 25).sum(1))
