"""The machine a figure or a run came from, in one line (figures are compared only from one
machine: processors differ severalfold in bf16 speed, docs/results.md)."""
from __future__ import annotations

import os
from pathlib import Path

# The flags that matter here, fastest first: bf16 convolutions are fastest with AMX, then with
# AVX512-BF16; AVX512 without bf16 (some Intel Xeons) computes in fp32, with wider vectors than
# AVX2.
FLAGS_NAMED = ("amx_bf16", "avx512_bf16", "avx512f", "avx2")


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity; all of them where that is unknown)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def processor(cpuinfo: str | None = None) -> str:
    """E.g. "AMD EPYC, 2 cores, avx512_bf16": the CPU's model name, the cores this process may
    use, and the fastest of FLAGS_NAMED it has (from /proc/cpuinfo, or the text given)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = ""
    model, flags = "unknown CPU", set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and model == "unknown CPU":
            model = value.strip()
        elif key.strip() == "flags" and not flags:
            flags = set(value.split())
    cores = usable_cores()
    best = next((f for f in FLAGS_NAMED if f in flags), None)
    return f"{model}, {cores} cores" + (f", {best}" if best else "")
