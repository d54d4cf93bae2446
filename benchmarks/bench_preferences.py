"""Throughput of the preference loop at the paper's predictor pace against plain A2C, through the
real command line, one run after the other on this machine:

  (1) `run.py train_policy_with_original_rewards ENV`: plain A2C;
  (2) `run.py train_policy_with_preferences ENV --synthetic_prefs` with the paper's predictor
      (dropout 0.5, batch norm, 3 members) and `--min_predictor_labels_per_step PACE`, the pace
      counted per member (`--predictor_pace_unit member`, the default reading);
  (3) the same with the pace counted for the whole ensemble (`--predictor_pace_unit ensemble`).

Each preference run starts short (64 initial labels, one pretraining epoch), then runs --steps
agent steps with A2C, labelling and predictor training at once. Figures come from the runs' own
TensorBoard scalars, skipping the first --skip_s seconds and weighting each point by the time it
covers: A2C's steps/s (`charts/SPS`), the share of time A2C waited for the predictor
(`charts/waiting_for_predictor`) and the predictor's training steps/s, each step one batch of 16
pairs x 25 frames per member (`reward_predictor/steps_per_sec`). Target: the per-member loop
at >= 50% of plain A2C.

    .venv/bin/python -m benchmarks.bench_preferences                # Pong, 40k steps each
    .venv/bin/python -m benchmarks.bench_preferences --steps 20000  # a quicker look
    .venv/bin/python -m benchmarks.bench_preferences --neighbour    # beside a busy process

`--neighbour` runs a CPU-bound process in a Linux session of its own (setsid) at nice 19 beside
every run, as a browser, a build or another user's job would be: Linux shares the CPU between
sessions before it reads `nice`, so it takes about a core whatever its nice value.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

import numpy as np


from benchmarks.bench_a2c import machine_header
from experiments.runlog import scalars, time_weights
from runtime.script_args import ScriptParser, first_paragraph

ROOT = Path(__file__).resolve().parent.parent

PAPER_PREDICTOR = ["--dropout", "0.5", "--batchnorm"]  # App. A.2; 3 members is run.py's default


def steady_mean(points: np.ndarray, skip_s: float) -> float:
    """Time-weighted mean (`experiments.runlog.time_weights`) of a logged rate or time share
    after its first skip_s seconds (all of it if nothing comes later)."""
    if not len(points):
        return float("nan")
    weights = time_weights(points)
    kept = points[:, 0] - points[0, 0] >= skip_s
    if weights[kept].sum() == 0:  # nothing after the warm-up: all of it
        kept[:] = True
    if weights[kept].sum() == 0:  # a single point
        return float(points[0, 2])
    return float(np.average(points[kept, 2], weights=weights[kept]))


def run_cli(args: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run([sys.executable, "run.py", *args], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL)
    return time.perf_counter() - t


def main(argv: Sequence[str] | None = None) -> int:
    p = ScriptParser(description=first_paragraph(__doc__))
    p.add_argument("--env_id", default="PongNoFrameskip-v4", help="the runs' env id")
    p.add_argument("--steps", type=int, default=40_000, help="agent steps of each run")
    p.add_argument("--pace", type=float, default=0.1,
                   help="--min_predictor_labels_per_step of the preference runs (App. A.2: ~0.1)")
    p.add_argument("--skip_s", type=float, default=10.0, help="warm-up seconds not counted")
    p.add_argument("--extra", default="", help="more run.py flags for every run, quoted")
    p.add_argument("--neighbour", action="store_true",
                   help="run a busy process in a Linux session of its own (nice 19) beside each "
                        "run")
    a = p.parse_args(argv)
    print(machine_header())
    # busy while this process lives (it ends itself if this one is killed)
    neighbour = subprocess.Popen(
        [sys.executable, "-c", f"import os\nwhile os.getppid() == {os.getpid()}: pass"],
        start_new_session=True, preexec_fn=lambda: os.nice(19), stdout=subprocess.DEVNULL
    ) if a.neighbour else None
    try:
        return _runs(a)
    finally:
        if neighbour is not None:
            neighbour.kill()


def _runs(a: argparse.Namespace) -> int:
    million = f"{a.steps / 1e6:g}"
    extra = a.extra.split()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        plain = Path(tmp) / "plain"
        wall = run_cli(["train_policy_with_original_rewards", a.env_id, "--million_timesteps",
                        million, "--log_dir", str(plain), *extra])
        sps_plain = steady_mean(scalars(plain / "tb", "charts/SPS"), a.skip_s)
        rows.append(("plain A2C, original rewards", sps_plain, wall, None, None))
        for unit in ("member", "ensemble"):
            run = Path(tmp) / unit
            wall = run_cli(["train_policy_with_preferences", a.env_id, "--synthetic_prefs",
                            "--n_initial_prefs", "64", "--n_initial_epochs", "1",
                            "--million_timesteps", million, "--log_dir", str(run),
                            *PAPER_PREDICTOR, "--min_predictor_labels_per_step", str(a.pace),
                            "--predictor_pace_unit", unit,
                            "--label_schedule", "none", *extra])  # labels as fast as taken
            tb = run / "tb"
            rows.append((f"loop, pace {a.pace:g} per {unit}",
                         steady_mean(scalars(tb, "charts/SPS"), a.skip_s), wall,
                         steady_mean(scalars(tb, "charts/waiting_for_predictor"), a.skip_s),
                         steady_mean(scalars(tb / "reward_predictor",
                                             "reward_predictor/steps_per_sec"), a.skip_s)))
    print(f"\n{a.env_id}, {a.steps:,} agent steps per run; predictor steps are 16 pairs x 25 "
          "frames per member" + ("; a busy process in its own autogroup beside each run"
                                 if a.neighbour else ""))
    print(f"  {'run':32s} {'agent steps/s':>13s} {'of plain':>8s} {'A2C waits':>9s} "
          f"{'predictor steps/s':>17s} {'wall s':>7s}")
    for name, sps, wall, waits, rp in rows:
        print(f"  {name:32s} {sps:13.0f} {sps / sps_plain:8.0%} "
              f"{'' if waits is None else f'{waits:.0%}':>9s} "
              f"{'' if rp is None else f'{rp:.2f}':>17s} {wall:7.0f}")
    print("  target: the per-member loop at >= 50% of plain A2C")
    return 0


if __name__ == "__main__":
    sys.exit(main())
