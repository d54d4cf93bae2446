"""The A2C update rule (Mnih et al. 2016, synchronous), with the paper's hyperparameters (App. A.2;
those it does not give are OpenAI baselines' A2C's: a2c/config.py)."""
from __future__ import annotations

import torch
from torch import nn
from torch.distributions import Categorical

from a2c.config import A2CConfig
from a2c.optim import make_optimizer


def discounted_returns(rewards: torch.Tensor, dones: torch.Tensor, last_value: torch.Tensor,
                       gamma: float) -> torch.Tensor:
    """n-step returns, (T, N): R_t = r_t + gamma * (1 - done_t) * R_{t+1}, R_T = V(s_T).

    dones[t] means the episode ended on step t, so nothing after it is bootstrapped into R_t.
    """
    returns = torch.empty_like(rewards)
    running = last_value
    for t in reversed(range(rewards.shape[0])):
        running = rewards[t] + gamma * (1.0 - dones[t].float()) * running
        returns[t] = running
    return returns


def a2c_loss(logits: torch.Tensor, values: torch.Tensor, actions: torch.Tensor,
             returns: torch.Tensor, ent_coef: float, vf_coef: float
             ) -> tuple[torch.Tensor, dict[str, float]]:
    """Policy-gradient loss with the value baseline, value MSE and entropy bonus; any leading shape."""
    dist = Categorical(logits=logits)
    advantages = (returns - values).detach()
    policy_loss = -(dist.log_prob(actions) * advantages).mean()
    value_loss = (returns - values).pow(2).mean()
    entropy = dist.entropy().mean()
    loss = policy_loss + vf_coef * value_loss - ent_coef * entropy
    return loss, {"policy_loss": policy_loss.item(), "value_loss": value_loss.item(),
                  "entropy": entropy.item()}


class A2C:
    """Consumes one rollout's forward pass and applies one RMSProp step."""

    def __init__(self, policy: nn.Module, config: A2CConfig):
        self.policy = policy
        self.config = config
        self.optimizer = make_optimizer(config.optimizer, policy.parameters(), config.lr,
                                        config.rms_alpha, config.rms_eps)

    def learning_rate(self, timesteps: int) -> float:
        """The rate at `timesteps` agent steps: the warm-up's rise, then the linear decay."""
        c = self.config
        lr = c.lr
        if c.lr_warmup_timesteps:
            lr *= min(1.0, timesteps / c.lr_warmup_timesteps)
        if c.lr_zero_timesteps:
            lr *= max(0.0, 1.0 - timesteps / c.lr_zero_timesteps)
        return lr

    def update(self, logits: torch.Tensor, values: torch.Tensor, actions: torch.Tensor,
               rewards: torch.Tensor, dones: torch.Tensor, last_value: torch.Tensor,
               timesteps: int) -> dict[str, float]:
        """One gradient step from a rollout whose logits/values (T, N, ...) still hold their graph."""
        c = self.config
        device = values.device  # the rollout's tensors may come from the CPU
        actions, rewards, dones = actions.to(device), rewards.to(device), dones.to(device)
        returns = discounted_returns(rewards, dones, last_value, c.gamma)
        loss, stats = a2c_loss(logits, values, actions, returns, c.ent_coef, c.vf_coef)
        lr = self.learning_rate(timesteps)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        # the norm before clipping: a blow that RMSProp turns into a large step shows here
        grad_norm = nn.utils.clip_grad_norm_(self.policy.parameters(), c.max_grad_norm)
        self.optimizer.step()
        stats["grad_norm"] = float(grad_norm)  # read after the step: no wait for a GPU before it
        stats["learning_rate"] = lr
        return stats
