"""Reward-predictor weights shared between the trainer process and its consumers (the A2C
process), in place of the earlier reproduction's parameter server."""
from __future__ import annotations

import multiprocessing as mp
from multiprocessing.context import BaseContext

import torch
from torch import nn

PULL_LOCK_TIMEOUT_S = 0.1  # a consumer skips a pull rather than wait longer than this


class SharedWeights:
    """A versioned copy of a module's state_dict in shared memory.

    Build it in the parent from a template module (the same architecture the trainer and the
    consumers build), then pass it to spawned processes as a Process argument. The trainer calls
    `publish`; consumers call `pull` once per rollout, which copies only when a newer version has
    been published.
    """

    def __init__(self, template: nn.Module, ctx: BaseContext | None = None) -> None:
        ctx = ctx or mp.get_context("spawn")
        with torch.no_grad():
            self.tensors = {k: v.detach().clone().share_memory_()
                            for k, v in template.state_dict().items()}
        self._version = ctx.Value("q", 0, lock=False)  # guarded by self._lock
        # Training progress beside the weights (each has one writer, so no lock): see PredictorPace.
        self._labels_trained = ctx.Value("q", 0, lock=False)  # written by the trainer
        self._consumer_waiting = ctx.Value("b", 0, lock=False)  # written by the consumer
        self._lock = ctx.Lock()
        self._seen = -1  # version this handle last pulled; -1: never, so the first pull copies

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_seen"] = -1  # a new process has pulled nothing yet
        return state

    @property
    def version(self) -> int:
        """How many times weights have been published (0: still the template's)."""
        return int(self._version.value)

    @property
    def labels_trained(self) -> int:
        """Labels each member has trained on since the trainer process started (batch x steps)."""
        return int(self._labels_trained.value)

    @labels_trained.setter
    def labels_trained(self, n: int) -> None:
        self._labels_trained.value = n

    @property
    def consumer_waiting(self) -> bool:
        """True while a consumer is blocked until the trainer has trained more."""
        return bool(self._consumer_waiting.value)

    @consumer_waiting.setter
    def consumer_waiting(self, waiting: bool) -> None:
        self._consumer_waiting.value = int(waiting)

    @torch.no_grad()
    def publish(self, module: nn.Module) -> int:
        """Copy `module`'s state_dict into shared memory and bump the version; returns it."""
        state = module.state_dict()
        with self._lock:
            for k, shared in self.tensors.items():
                shared.copy_(state[k])
            self._version.value += 1
            return int(self._version.value)

    @torch.no_grad()
    def pull(self, module: nn.Module) -> bool:
        """Copy the shared weights into `module` if a newer version was published since the last
        pull through this handle. Never waits more than PULL_LOCK_TIMEOUT_S: if the trainer is
        mid-publish for that long, returns False and the next pull catches up."""
        if self._version.value == self._seen:  # a racy read, rechecked under the lock
            return False
        if not self._lock.acquire(timeout=PULL_LOCK_TIMEOUT_S):
            return False
        try:
            version = int(self._version.value)
            if version == self._seen:
                return False
            state = module.state_dict()
            for k, shared in self.tensors.items():
                state[k].copy_(shared)
            self._seen = version
            return True
        finally:
            self._lock.release()
