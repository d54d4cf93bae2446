"""Process set-up: keep freed memory for reuse (where big tensors come and go), carry a name,
end with the parent.

Freed memory: glibc serves every allocation above 32 MB (the largest threshold it adapts to) with a fresh mmap
and unmaps it on free. The reward predictor's activations for one batch (800 frames of 16x26x26
floats) are 35 MB each, so every training step faulted in hundreds of MB of new pages: 30% of a
step on the 2-core test machine (docs/results.md). Heap-only allocation with no trimming makes
the process hold its peak instead, which is what a step needs again a moment later; the heap's
fragments add about 100 MB to that peak, so only the Atari predictor's training processes do it.
"""
from __future__ import annotations

import ctypes
import ctypes.util

_M_TRIM_THRESHOLD = -1  # mallopt parameters, from glibc's malloc.h
_M_MMAP_MAX = -4
_NEVER_TRIM = 2**31 - 1  # an int: mallopt takes one
_PR_SET_PDEATHSIG = 1  # prctl options, from linux/prctl.h
_PR_SET_NAME = 15
_NAME_BYTES = 15  # the kernel keeps the first 15 bytes of a process name


def _libc_function(name: str):
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
