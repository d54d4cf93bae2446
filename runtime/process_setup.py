"""Process set-up: how the reward predictor's training processes use memory, a name, ending with
the parent.

Memory: a training step of the Atari predictor allocates and frees blocks of 8-35 MB (800
frames of 16x26x26 floats are 35 MB) several times over. glibc's default maps each block above
a threshold it adapts (up to 32 MB) afresh and unmaps it on free, so every step faulted in
hundreds of MB of 4 KB pages, and serves the rest from a heap that fragments and keeps growing.
The trainer therefore starts with glibc tunables (`TRAINER_MALLOC_TUNABLES`): blocks of 16 MB
and more are mapped afresh, in 2 MB pages (far fewer faults), and given back on free; smaller
ones reuse the heap. Or, with `reuse_freed_memory`, it serves everything from a heap it never
trims: the fastest steps, but the heap's fragments make the process hold more memory
(docs/results.md, "Memory").
"""
from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import os
from typing import Iterator

_M_TRIM_THRESHOLD = -1  # mallopt parameters, from glibc's malloc.h
_M_MMAP_MAX = -4
_NEVER_TRIM = 2**31 - 1  # an int: mallopt takes one
# Read by glibc (2.35 and later) when a process starts: 2 MB pages for what malloc maps (with
# transparent huge pages in "madvise" mode, the usual default), and a fixed 16 MB mmap threshold.
TRAINER_MALLOC_TUNABLES = "glibc.malloc.hugetlb=1:glibc.malloc.mmap_threshold=16777216"
# What a run's children import, imported once by the fork server they start from, so that each
# starts at once instead of importing torch afresh, as a spawned child does (docs/results.md,
# "Starting a run's processes").
CHILD_PRELOAD = ["torch", "a2c.train", "pref_interface.process", "reward_predictor.process"]
_PR_SET_PDEATHSIG = 1  # prctl options, from linux/prctl.h
_PR_SET_NAME = 15
_NAME_BYTES = 15  # the kernel keeps the first 15 bytes of a process name


@functools.lru_cache(maxsize=None)
def _libc_function(name: str):
    # Cached: find_library runs `ldconfig -p` in a child process every time it is called.
    try:
        return getattr(ctypes.CDLL(ctypes.util.find_library("c")), name)
    except (OSError, AttributeError, TypeError):
        return None


def reuse_freed_memory() -> bool:
    """Tell glibc's malloc to serve large blocks from the heap and keep what is freed. Returns
    False where the C library is not glibc (nothing changes there)."""
    mallopt = _libc_function("mallopt")
    if mallopt is None:
        return False
    return bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, _NEVER_TRIM))


def run_context():
    """The multiprocessing context of a run's processes: forked from a server that has the
    children's modules imported (started with the first child, ending with this process). A child
    that needs its own environment from its first instruction (the trainer's malloc tunables) is
    spawned instead (`spawn_context`)."""
    import multiprocessing as mp

    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(CHILD_PRELOAD)
    return ctx


def spawn_context():
    """A fresh interpreter per child: what a child started with its own environment needs."""
    import multiprocessing as mp

    return mp.get_context("spawn")


def trainer_malloc_environ() -> dict[str, str]:
    """The environment variables a reward-predictor training process starts with (see the module
    docstring); none when the user has set GLIBC_TUNABLES (theirs are kept)."""
    return {} if "GLIBC_TUNABLES" in os.environ else {"GLIBC_TUNABLES": TRAINER_MALLOC_TUNABLES}


@contextlib.contextmanager
def child_environ(extra: dict[str, str]) -> Iterator[None]:
    """Set `extra` in this process's environment for the duration, for a child started within
    (a spawned child copies the environment as it starts); the previous values come back after."""
    saved = {k: os.environ.get(k) for k in extra}
    os.environ.update(extra)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def name_process(name: str) -> bool:
    """Show `name` (its first 15 bytes) as this process's name in `ps`, `top` and
    /proc/PID/comm, so a run's processes can be told apart. False where Linux's prctl is missing."""
    prctl = _libc_function("prctl")
    return prctl is not None and prctl(_PR_SET_NAME, name.encode()[:_NAME_BYTES], 0, 0, 0) == 0


def die_with_parent() -> bool:
    """Have the kernel send this process SIGTERM when its parent dies, so a run's children never
    outlive a supervisor that was killed outright (SIGKILL gives it no chance to stop them).
    False where Linux's prctl is missing."""
    import signal

    prctl = _libc_function("prctl")
    return prctl is not None and prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0) == 0
