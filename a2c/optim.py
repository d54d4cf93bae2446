"""RMSProp as TensorFlow 1 computes it: the optimiser of OpenAI baselines' A2C, the paper's agent.

TensorFlow's RMSProp starts each weight's mean square at 1 and adds epsilon inside the square root:

    ms <- alpha * ms + (1 - alpha) * g^2,    w <- w - lr * g / sqrt(ms + eps)

PyTorch's `torch.optim.RMSprop` starts the mean square at 0 and adds epsilon outside the root,
lr * g / (sqrt(ms) + eps). With A2C's eps of 1e-5 and gradients clipped to a global norm of 0.5
(at most ~4e-4 per weight, root mean square, over the Nature CNN's 1.7M weights), TensorFlow's
steps shrink with the gradient below the sqrt(1e-5) ~ 3e-3 floor, while PyTorch's move each weight
by about lr whatever the size of its gradient.
Stable-Baselines3 documents the PyTorch form as less stable for A2C. TensorFlow's starting mean
square of 1 also makes the first ~1,000 updates tiny, as it decays by alpha per update
(docs/experiments.md, "The A2C optimiser").
"""
from __future__ import annotations

from typing import Iterable

import torch

from a2c.config import OPTIMIZERS


class RMSpropTF(torch.optim.Optimizer):
    """RMSProp with TensorFlow 1's mean-square initialisation (ones) and epsilon placement (inside
    the root). No momentum, no centring: what baselines' A2C used. Its state uses PyTorch
    RMSprop's names (`step`, `square_avg`), so a checkpoint of either loads into the other."""

    def __init__(self, params: Iterable[torch.Tensor], lr: float = 7e-4, alpha: float = 0.99,
                 eps: float = 1e-5) -> None:
        if lr < 0 or not 0 <= alpha < 1 or eps < 0:
            raise ValueError(f"RMSpropTF: bad lr {lr}, alpha {alpha} or eps {eps}")
        super().__init__(params, {"lr": lr, "alpha": alpha, "eps": eps})

    @torch.no_grad()
    def step(self, closure=None):  # noqa: ANN001 - torch's Optimizer signature
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr, alpha, eps = group["lr"], group["alpha"], group["eps"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = torch.zeros((), dtype=torch.float32)
                    state["square_avg"] = torch.ones_like(p, memory_format=torch.preserve_format)
                state["step"] += 1
                square_avg = state["square_avg"]
                square_avg.mul_(alpha).addcmul_(p.grad, p.grad, value=1 - alpha)
                p.addcdiv_(p.grad, square_avg.add(eps).sqrt_(), value=-lr)
        return loss


def make_optimizer(name: str, params: Iterable[torch.Tensor], lr: float, alpha: float,
                   eps: float) -> torch.optim.Optimizer:
    """`rmsprop_tf` (baselines' A2C, the paper's) or `rmsprop_torch` (`torch.optim.RMSprop`)."""
    if name == "rmsprop_tf":
        return RMSpropTF(params, lr=lr, alpha=alpha, eps=eps)
    if name == "rmsprop_torch":
        return torch.optim.RMSprop(params, lr=lr, alpha=alpha, eps=eps)
    raise ValueError(f"unknown optimizer {name!r}: one of {OPTIMIZERS}")


def load_state_keeping_settings(optimizer: torch.optim.Optimizer, state_dict: dict) -> None:
    """Load a saved optimiser state (per-weight statistics, step counts) but keep `optimizer`'s own
    settings, so that a run saved with one RMSProp resumes with the other (`--optimizer`)."""
    groups = [{**{k: v for k, v in current.items() if k != "params"}, "params": saved["params"]}
              for current, saved in zip(optimizer.state_dict()["param_groups"],
                                        state_dict["param_groups"], strict=True)]
    optimizer.load_state_dict({**state_dict, "param_groups": groups})
