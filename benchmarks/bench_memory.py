"""Memory of the preference loop: each process's resident memory over a run, through the real
command line.

Starts `run.py train_policy_with_preferences ENV --synthetic_prefs` for --steps agent steps (a
short start: 64 initial labels, one pretraining epoch) and
every --every_s seconds reads, for each of its processes (named in /proc by runtime/process_setup),
the resident set (RSS; shared library pages count in every process that maps them) and the
proportional set (PSS; shared pages split between the processes that share them), with the
number of labels stored so far and the agent steps of run.py's last status line. Prints the
figures at the label counts asked for, and how much the sum grew from the moment the trainer's
label buffer was full (--max_prefs labels) and the loop's processes all ran, to the end.
Targets: Pong with the paper's 3,000-label buffer full at <= 1.5 GB summed; <= 5%
growth from then to the end of a run of 1M further steps. Ctrl-C stops the run and reports what
was sampled; `--from_csv FILE` reports a saved sampling again.

    .venv/bin/python -m benchmarks.bench_memory PongNoFrameskip-v4 --steps 2000000 \\
        --extra "--dropout 0.5 --batchnorm --label_schedule none --max_pairs_per_clip 0"
    .venv/bin/python -m benchmarks.bench_memory MovingDotNoFrameskip-v0 --steps 300000
"""
from __future__ import annotations

import signal
import sqlite3
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Sequence, TextIO


from benchmarks.bench_a2c import machine_header
from runtime.script_args import ScriptParser, first_paragraph

ROOT = Path(__file__).resolve().parent.parent

MB = 2**20


def descendants(pid: int) -> list[int]:
    """`pid` and every process below it."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


def process_memory(pid: int) -> tuple[str, float, float] | None:
    """(name, RSS MB, PSS MB) of a live process; None once it has gone."""
    try:
        name = Path(f"/proc/{pid}/comm").read_text().strip()
        rss = pss = 0.0
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Rss:"):
                rss = int(line.split()[1]) * 1024 / MB
            elif line.startswith("Pss:"):
                pss = int(line.split()[1]) * 1024 / MB
        return name, rss, pss
    except (OSError, ValueError):
        return None


def stored_labels(store: Path) -> int:
    if not store.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=5) as db:
            return int(db.execute("SELECT COUNT(*) FROM labels").fetchone()[0])
    except sqlite3.Error:
        return -1  # busy: the row is kept with an unknown count


def main(argv: Sequence[str] | None = None) -> int:
    p = ScriptParser(description=first_paragraph(__doc__))
    p.add_argument("env_id", nargs="?", default="PongNoFrameskip-v4", help="the run's env id")
    p.add_argument("--steps", type=int, default=2_000_000, help="agent steps of the run")
    p.add_argument("--every_s", type=float, default=5.0, help="seconds between samples")
    p.add_argument("--max_prefs", type=int, default=3000,
                   help="labels the trainer holds (run.py's --max_prefs)")
    p.add_argument("--at_labels", type=int, nargs="+", default=[1000, 3000],
                   help="label counts at which to report each process")
    p.add_argument("--extra", default="", help="more run.py flags, quoted")
    p.add_argument("--csv", help="also write every sample to this file, as it is taken")
    p.add_argument("--from_csv", help="report the samples of an earlier --csv instead of running")
    p.add_argument("--settle_s", type=float, default=120.0,
                   help="seconds the loop's processes get to reach their working size (first "
                        "steps, first validation) before figures are read")
    a = p.parse_args(argv)
    if a.from_csv:
        report(read_csv(a.from_csv), a.at_labels, a.max_prefs, a.settle_s)
        return 0
    print(machine_header())
    samples: list = []  # (seconds, labels, {name: (rss, pss)})
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        cmd = [sys.executable, "run.py", "train_policy_with_preferences", a.env_id,
               "--synthetic_prefs", "--million_timesteps", f"{a.steps / 1e6:g}",
               "--n_initial_prefs", "64", "--n_initial_epochs", "1",
               "--max_prefs", str(a.max_prefs), "--log_dir", str(run_dir), *a.extra.split()]
        print(" ".join(cmd[1:]))
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True)
        steps = AgentSteps(proc.stderr)
        csv = open(a.csv, "w") if a.csv else None
        try:
            sample_until_exit(proc, run_dir, a.every_s, samples, csv, steps)
        except KeyboardInterrupt:
            print("stopping the run (Ctrl-C): reporting what was sampled")
            proc.send_signal(signal.SIGINT)
            proc.wait()
        finally:
            if csv:
                csv.close()
        if proc.returncode not in (0, 130):
            print(f"run.py exited with {proc.returncode}:\n{steps.last_lines}")
    report(samples, a.at_labels, a.max_prefs, a.settle_s)
    return 0


class AgentSteps:
    """The agent steps of run.py's latest status line (stderr, every 30 s when not a terminal),
    read on a thread; also keeps the last lines, to show if the run fails."""

    def __init__(self, stream: TextIO):
        self.value, self.last_lines = 0, ""
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream: TextIO) -> None:
        tail: list[str] = []
        for line in stream:
            tail = (tail + [line])[-20:]
            self.last_lines = "".join(tail)
            found = re.search(r"steps ([\d,.]+)k", line)
            if found:
                self.value = round(float(found.group(1).replace(",", "")) * 1e3)


def sample_until_exit(proc: subprocess.Popen, run_dir: Path, every_s: float, samples: list,
                      csv: TextIO | None, steps: AgentSteps) -> None:
    """Sample the run's processes every `every_s` seconds until run.py exits."""
    start = time.monotonic()
    if csv:
        csv.write("seconds,labels,steps,process,rss_mb,pss_mb\n")
    while proc.poll() is None:
        per_process: dict[str, tuple[float, float]] = {}
        for pid in descendants(proc.pid):
            mem = process_memory(pid)
            if mem is not None:
                name = "main" if pid == proc.pid else mem[0]
                old = per_process.get(name, (0.0, 0.0))
                per_process[name] = (old[0] + mem[1], old[1] + mem[2])
        t, n = time.monotonic() - start, stored_labels(run_dir / "prefs.sqlite")
        samples.append((t, n, steps.value, per_process))
        if csv:
            csv.writelines(f"{t:.1f},{n},{steps.value},{name},{rss:.1f},{pss:.1f}\n"
                           for name, (rss, pss) in per_process.items())
            csv.flush()
        if len(samples) % max(1, round(60 / every_s)) == 0:  # a line a minute
            print(f"{t / 60:6.1f} min  {n:5d} labels  {steps.value / 1e3:7.0f}k steps  summed RSS "
                  f"{sum(v[0] for v in per_process.values()):6.0f} MB, PSS "
                  f"{sum(v[1] for v in per_process.values()):6.0f} MB", flush=True)
        time.sleep(every_s)


def read_csv(path: str) -> list:
    """The samples of a file written by --csv (files from before the steps column: steps 0)."""
    by_time: dict[float, tuple[int, int, dict]] = {}
    with open(path) as f:
        with_steps = "steps" in next(f)
        for line in f:
            fields = line.strip().split(",")
            t, n, steps = fields[0], fields[1], fields[2] if with_steps else "0"
            name, rss, pss = fields[-3:]
            by_time.setdefault(float(t), (int(n), int(steps), {}))[2][name] = (float(rss),
                                                                               float(pss))
    return [(t, n, steps, per) for t, (n, steps, per) in sorted(by_time.items())]


def report(samples: list, at_labels: list[int], max_prefs: int, settle_s: float) -> None:
    def total(per: dict, k: int) -> float:
        return sum(v[k] for v in per.values())
    print(f"\n{'labels':>7s} {'minutes':>7s}  {'process':16s} {'RSS MB':>8s} {'PSS MB':>8s}")
    # Counted from when the loop has run for `settle_s`: the set of processes seen most often (the
    # loop's; pretraining runs alone before them, they exit one by one at the end, and a short-lived
    # child may join a sample or two).
    sets = Counter(frozenset(s[3]) for s in samples)
    loop_names = max(sets, key=lambda names: (sets[names], len(names)), default=frozenset())
    running = [s for s in samples if loop_names <= set(s[3])]
    loop = [s for s in running if s[0] >= running[0][0] + settle_s] if running else []
    for target in at_labels:
        hit = next((s for s in loop if s[1] >= target), None)
        if hit is None:
            print(f"{target:7d}  not reached (the run ended at {max(s[1] for s in samples)} labels)")
            continue
        t, n, _, per = hit
        for name, (rss, pss) in sorted(per.items()):
            print(f"{n:7d} {t / 60:7.1f}  {name:16s} {rss:8.0f} {pss:8.0f}")
        print(f"{n:7d} {t / 60:7.1f}  {'sum':16s} {total(per, 0):8.0f} {total(per, 1):8.0f}")
    full = [s for s in loop if s[1] >= max_prefs]
    if len(full) >= 2:
        first, last = full[0], full[-1]
        # Peaks over a minute at each end, so one sample between steps does not flatter either.
        head = [s for s in full if s[0] <= first[0] + 60]
        tail = [s for s in full if s[0] >= last[0] - 60]
        start_rss, end_rss = (max(total(s[3], 0) for s in x) for x in (head, tail))
        start_pss, end_pss = (max(total(s[3], 1) for s in x) for x in (head, tail))
        at, later = ((f", step {first[2]:,}", f", {last[2] - first[2]:,} agent steps later")
                     if last[2] else ("", ""))  # a CSV from before the steps column
        print(f"\nbuffer full ({max_prefs} labels), loop settled, at {first[0] / 60:.1f} min"
              f"{at}: summed RSS {start_rss:.0f} MB, PSS {start_pss:.0f} MB (peaks of its first "
              f"minute); at the end ({last[0] / 60:.1f} min{later}, peaks of its last minute): RSS "
              f"{end_rss:.0f} MB ({end_rss / start_rss - 1:+.1%}), PSS {end_pss:.0f} MB "
              f"({end_pss / start_pss - 1:+.1%})")
    else:
        print(f"\nthe label buffer ({max_prefs}) did not fill: no growth figure")


if __name__ == "__main__":
    sys.exit(main())
