"""Reward networks r̂(o, a): one scalar per observation.

Both nets accept observations with any leading batch dimensions, uint8 (..., 4, 84, 84), and
return float32 (...). A strided (non-contiguous) view is fine: the ensemble passes the
overlapping 4-frame windows of a segment without materialising them as uint8 first.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

STACK = 4
FRAME = 84
N_MOVING_DOT_ACTIONS = 5  # 0 noop, 1 down, 2 right, 3 up, 4 left
LEAKY_SLOPE = 0.01  # App. A.2: leaky ReLU, alpha 0.01

# Byte value -> its 8 bits as dropout multipliers {0, 2}: one random byte gives 8 mask entries.
_HALF_MASK_TABLE = ((torch.arange(256).unsqueeze(-1) >> torch.arange(8)) & 1).float() * 2.0


def dropout_half(x: torch.Tensor) -> torch.Tensor:
    """Dropout with p = 0.5 in training mode, the same distribution as F.dropout(x, 0.5).

    Every bit of a uniform random byte is an independent fair coin, so one random draw serves 8
    entries; drawing a float per entry (bernoulli_) was ~28% of a train step. The mask takes the
    memory layout of `x` (entries are i.i.d., so any layout is the same distribution).
    """
    n = x.numel()
    bytes_ = torch.randint(0, 256, ((n + 7) // 8,), dtype=torch.int64)
    mask = _HALF_MASK_TABLE.index_select(0, bytes_).view(-1)[:n]
    return x * mask.as_strided(x.shape, x.stride())


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
        # Channels-last (NHWC) activations make oneDNN's CPU convolutions ~25% faster here.
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
        x = _channels_last_float(obs)
        for i, (conv, norm) in enumerate(zip(self.convs, self.norms)):
            if i == 0:  # conv(x / 255, w) as conv(x, w / 255): saves a pass over the input
                x = F.conv2d(x, conv.weight * (1.0 / 255.0), conv.bias, conv.stride)
            else:
                x = conv(x)
            if take_statistics and isinstance(norm, nn.BatchNorm2d):
                var, mean = torch.var_mean(x, dim=(0, 2, 3), correction=1)
                norm.running_mean.copy_(mean)
                norm.running_var.copy_(var)
            x = F.leaky_relu(norm(x), LEAKY_SLOPE)
            # The random-byte mask is a CPU saving; on a GPU F.dropout is already cheap.
            if self.training and self.dropout == 0.5 and x.device.type == "cpu":
                x = dropout_half(x)
            elif self.dropout > 0.0:
                x = F.dropout(x, self.dropout, self.training)
        x = F.leaky_relu(self.fc(x.flatten(1)), LEAKY_SLOPE)
        return self.out(x).reshape(lead)


def _channels_last_float(obs: torch.Tensor) -> torch.Tensor:
    """uint8 (..., 4, 84, 84), any strides -> float32 (N, 4, 84, 84) in channels-last memory.

    The stack is gathered into NHWC order as uint8 first (a quarter of the bytes), then converted
    in one contiguous pass: a direct strided float copy of the overlapping windows took 4x longer.
    """
    nhwc = torch.stack([obs[..., c, :, :] for c in range(STACK)], dim=-1)
    return nhwc.reshape(-1, FRAME, FRAME, STACK).to(torch.float32).permute(0, 3, 1, 2)


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

    def forward(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """obs uint8 (..., 4, 84, 84), actions int64 (...) -> rewards float32 (...)."""
        per_action = self.mlp(self.dot_position(obs))  # (..., 5)
        return per_action.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)


def make_reward_net(kind: str, dropout: float = 0.0, batchnorm: bool = False) -> nn.Module:
    """The reward net for an env kind: "atari" or "moving_dot" (the latter has no dropout or
    batch norm: its hand features leave nothing to regularise)."""
    if kind == "atari":
        return AtariRewardNet(dropout=dropout, batchnorm=batchnorm)
    if kind == "moving_dot":
        return MovingDotRewardNet()
    raise ValueError(f"unknown reward net kind {kind!r} (expected 'atari' or 'moving_dot')")
