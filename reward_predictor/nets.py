"""Reward networks r̂(o, a): one scalar per observation.

Both nets accept observations with any leading batch dimensions, uint8 (..., 4, 84, 84), and
return float32 (...). A strided (non-contiguous) view is fine: the ensemble passes the
overlapping 4-frame windows of a clip without materialising them as uint8 first.
"""
from __future__ import annotations

from typing import Iterator

import torch
import torch.nn.functional as F
from torch import nn

from clips.clip import FRAME_SHAPE, STACK

FRAME = FRAME_SHAPE[0]  # square frames
N_MOVING_DOT_ACTIONS = 5  # 0 noop, 1 down, 2 right, 3 up, 4 left
LEAKY_SLOPE = 0.01  # App. A.2: leaky ReLU, alpha 0.01

# Byte value -> its 8 bits as dropout multipliers {0, 2}: one random byte gives 8 mask entries.
_HALF_MASK_TABLE = (((torch.arange(256).unsqueeze(-1) >> torch.arange(8)) & 1) * 2).to(torch.uint8)


def half_mask(x: torch.Tensor) -> torch.Tensor:
    """A dropout mask for p = 0.5: bytes {0, 2} (0, or kept and scaled by 1 / (1 - p)), shaped and
    laid out like `x`; entries are i.i.d., so any layout is the same distribution.

    Every bit of a uniform random 64-bit word is an independent fair coin, so one random draw
    serves 64 entries, far cheaper than a float per entry (bernoulli_) or a byte per 8 (randint;
    docs/results.md). Bytes are what the backward pass keeps: a quarter of a float mask.
    """
    n = x.numel()
    # from -2**63 with no upper bound: the full 64-bit range, so the sign bit is a fair coin too
    words = torch.empty((n + 63) // 64, dtype=torch.int64, device=x.device).random_(-2**63, None)
    bytes_ = words.view(torch.uint8)
    mask = _HALF_MASK_TABLE.to(x.device).index_select(0, bytes_.long()).view(-1)[:n]
    return mask.as_strided(x.shape, x.stride())


def dropout_half(x: torch.Tensor) -> torch.Tensor:
    """Dropout with p = 0.5 in training mode, the same distribution as F.dropout(x, 0.5)."""
    return x * half_mask(x)


class NormActDrop(torch.autograd.Function):
    """Batch norm in training mode, leaky ReLU and dropout p = 0.5, the same kernels and numbers
    as BatchNorm2d, F.leaky_relu and `dropout_half` one after the other, but keeping less for the
    backward pass: the normalised output is made leaky and dropped out in place, and backward
    reads the leaky ReLU's sign from the final output (a dropped unit has no gradient anyway).
    What is kept is the layer's input, its output (which the next convolution keeps too) and a
    byte mask, instead of four float tensors: on 800 frames the first layer's are 35 MB each."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, norm_weight: torch.Tensor, norm_bias: torch.Tensor,
                norm: nn.BatchNorm2d) -> torch.Tensor:
        # Updates the running statistics as BatchNorm2d's training-mode forward does.
        out, mean, invstd = torch.ops.aten.native_batch_norm(
            x, norm_weight, norm_bias, norm.running_mean, norm.running_var, True, norm.momentum,
            norm.eps)
        mask = half_mask(out)
        out = F.leaky_relu_(out, LEAKY_SLOPE).mul_(mask)
        ctx.save_for_backward(x, norm_weight, mean, invstd, mask, out)
        ctx.norm = norm
        return out

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        x, norm_weight, mean, invstd, mask, out = ctx.saved_tensors
        grad = torch.ops.aten.leaky_relu_backward(grad_out * mask, out, LEAKY_SLOPE, True)
        grad_x, grad_w, grad_b = torch.ops.aten.native_batch_norm_backward(
            grad, x, norm_weight, ctx.norm.running_mean, ctx.norm.running_var, mean, invstd, True,
            ctx.norm.eps, [True, True, True])
        return grad_x, grad_w, grad_b, None


class AtariRewardNet(nn.Module):
    """The paper's Atari reward predictor (App. A.2).

    4 conv layers 7x7/3, 5x5/2, 3x3/1, 3x3/1 with 16 filters each and leaky ReLU (alpha 0.01),
    then FC 64 and a scalar output. Batch norm and dropout are applied to the conv layers
    ("all convolutional layers use batch norm and dropout with alpha = 0.5"). The action is not an
    input (App. A.2; Ibarz et al. 2018 likewise).
    """

    def __init__(self, dropout: float = 0.0, batchnorm: bool = False) -> None:
        super().__init__()
        assert 0.0 <= dropout < 1.0, dropout
        self.dropout = float(dropout)
        specs = [(STACK, 7, 3), (16, 5, 2), (16, 3, 1), (16, 3, 1)]  # (in channels, kernel, stride)
        # With batch norm right after a conv the conv bias is redundant (BN subtracts the mean).
        self.convs = nn.ModuleList(
            nn.Conv2d(c_in, 16, k, s, bias=not batchnorm) for c_in, k, s in specs)
        self.norms = nn.ModuleList(
            nn.BatchNorm2d(16) if batchnorm else nn.Identity() for _ in specs)
        self.fc = nn.Linear(16 * 7 * 7, 64)  # 84 -> 26 -> 11 -> 9 -> 7
        self.out = nn.Linear(64, 1)
        # Channels-last (NHWC) activations make oneDNN's CPU convolutions faster here.
        self.to(memory_format=torch.channels_last)

    def forward(self, obs: torch.Tensor, actions: torch.Tensor | None = None,
                take_statistics: bool = False) -> torch.Tensor:
        """obs uint8 (..., 4, 84, 84) -> rewards float32 (...). `actions` is ignored.

        With `take_statistics` (eval mode), each batch-norm layer first sets its running statistics
        to this batch's (mean and unbiased variance, what a plain average over one pass gives), then
        normalises by them: one pass instead of gathering statistics and evaluating separately.
        """
        assert not (take_statistics and self.training), "take_statistics is an eval-mode pass"
        lead = obs.shape[:-3]
        x = nhwc_frames(obs)
        for i, (conv, norm) in enumerate(zip(self.convs, self.norms)):
            if i == 0:  # conv(x / 255, w) as conv(x, w / 255): saves a pass over the input
                x = FirstConv.apply(x, conv.weight * (1.0 / 255.0), conv.bias, conv.stride)
            else:
                x = conv(x)
            if take_statistics and isinstance(norm, nn.BatchNorm2d):
                # A training-mode pass with momentum 1 sets the running statistics to this
                # batch's mean and unbiased variance (faster than var_mean on channels-last).
                torch.ops.aten.native_batch_norm(x, None, None, norm.running_mean,
                                                 norm.running_var, True, 1.0, norm.eps)
                # That write does not count as an in-place one; the count does, so a net built
                # from these weights (`stacked.weights_version`) sees the statistics changed.
                norm.num_batches_tracked.add_(1)
            # The random-byte mask is a CPU saving; on a GPU F.dropout is already cheap.
            half_on_cpu = self.training and self.dropout == 0.5 and x.device.type == "cpu"
            if half_on_cpu and isinstance(norm, nn.BatchNorm2d):  # the paper's net, training
                norm.num_batches_tracked.add_(1)
                x = NormActDrop.apply(x, norm.weight, norm.bias, norm)
                continue
            x = F.leaky_relu(norm(x), LEAKY_SLOPE)
            if half_on_cpu:
                x = dropout_half(x)
            elif self.dropout > 0.0:
                x = F.dropout(x, self.dropout, self.training)
        x = F.leaky_relu(self.fc(x.flatten(1)), LEAKY_SLOPE)
        return self.out(x).reshape(lead)


def nhwc_frames(obs: torch.Tensor) -> torch.Tensor:
    """uint8 (..., 4, 84, 84), any strides -> uint8 (N, 84, 84, 4), contiguous.

    The overlapping 4-frame windows are gathered into NHWC order as uint8 (a quarter of the bytes
    of floats); a direct strided float copy of them is much slower.
    """
    nhwc = torch.stack([obs[..., c, :, :] for c in range(STACK)], dim=-1)
    return nhwc.reshape(-1, FRAME, FRAME, STACK)


FIRST_CONV_CHUNK = 200  # frames converted to float at a time by FirstConv (200: 22.6 MB)


def _float_chunks(frames: torch.Tensor, dtype: torch.dtype) -> Iterator[tuple[slice, torch.Tensor]]:
    """(rows, float NCHW channels-last view) for each FIRST_CONV_CHUNK frames of uint8 NHWC."""
    for start in range(0, frames.shape[0], FIRST_CONV_CHUNK):
        rows = slice(start, start + FIRST_CONV_CHUNK)
        yield rows, frames[rows].to(dtype).permute(0, 3, 1, 2)


class FirstConv(torch.autograd.Function):
    """The first convolution over uint8 NHWC frames, the same numbers as F.conv2d on their float
    copy, without ever holding that copy whole: forward and backward convert FIRST_CONV_CHUNK
    frames at a time, and backward keeps the uint8 frames. On 800 frames the float input is 90 MB,
    the largest block of a training step, so the trainer's peak is lower this way
    (docs/results.md, "Memory"), for two conversions instead of one. No gradient flows to the
    frames."""

    @staticmethod
    def forward(ctx, frames: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                stride: tuple[int, int]) -> torch.Tensor:
        device = frames.device.type  # under autocast (bf16), as F.conv2d alone would compute
        autocast = torch.is_autocast_enabled(device)
        dtype = torch.get_autocast_dtype(device) if autocast else weight.dtype
        out = torch.cat([F.conv2d(x, weight.to(dtype), None if bias is None else bias.to(dtype),
                                  stride) for _, x in _float_chunks(frames, dtype)])
        ctx.save_for_backward(frames, weight)
        ctx.has_bias, ctx.stride = bias is not None, stride
        return out

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        frames, weight = ctx.saved_tensors
        dtype = grad_out.dtype
        grad_w = torch.zeros_like(weight, dtype=torch.float32)
        grad_b = torch.zeros(weight.shape[0], device=weight.device) if ctx.has_bias else None
        for rows, x in _float_chunks(frames, dtype):
            _, gw, gb = torch.ops.aten.convolution_backward(
                grad_out[rows], x, weight.to(dtype), [weight.shape[0]] if ctx.has_bias else None,
                ctx.stride, [0, 0], [1, 1], False, [0, 0], 1, [False, True, ctx.has_bias])
            grad_w += gw
            if grad_b is not None:
                grad_b += gb
        return (None, grad_w.to(weight.dtype),
                None if grad_b is None else grad_b.to(weight.dtype), None)


class MovingDotRewardNet(nn.Module):
    """Reward net for the MovingDot toy env, on hand features as in the reference reproduction.

    Features: the dot's (x, y) in the newest frame of the stack, found from the pixels as an
    intensity-weighted centroid and scaled to [-1, 1]. An MLP (two hidden layers of 64) maps them to
    one reward per action and the one-hot action picks the taken one. The true reward ("+1 when the
    move brings the dot closer to the centre") is, per action, a step function of one coordinate;
    this head learns it with fewer labels than feeding the one-hot action in beside (x, y).
    """

    def __init__(self, hidden: int = 64) -> None:
        super().__init__()
        self.mlp = nn.Sequential(
            nn.Linear(2, hidden), nn.ReLU(),
            nn.Linear(hidden, hidden), nn.ReLU(),
            nn.Linear(hidden, N_MOVING_DOT_ACTIONS))
        self.register_buffer("coords", torch.arange(FRAME, dtype=torch.float32), persistent=False)

    def dot_position(self, obs: torch.Tensor) -> torch.Tensor:
        """obs uint8 (..., 4, 84, 84) -> (x, y) of the dot in the newest frame, in [-1, 1]."""
        frame = obs[..., -1, :, :].float()  # (..., 84 rows = y, 84 columns = x)
        mass = frame.sum(-1)  # (..., 84): pixel mass of each row
        x_moment = torch.mv(frame.reshape(-1, FRAME), self.coords).reshape(mass.shape)
        total = mass.sum(-1).clamp_min(1e-6)  # an empty frame maps to the corner (-1, -1)
        x = x_moment.sum(-1) / total
        y = (mass @ self.coords) / total
        return torch.stack([x, y], -1) * (2.0 / (FRAME - 1)) - 1.0

    # The parameter-free first stage, which the ensemble computes once per clip and keeps
    # (ensemble.ClipFeatures); `head` is the rest of the net.
    features = dot_position

    def head(self, position: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """position float32 (..., 2), actions int64 (...) -> rewards float32 (...)."""
        per_action = self.mlp(position)  # (..., 5)
        return per_action.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)

    def forward(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """obs uint8 (..., 4, 84, 84), actions int64 (...) -> rewards float32 (...)."""
        return self.head(self.dot_position(obs), actions)


def make_reward_net(kind: str, dropout: float = 0.0, batchnorm: bool = False) -> nn.Module:
    """The reward net for an env kind: "atari" or "moving_dot" (the latter has no dropout or
    batch norm: its hand features leave nothing to regularise)."""
    if kind == "atari":
        return AtariRewardNet(dropout=dropout, batchnorm=batchnorm)
    if kind == "moving_dot":
        return MovingDotRewardNet()
    raise ValueError(f"unknown reward net kind {kind!r} (expected 'atari' or 'moving_dot')")
