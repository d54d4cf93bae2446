"""Reward-predictor weights shared between the trainer process and its consumers (A2C's reward,
labelling's query selection), in place of the earlier reproduction's parameter server."""
from __future__ import annotations

import math
import multiprocessing as mp
from multiprocessing import shared_memory
from multiprocessing.context import BaseContext
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch import nn

PULL_LOCK_TIMEOUT_S = 0.1  # a consumer skips a pull rather than wait longer than this
# The publisher waits this long at most: a consumer killed mid-pull never releases the lock.
PUBLISH_LOCK_TIMEOUT_S = 5.0
_NAME_BYTES = 64  # room for the shared-memory block's name
_ALIGN = 64  # bytes: each tensor starts on a cache line


class SharedWeights:
    """A versioned copy of a module's state_dict in shared memory.

    Made in the supervising process without a module (that process never imports torch) and
    passed to the spawned processes. The trainer's first `publish` lays the state out in a block
    of shared memory and names it here; a consumer attaches on its first `pull` after that. Both
    lay the block out from their own module's state_dict, so they must build the same
    architecture. `pull` copies only when a newer version has been published.
    """

    def __init__(self, ctx: BaseContext | None = None) -> None:
        ctx = ctx or mp.get_context("spawn")
        self._version = ctx.Value("q", 0, lock=False)  # guarded by self._lock
        self._block_name = ctx.Array("c", _NAME_BYTES, lock=False)  # set by the first publish
        # Training progress beside the weights (each has one writer, so no lock): see PredictorPace.
        self._labels_trained = ctx.Value("q", 0, lock=False)  # written by the trainer
        self._consumer_waiting = ctx.Value("b", 0, lock=False)  # written by the consumer
        self._agent_steps = ctx.Value("q", 0, lock=False)  # written by the consumer
        self._lock = ctx.Lock()
        self._seen = 0  # version this handle last pulled
        self._block: shared_memory.SharedMemory | None = None
        self._views: dict[str, Any] | None = None

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state.update(_seen=0, _block=None, _views=None)  # a new process has attached to nothing
        return state

    @property
    def version(self) -> int:
        """How many times weights have been published (0: none yet)."""
        return int(self._version.value)

    @property
    def labels_trained(self) -> int:
        """Labels each member has trained on since the trainer process started (batch x steps)."""
        return int(self._labels_trained.value)

    @labels_trained.setter
    def labels_trained(self, n: int) -> None:
        self._labels_trained.value = n

    @property
    def agent_steps(self) -> int:
        """The consumer's agent steps since it started, as of its latest rollout."""
        return int(self._agent_steps.value)

    @agent_steps.setter
    def agent_steps(self, n: int) -> None:
        self._agent_steps.value = n

    @property
    def consumer_waiting(self) -> bool:
        """True while a consumer is blocked until the trainer has trained more."""
        return bool(self._consumer_waiting.value)

    @consumer_waiting.setter
    def consumer_waiting(self, waiting: bool) -> None:
        self._consumer_waiting.value = int(waiting)

    def publish(self, module: "nn.Module") -> int:
        """Copy `module`'s state_dict into shared memory and bump the version; returns it. If the
        lock stays taken for PUBLISH_LOCK_TIMEOUT_S (its holder died: the run is stopping),
        nothing is published and the version is returned unchanged."""
        import torch

        if not self._lock.acquire(timeout=PUBLISH_LOCK_TIMEOUT_S):
            return int(self._version.value)
        try:
            with torch.no_grad():
                state = module.state_dict()
                if self._views is None:
                    self._create(state)
                for k, shared in self._views.items():
                    shared.copy_(state[k])
                self._version.value += 1
                return int(self._version.value)
        finally:
            self._lock.release()

    def pull(self, module: "nn.Module") -> bool:
        """Copy the shared weights into `module` if a newer version was published since the last
        pull through this handle. Never waits more than PULL_LOCK_TIMEOUT_S: if the trainer is
        mid-publish for that long, returns False and the next pull catches up."""
        import torch

        if self._version.value == self._seen:  # a racy read, rechecked under the lock
            return False
        if not self._lock.acquire(timeout=PULL_LOCK_TIMEOUT_S):
            return False
        try:
            version = int(self._version.value)
            if version == self._seen:
                return False
            state = module.state_dict()
            if self._views is None:
                self._attach(state)
            with torch.no_grad():
                for k, shared in self._views.items():
                    state[k].copy_(shared)
            self._seen = version
            return True
        finally:
            self._lock.release()

    def release(self) -> None:
        """The publisher's last act: remove the block's name (processes attached keep it mapped)."""
        if self._block is not None:
            self._views = None
            self._block.unlink()

    def remove_left_block(self) -> None:
        """In the process that made this handle, once every other has ended: remove the block if
        its publisher died before `release` (else multiprocessing's resource tracker removes it
        at exit, with a warning)."""
        name = self._block_name.value.decode()
        if not name:
            return
        try:
            block = shared_memory.SharedMemory(name=name)
        except FileNotFoundError:
            return  # released, as it should be
        block.close()
        block.unlink()

    def _create(self, state: dict) -> None:
        layout, size = _layout(state)
        self._block = shared_memory.SharedMemory(create=True, size=size)
        self._block_name.value = self._block.name.encode()
        self._views = _views(self._block, layout)

    def _attach(self, state: dict) -> None:
        self._block = shared_memory.SharedMemory(name=self._block_name.value.decode())
        layout, size = _layout(state)
        assert size <= self._block.size, "consumer and trainer built different predictors"
        self._views = _views(self._block, layout)


def _layout(state: dict) -> tuple[dict[str, tuple[int, Any, tuple[int, ...]]], int]:
    """Byte offset, dtype and shape of each tensor of a state_dict in the block; the block size."""
    out, offset = {}, 0
    for k, t in state.items():
        offset = -(-offset // _ALIGN) * _ALIGN
        out[k] = (offset, t.dtype, tuple(t.shape))
        offset += t.numel() * t.element_size()
    return out, max(offset, 1)


def _views(block: shared_memory.SharedMemory, layout: dict) -> dict:
    import torch

    return {k: torch.frombuffer(block.buf, dtype=dtype, count=math.prod(shape),
                                offset=offset).view(shape)
            for k, (offset, dtype, shape) in layout.items()}
