"""Running reward normalisation (App. A.2: rewards rescaled to mean 0, std 0.05 for Atari)."""
from __future__ import annotations

import torch
from torch import nn

from reward_predictor.config import REWARD_STD


class RunningNormaliser(nn.Module):
    """Maps raw predictions r to (r - mean) / std * target_std with running statistics.

    The statistics are buffers, so they travel in `state_dict` (checkpoints, shared weights).
    Batches are merged with the parallel-variance formula (Chan et al.). With `max_count` set,
    the accumulated count is capped there, so older batches fade geometrically and the statistics
    follow the predictor as it keeps learning (the predictor is trained throughout the run).
    """

    count: torch.Tensor
    mean: torch.Tensor
    var: torch.Tensor

    def __init__(self, target_std: float = REWARD_STD, max_count: float | None = 1e5,
                 eps: float = 1e-8) -> None:
        super().__init__()
        self.target_std = target_std
        self.max_count = max_count
        self.eps = eps
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))
        self.register_buffer("mean", torch.zeros((), dtype=torch.float64))
        self.register_buffer("var", torch.ones((), dtype=torch.float64))

    @torch.no_grad()
    def reset(self) -> None:
        """Forget the statistics (e.g. before refitting to a net whose outputs changed)."""
        self.count.zero_()
        self.mean.zero_()
        self.var.fill_(1.0)

    @torch.no_grad()
    def update(self, raw: torch.Tensor) -> None:
        """Fold a batch of raw predictions (any shape) into the running statistics."""
        x = raw.detach().reshape(-1).to(torch.float64)
        n = x.numel()
        if n == 0:
            return
        b_mean = x.mean()
        b_var = x.var(unbiased=False)
        total = self.count + n
        d = b_mean - self.mean
        m2 = self.var * self.count + b_var * n + d * d * self.count * n / total
        self.mean += d * n / total
        self.var.copy_(m2 / total)
        self.count.copy_(total if self.max_count is None else total.clamp(max=self.max_count))

    def forward(self, raw: torch.Tensor) -> torch.Tensor:
        """Normalised rewards, same shape and dtype as `raw`."""
        scale = self.target_std / torch.sqrt(self.var + self.eps)
        return ((raw - self.mean) * scale).to(raw.dtype)
