"""Throughput of the whole preference loop against plain A2C, through the real command line.

Runs, one after the other on this machine:
  (1) `run.py train_policy_with_original_rewards ENV` for --steps agent steps;
  (2) `run.py train_policy_with_preferences ENV --synthetic_prefs` with a short start (few initial
      labels, one pretraining epoch) and then --steps agent steps of the concurrent phase, where
      A2C trains on the predicted reward while the preference interface labels clips and the
      predictor trains.
Both rates are read from the runs' own TensorBoard scalars (`charts/SPS`, the A2C process's
steps/s, and `reward_predictor/steps_per_sec`), skipping the first --skip_s seconds of each.
The target (issue 3): the preference run keeps >= 75% of the plain A2C throughput.

    .venv/bin/python -m benchmarks.bench_preferences               # Pong, 100k steps each
    .venv/bin/python -m benchmarks.bench_preferences --steps 20000  # quicker look
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.bench_a2c import machine_header  # noqa: E402


def scalars(event_dir: Path, tag: str) -> list[tuple[float, float]]:
    """(wall_time, value) of one TensorBoard scalar in a run's event directory."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    ea = EventAccumulator(str(event_dir), size_guidance={"scalars": 0})
    ea.Reload()
    return [(e.wall_time, e.value) for e in ea.Scalars(tag)] if tag in ea.Tags()["scalars"] else []


def steady_mean(points: list[tuple[float, float]], skip_s: float) -> float:
    if not points:
        return float("nan")
    t0 = points[0][0]
    kept = [v for t, v in points if t - t0 >= skip_s] or [v for _, v in points]
    return float(np.mean(kept))


def run_cli(args: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run([sys.executable, "run.py", *args], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL)
    return time.perf_counter() - t


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env_id", default="PongNoFrameskip-v4")
    p.add_argument("--steps", type=int, default=100_000, help="agent steps of each run")
    p.add_argument("--skip_s", type=float, default=10.0, help="warm-up seconds not counted")
    p.add_argument("--extra", default="", help="more run.py flags for both runs, quoted")
    a = p.parse_args(argv)
    print(machine_header())
    million = f"{a.steps / 1e6:g}"
    extra = a.extra.split()
    with tempfile.TemporaryDirectory() as tmp:
        plain, prefs = Path(tmp) / "plain", Path(tmp) / "prefs"
        wall_plain = run_cli(["train_policy_with_original_rewards", a.env_id, "--million_timesteps",
                              million, "--log_dir", str(plain), *extra])
        wall_prefs = run_cli(["train_policy_with_preferences", a.env_id, "--synthetic_prefs",
                              "--n_initial_prefs", "64", "--n_initial_epochs", "1",
                              "--million_timesteps", million, "--log_dir", str(prefs), *extra])
        sps_plain = steady_mean(scalars(plain / "tb", "charts/SPS"), a.skip_s)
        sps_prefs = steady_mean(scalars(prefs / "tb", "charts/SPS"), a.skip_s)
        rp = scalars(prefs / "tb" / "reward_predictor", "reward_predictor/steps_per_sec")
        rp_sps = steady_mean(rp, a.skip_s)
        labels = scalars(prefs / "tb" / "labels", "labels/total")
    print(f"\n{a.env_id}, {a.steps:,} agent steps per run")
    print(f"  A2C on original rewards        {sps_plain:8.0f} steps/s   (whole run {wall_plain:.0f} s)")
    print(f"  A2C inside the preference loop {sps_prefs:8.0f} steps/s   (whole run {wall_prefs:.0f} s,"
          " including the short gather and pretraining)")
    print(f"  reward predictor training      {rp_sps:8.2f} steps/s of 16 pairs x 25 frames"
          f" per member")
    print(f"  labels at the end              {labels[-1][1] if labels else 0:8.0f}")
    print(f"  ratio                          {sps_prefs / sps_plain:8.0%}   (target >= 75%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
