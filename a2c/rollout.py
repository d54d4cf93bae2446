"""The rollout loop: step N envs for T steps, keeping the forward pass for the update.

The policy's parameters do not change during a rollout, so the forward pass that picks the actions
is the same one the A2C loss needs: keeping its graph saves running the network twice per step.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterator, Protocol

import numpy as np
import torch
from torch.distributions import Categorical

from envs.vec_env import EpisodeRecord, VecEnv

# A reward function replaces the env's reward: uint8 obs (B, 4, 84, 84) and int64 actions (B,)
# -> float32 rewards (B,). It is called once per rollout on all T * N steps at once.
RewardFn = Callable[[np.ndarray, np.ndarray], np.ndarray]


class RolloutObserver(Protocol):
    """Sees every rollout (e.g. to cut clips for labelling); returns quickly (only a clip source
    that gathers may hold the agent, while labelling wants no clips: clips/observer.py). The
    rollout's arrays are reused by the next one: it copies what it keeps."""

    def __call__(self, rollout: "Rollout") -> None: ...

    # An observer may also have `close()`, called once when the agent stops (a2c/loop_side.py).


@dataclass
class Rollout:
    obs: np.ndarray  # uint8 (T + 1, N, 4, 84, 84); obs[t] is the observation actions[t] was taken on
    actions: np.ndarray  # int64 (T, N)
    true_rewards: np.ndarray  # float32 (T, N): the game's own reward
    rewards: np.ndarray  # float32 (T, N): the reward A2C trains on
    dones: np.ndarray  # bool (T, N): the episode ended on step t; obs[t + 1] starts a new one
    finished: list[EpisodeRecord] = field(default_factory=list)
    logits: torch.Tensor | None = None  # (T, N, A), with graph
    values: torch.Tensor | None = None  # (T, N), with graph
    last_value: torch.Tensor | None = None  # (N,), V(obs[T]), no graph


class RolloutCollector:
    """Steps a VecEnv with a policy; rewards come from the env (sign-clipped) or from `reward_fn`."""

    def __init__(self, env: VecEnv, policy: torch.nn.Module, n_steps: int,
                 reward_fn: RewardFn | None = None, seed: int = 0, bf16: bool = False):
        """The policy may live on a GPU: observations go to its device, actions come back."""
        self.env = env
        self.policy = policy
        self.n_steps = n_steps
        self.reward_fn = reward_fn
        n = env.num_envs
        self.obs = np.empty((n_steps + 1, n, 4, 84, 84), dtype=np.uint8)
        self.obs[0] = env.reset(seed=seed)
        self.collected = False  # once true, obs[T] (the last rollout's next one) starts the next
        self.device = next(policy.parameters()).device
        self.generator = torch.Generator(self.device).manual_seed(seed)
        self.bf16 = bf16
        self.train_returns = TrainReturns(n)

    def collect(self, keep_graph: bool = True) -> Rollout:
        """One rollout; with `keep_graph=False` (acting without learning) no autograd graph is
        built and the logits and values come back detached. Its `obs` stays as collected until
        the next call."""
        with torch.set_grad_enabled(keep_graph):
            return self._collect()

    def autocast(self) -> torch.autocast:
        """bfloat16 autocast where the policy computes in bf16 (`bf16`), off otherwise."""
        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16)

    def _collect(self) -> Rollout:
        T, n = self.n_steps, self.env.num_envs
        if self.collected:
            self.obs[0] = self.obs[T]
        self.collected = True
        actions = np.empty((T, n), dtype=np.int64)
        true_rewards = np.empty((T, n), dtype=np.float32)
        dones = np.empty((T, n), dtype=bool)
        logits, values, finished = [], [], []
        for t in range(T):
            # bfloat16 autocast: the forward (and so its backward) runs the convolutions in bf16
            # with fp32 weights; the loss is computed in fp32 from the upcast outputs.
            with self.autocast():
                step_logits, step_value = self.policy(self._to_device(self.obs[t]))
            step_logits, step_value = step_logits.float(), step_value.float()
            probs = torch.softmax(step_logits.detach(), dim=-1)
            action = torch.multinomial(probs, 1, generator=self.generator).squeeze(1).cpu().numpy()
            result = self.env.step(action)
            self.obs[t + 1] = result.obs
            actions[t], true_rewards[t], dones[t] = action, result.rewards, result.dones
            logits.append(step_logits)
            values.append(step_value)
            finished.extend(result.finished)
        with torch.no_grad(), self.autocast():
            last_value = self.policy(self._to_device(self.obs[T]))[1].float()
        if self.reward_fn is None:
            rewards = np.sign(true_rewards)  # DeepMind reward clipping for true-reward training
        else:
            rewards = self.reward_fn(self.obs[:T].reshape(T * n, 4, 84, 84),
                                     actions.reshape(T * n)).reshape(T, n).astype(np.float32)
        rollout = Rollout(self.obs, actions, true_rewards, rewards, dones, finished,
                          torch.stack(logits), torch.stack(values), last_value)
        self.train_returns(rollout)
        return rollout

    def _to_device(self, obs: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(obs).to(self.device, non_blocking=True)


class TrainReturns:
    """Each env's running sum of the reward the agent trains on, attached to the records of
    the episodes that end as their `train_return` (the "predicted return" when it is r̂)."""

    def __init__(self, n_envs: int) -> None:
        self.sums = np.zeros(n_envs, dtype=np.float64)

    def __call__(self, rollout: Rollout) -> None:
        """Account the rollout's rewards, each step's before the episodes that end on it."""
        for t, ends in episode_ends(rollout):
            self.sums += rollout.rewards[t]
            for i, record in ends:
                record.train_return = float(self.sums[i])
                self.sums[i] = 0.0


def episode_ends(rollout: Rollout) -> Iterator[tuple[int, list[tuple[int, EpisodeRecord]]]]:
    """Each step t of a rollout with the episodes that ended on it, as (env index, record): the
    rollout's `finished` records come in step order and, within a step, in env order."""
    records = iter(rollout.finished)
    for t in range(rollout.dones.shape[0]):
        yield t, [(int(i), next(records)) for i in np.flatnonzero(rollout.dones[t])]


def sample_actions(policy: torch.nn.Module, obs: np.ndarray, greedy: bool = False) -> np.ndarray:
    """Actions for a batch of observations without building a graph (evaluation, watching)."""
    with torch.no_grad():
        logits, _ = policy(torch.from_numpy(obs).to(next(policy.parameters()).device))
    if greedy:
        return logits.argmax(-1).cpu().numpy()
    return Categorical(logits=logits).sample().cpu().numpy()
