"""Run a training command until its true return reaches a level: the agent steps, labels and
wall-clock it took (what experiments/ablations.py and bench_ppo_wrapper.py report)."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from experiments.runlog import RunLog

ROOT = Path(__file__).resolve().parent.parent


def run_until_level(cmd: list[str], run_dir: Path, level: float, poll_s: float = 5.0) -> dict:
    """Start `python CMD...` (writing to `run_dir`), stop it as Ctrl-C would once the mean true
    return of its last 64 episodes reaches `level`. Returns {"reached": bool} and, when reached,
    the agent steps, the labels in the store then, and the seconds since the command started
    (so the initial labelling and pretraining are included); always, the steps of its last
    episode, the mean true return of its last 64 episodes and its whole wall-clock."""
    if run_dir.exists():
        shutil.rmtree(run_dir)  # an unfinished run from an earlier attempt: start it again
    t0 = time.time()
    with tempfile.TemporaryFile("w+") as err:  # kept for a run that fails: its one-line error
        proc = subprocess.Popen([sys.executable, *cmd], cwd=ROOT, stdout=subprocess.DEVNULL,
                                stderr=err, start_new_session=True)
        hit = None
        while proc.poll() is None:
            time.sleep(poll_s)
            if (run_dir / "tb").is_dir():
                hit = RunLog(run_dir).first_time_at(level)
                if hit is not None:
                    os.killpg(proc.pid, signal.SIGINT)  # a clean stop, as Ctrl-C
                    proc.wait(300)
                    break
        if hit is None and proc.returncode != 0:
            err.seek(0)
            lines = err.read().strip().splitlines() or ["(nothing on stderr)"]
            raise RuntimeError(f"python {' '.join(cmd)} exited with status {proc.returncode}: "
                               f"{lines[-1]}")
    log = RunLog(run_dir)
    hit = hit or log.first_time_at(level)
    steps, returns = log.returns()
    result = {"reached": hit is not None, "last_steps": float(steps[-1]) if len(steps) else 0.0,
              "last_return": float(returns[-64:].mean()) if len(returns) else float("nan"),
              "total_wall_s": time.time() - t0}
    if hit is not None:
        steps, _ = hit
        sps = log.sps
        reach_wall = float(np.interp(steps, sps[:, 1], sps[:, 0])) if len(sps) else t0
        labels = log.labels_at(steps)
        result.update(steps=steps, wall_s=reach_wall - t0,
                      labels=float("nan") if labels is None else labels)
    return result
