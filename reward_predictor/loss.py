"""The preference model: Bradley-Terry on summed clip rewards, with random-response noise."""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from reward_predictor.config import LABEL_NOISE



def preference_log_probs(delta: torch.Tensor, noise: float = LABEL_NOISE
                         ) -> tuple[torch.Tensor, torch.Tensor]:
    """log P'[left preferred], log P'[right preferred] for return differences `delta`.

    P = sigmoid(delta) (Bradley-Terry, Sec. 2.2.3) and P' = noise/2 + (1 - noise) * P, mixed in
    probability space before the log so that a confidently contradicted label costs at most
    -log(noise/2) and its gradient fades instead of saturating at 1.
    """
    if noise == 0.0:
        return F.logsigmoid(delta), F.logsigmoid(-delta)
    assert 0.0 < noise <= 1.0, noise
    floor = torch.full_like(delta, math.log(noise / 2))
    if noise == 1.0:
        return floor, floor
    keep = math.log1p(-noise)
    return (torch.logaddexp(floor, keep + F.logsigmoid(delta)),
            torch.logaddexp(floor, keep + F.logsigmoid(-delta)))


def label_losses(delta: torch.Tensor, mu: torch.Tensor, noise: float = LABEL_NOISE) -> torch.Tensor:
    """Each label's cross-entropy under the noisy Bradley-Terry model, from the return
    differences `delta` (left minus right) and the labels `mu` (Sec. 2.2.3)."""
    log_left, log_right = preference_log_probs(delta, noise)
    mu = mu.to(delta.dtype)
    return -(mu * log_left + (1.0 - mu) * log_right)


def preference_loss(ret_left: torch.Tensor, ret_right: torch.Tensor, mu: torch.Tensor,
                    noise: float = LABEL_NOISE) -> tuple[torch.Tensor, float]:
    """Cross-entropy of the labels under the noisy Bradley-Terry model (Sec. 2.2.3).

    ret_left, ret_right: (B,) summed predicted rewards of each clip; mu: (B,) probability that
    left is preferred (1, 0 or 0.5 for a tie). Returns (mean loss, accuracy), where accuracy is the
    fraction of non-tie labels whose preferred side has the larger predicted return (NaN when every
    label is a tie).
    """
    delta = ret_left - ret_right
    loss = label_losses(delta, mu, noise).mean()
    with torch.no_grad():
        decisive = mu != 0.5
        n = int(decisive.sum())
        correct = ((delta > 0) & (mu > 0.5)) | ((delta < 0) & (mu < 0.5))
        accuracy = float(correct[decisive].sum()) / n if n else float("nan")
    return loss, accuracy


def rank_targets(ranks: np.ndarray, n_classes: int) -> np.ndarray:
    """rl-teacher-atari's regression target for a sorted clip: its class's rank (0 the worst)
    through the standard normal quantile, Phi^-1((rank + 0.5) / n_classes)."""
    from statistics import NormalDist

    quantile = NormalDist().inv_cdf
    return np.array([quantile((r + 0.5) / n_classes) for r in ranks], np.float32)


def rank_loss(returns: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean squared error of clips' summed predicted rewards against their rank targets."""
    return (returns - targets.to(returns.dtype)).pow(2).mean()
