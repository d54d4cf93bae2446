"""The CPU a run spends while a person is away: gathering with the labelling page, nobody answering.

    python -m benchmarks.bench_idle_labelling [--env_id PongNoFrameskip-v4] [--window_s 20]

Starts `run.py gather_initial_prefs ENV --clip_player web` with nobody on the page, and reads each
child's CPU time (/proc) over two windows: while the run still cuts clips (just after it started),
and once nobody has answered for pref_interface.process.IDLE_AFTER_S seconds with pairs enough
waiting, when the agent stops playing and cutting. Prints each process's share of a core in both.
"""
from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

from pref_interface.labellers.web.headless import labelling_run
from pref_interface.process import IDLE_AFTER_S
from runtime.machine import processor
from runtime.script_args import ScriptParser

TICKS = os.sysconf("SC_CLK_TCK")


def children(pid: int) -> list[int]:
    """Every descendant of `pid` (Linux /proc)."""
    out = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            kids = [int(k) for k in (task / "children").read_text().split()]
        except OSError:
            continue
        for kid in kids:
            out += [kid, *children(kid)]
    return out


def cpu_seconds(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def named(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "?"


def shares(pids: dict[int, str], window_s: float) -> dict[str, float]:
    """Each process's CPU seconds per second over the next `window_s`."""
    start = {pid: cpu_seconds(pid) for pid in pids}
    time.sleep(window_s)
    out = {}
    for pid, name in pids.items():
        end = cpu_seconds(pid)
        if start[pid] is not None and end is not None:
            out[name] = out.get(name, 0.0) + (end - start[pid]) / window_s
    return out


def main() -> None:
    parser = ScriptParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env_id", default="PongNoFrameskip-v4")
    parser.add_argument("--window_s", type=float, default=15.0, help="seconds per measurement")
    args = parser.parse_args()
    print(f"# {processor()}; {args.env_id}, nobody on the page")
    with tempfile.TemporaryDirectory() as tmp, open(Path(tmp) / "log.txt", "w+") as log:
        flags = ["gather_initial_prefs", args.env_id, "--n_initial_prefs", "500",
                 "--log_dir", str(Path(tmp) / "run")]
        with labelling_run(flags, log) as (proc, _url):
            deadline = time.monotonic() + 60.0
            while True:  # the agent and labelling have started
                pids = {pid: named(pid) for pid in children(proc.pid)}
                if {"a2c", "labelling"} <= set(pids.values()) or time.monotonic() > deadline:
                    break
                time.sleep(0.5)
            time.sleep(3.0)
            pids[proc.pid] = "main"
            busy = shares(pids, args.window_s)
            # nobody has answered since labelling began
            time.sleep(max(0.0, IDLE_AFTER_S + 5.0 - 3.0 - args.window_s))
            idle = shares(pids, args.window_s)
    print(f"{'process':<16}{'cutting clips':>16}{'idle, nobody answering':>26}")
    for name in sorted(set(busy) | set(idle)):
        print(f"{name:<16}{busy.get(name, 0):>15.0%}{idle.get(name, 0):>26.0%}")
    total_busy, total_idle = sum(busy.values()), sum(idle.values())
    print(f"{'all':<16}{total_busy:>15.0%}{total_idle:>26.0%}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
