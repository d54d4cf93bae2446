"""The members of an Atari ensemble in eval mode as one net, for the agent's reward.

Every member scores the same observations, so the first convolution runs once with all members'
filters (16 per member) over the shared input, the later ones as grouped convolutions (one group
per member), and the fully connected layers as one batched product. In eval mode batch norm is a
fixed affine map per channel, so it is folded into the convolution before it; dropout is off.
The result is each member's raw reward, the same numbers as the members run one by one.
"""
from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from reward_predictor.nets import LEAKY_SLOPE, AtariRewardNet, nhwc_frames


def weights_version(members: Sequence[nn.Module]) -> tuple[int, ...]:
    """Changes whenever any parameter or buffer of `members` is modified in place (an optimiser
    step, `load_state_dict`, batch norm's batch count, which `AtariRewardNet` bumps as it takes
    new statistics): torch counts in-place writes per tensor."""
    return tuple(t._version for net in members for t in (*net.parameters(), *net.buffers()))


class StackedAtariNets:
    """Eval-mode raw rewards of several `AtariRewardNet`s at once; a snapshot of their weights
    when built (rebuild it after they change: see `weights_version`)."""

    def __init__(self, members: Sequence[AtariRewardNet]) -> None:
        assert all(isinstance(net, AtariRewardNet) for net in members), members
        self.ensemble_size = len(members)
        self.convs = []  # (weight, bias, stride, groups) per layer, batch norm folded in
        with torch.no_grad():
            for i in range(len(members[0].convs)):
                weights, biases = zip(*(_folded_conv(net.convs[i], net.norms[i])
                                        for net in members))
                weight = torch.cat(weights)
                if i == 0:
                    weight = weight / 255.0  # the frames enter as bytes (AtariRewardNet.forward)
                self.convs.append((weight.contiguous(memory_format=torch.channels_last),
                                   torch.cat(biases), members[0].convs[i].stride,
                                   1 if i == 0 else self.ensemble_size))
            self.fc_weight = torch.stack([net.fc.weight for net in members]).transpose(1, 2)
            self.fc_bias = torch.stack([net.fc.bias for net in members]).unsqueeze(1)
            self.out_weight = torch.stack([net.out.weight[0] for net in members]).unsqueeze(1)
            self.out_bias = torch.stack([net.out.bias for net in members])

    @torch.no_grad()
    def __call__(self, obs: torch.Tensor) -> torch.Tensor:
        """obs uint8 (N, 4, 84, 84) -> raw rewards float (ensemble_size, N), in the autocast dtype
        when autocast is on (as each net alone would compute them)."""
        device = obs.device.type
        dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) \
            else self.fc_weight.dtype
        x = nhwc_frames(obs).to(dtype).permute(0, 3, 1, 2)  # NCHW view of channels-last
        for weight, bias, stride, groups in self.convs:
            x = F.leaky_relu(F.conv2d(x, weight.to(dtype), bias.to(dtype), stride, groups=groups),
                             LEAKY_SLOPE)
        n = x.shape[0]
        # Each member's 16 channels flattened in (C, H, W) order, as its own fc layer reads them.
        x = x.contiguous().view(n, self.ensemble_size, -1).transpose(0, 1)  # (M, N, 784)
        hidden = F.leaky_relu(torch.baddbmm(self.fc_bias, x, self.fc_weight), LEAKY_SLOPE)
        return (hidden * self.out_weight).sum(-1) + self.out_bias  # (M, N)


def _folded_conv(conv: nn.Conv2d, norm: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    """(weight, bias) of `conv` followed by `norm` in eval mode (batch norm or identity)."""
    weight = conv.weight.detach()
    bias = conv.bias.detach() if conv.bias is not None else weight.new_zeros(weight.shape[0])
    if isinstance(norm, nn.BatchNorm2d):
        scale = norm.weight / torch.sqrt(norm.running_var + norm.eps)
        return weight * scale.view(-1, 1, 1, 1), (bias - norm.running_mean) * scale + norm.bias
    return weight, bias
