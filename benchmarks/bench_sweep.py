#!/usr/bin/env python3
"""What the sweep itself costs: one MovingDot run through `experiments.sweep` against the same
run.py command alone, and several seeds as one sweep against the same runs one after another.

    python -m benchmarks.bench_sweep                            # 0.05M-step runs, 4 seeds
    python -m benchmarks.bench_sweep --million_timesteps 0.1 --seeds 2

Each run is the README's first command with a fixed number of agent steps (no stop at the
level), so every run does the same work. The sweep of several seeds gives each trial
`--cpus_per_trial` CPUs, so on a 2-core machine with 1 CPU each two trials run side by side.
Prints wall-clock seconds and the machine; the run directories go to a temporary folder.
"""
from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.bench_a2c import machine_header
from runtime.script_args import ScriptParser, first_paragraph

ROOT = Path(__file__).resolve().parent.parent
COMMAND = ["train_policy_with_preferences", "MovingDotNoFrameskip-v0", "--synthetic_prefs"]


def timed(argv: list[str]) -> float:
    """Seconds `argv` took (run from the checkout; its output thrown away, a failure raised)."""
    start = time.monotonic()
    subprocess.run(argv, cwd=ROOT, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return time.monotonic() - start


def main(argv: list[str] | None = None) -> int:
    p = ScriptParser(description=first_paragraph(__doc__))
    p.add_argument("--million_timesteps", type=float, default=0.05,
                   help="agent steps of each run, in millions")
    p.add_argument("--seeds", type=int, default=4, help="seeds in the several-seed comparison")
    p.add_argument("--cpus_per_trial", type=float, default=1.0,
                   help="CPUs the several-seed sweep gives each trial")
    a = p.parse_args(argv)
    print(machine_header(), flush=True)
    command = [*COMMAND, "--million_timesteps", str(a.million_timesteps)]
    run_py = [sys.executable, "run.py", *command]
    sweep = [sys.executable, "-m", "experiments.sweep", "--progress_s", "600"]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        alone = timed([*run_py, "--seed", "0", "--log_dir", str(out / "alone")])
        one = timed([*sweep, "--seeds", "0", "--storage", str(out / "one"), "--", *command])
        print(f"one run, {a.million_timesteps:g}M steps: run.py alone {alone:.1f} s, as a sweep "
              f"of one trial {one:.1f} s (the sweep's own cost {one - alone:+.1f} s)", flush=True)
        seeds = [str(s) for s in range(a.seeds)]
        in_turn = sum(timed([*run_py, "--seed", s, "--log_dir", str(out / f"turn{s}")])
                      for s in seeds)
        together = timed([*sweep, "--seeds", *seeds, "--cpus_per_trial", str(a.cpus_per_trial),
                          "--storage", str(out / "many"), "--", *command])
        print(f"{a.seeds} seeds: one after another {in_turn:.1f} s, as one sweep with "
              f"{a.cpus_per_trial:g} CPU per trial {together:.1f} s "
              f"({in_turn / together:.2f}x)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
