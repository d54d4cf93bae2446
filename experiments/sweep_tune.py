"""The sweep's Ray Tune side (`experiments.sweep`): a trial as Tune runs it, the progress it
reports, and the driver's progress line. Kept apart so that the sweep's `--help` and its checks
do without importing Ray."""
from __future__ import annotations

import ctypes
import math
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ray import tune

from experiments.sweep import CONSOLE_DIR, RUNS_DIR, TUNE_DIR, SweepSpec, Trial, parse_grid, trials

ROOT = Path(__file__).resolve().parent.parent
USAGE_STATUS = 2  # run.py refused its command line


def _die_with_parent() -> None:
    """In the child: SIGTERM when the trial's worker dies (Linux), so run.py saves and stops."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def trial_of(config: dict[str, Any]) -> Trial:
    return Trial(config["trial"]["seed"], tuple(tuple(f) for f in config["trial"]["flags"]))


def run_trial(config: dict[str, Any]) -> None:
    """Tune's trainable: start the trial's run, or resume it where its run directory exists, and
    report its progress until it ends. A run that fails raises, so that Tune starts it again."""
    trial = trial_of(config)
    run_dir = Path(config["storage"]) / RUNS_DIR / trial.name
    if (run_dir / "settings.json").is_file():
        argv = ["--resume", str(run_dir)]
    else:
        argv = trial.argv(config["command"], run_dir)
    if config["gpus"] > 0:
        argv += ["--device", "cuda", "--reward_predictor_device", "cuda"]
    progress = Progress(run_dir)
    console_path = Path(config["storage"]) / CONSOLE_DIR / f"{trial.name}.txt"
    console_path.parent.mkdir(parents=True, exist_ok=True)
    with open(console_path, "a") as console:
        proc = subprocess.Popen([sys.executable, str(ROOT / "run.py"), *argv], cwd=ROOT,
                                stdout=console, stderr=subprocess.STDOUT, start_new_session=True,
                                preexec_fn=_die_with_parent)
        try:
            while not _ended(proc, config["poll_s"]):
                tune.report(progress.read())
        finally:
            if proc.poll() is None:  # the trial is being stopped: let run.py save and end
                proc.send_signal(signal.SIGTERM)
                proc.wait()
    tune.report({**progress.read(), "exit_status": proc.returncode})
    if proc.returncode not in (0, USAGE_STATUS):  # bad input would fail again: not retried
        raise RuntimeError(f"run.py ended with status {proc.returncode}: {console_path}")


def _ended(proc: subprocess.Popen, wait_s: float) -> bool:
    try:
        proc.wait(timeout=wait_s)
        return True
    except subprocess.TimeoutExpired:
        return False


class Progress:
    """A run directory's newest agent steps, labels and mean true return, read from its
    TensorBoard events (each read takes only the events written since the last)."""

    WINDOW = 10  # episodes averaged for the return

    def __init__(self, run_dir: Path):
        self.run_dir = run_dir
        self._events: dict[Path, Any] = {}

    def _newest(self, sub: str, tag: str, n: int = 1) -> list:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

        d = self.run_dir / "tb" / sub
        if d not in self._events:
            if not d.is_dir():
                return []
            # Tensorboard's reservoir always keeps a tag's newest point.
            self._events[d] = EventAccumulator(str(d), size_guidance={"scalars": 100})
        ea = self._events[d]
        ea.Reload()
        return ea.Scalars(tag)[-n:] if tag in ea.Tags()["scalars"] else []

    def read(self) -> dict[str, float]:
        steps = self._newest("", "charts/SPS")
        labels = self._newest("labels", "labels/total") or self._newest("gather", "labels/total")
        returns = [e.value for e in self._newest("", "charts/episodic_return", self.WINDOW)]
        return {"agent_steps": float(steps[-1].step) if steps else 0.0,
                "labels": float(labels[-1].value) if labels else 0.0,
                "return": sum(returns) / len(returns) if returns else math.nan}


class ProgressLine(tune.Callback):
    """Prints the sweep's state every `every_s` seconds: trials running, queued, done and failed,
    and each running trial's agent steps, labels and mean return."""

    def __init__(self, every_s: float) -> None:
        self.every_s = every_s
        self.last_print = 0.0
        self.latest: dict[str, dict] = {}

    def on_trial_result(self, iteration, trials, trial, result, **info) -> None:
        self.latest[trial.trial_id] = result

    def on_step_end(self, iteration, trials, **info) -> None:
        if time.monotonic() - self.last_print >= self.every_s:
            self.last_print = time.monotonic()
            print(status_line(trials, self.latest), flush=True)

    def on_experiment_end(self, trials, **info) -> None:
        print(status_line(trials, self.latest), flush=True)


def status_line(trials: list, latest: dict[str, dict]) -> str:
    """`sweep: 1 running, 2 queued, 3 done, 0 failed | seed0: 1.20M steps, 900 labels, -3.4`."""
    count: dict[str, int] = {}
    for t in trials:
        count[t.status] = count.get(t.status, 0) + 1
    parts = [f"sweep: {count.get('RUNNING', 0)} running, {count.get('PENDING', 0)} queued, "
             f"{count.get('TERMINATED', 0)} done, {count.get('ERROR', 0)} failed"]
    for t in trials:
        r = latest.get(t.trial_id)
        if t.status == "RUNNING" and r and "agent_steps" in r:
            ret = "-" if math.isnan(r["return"]) else f"{r['return']:+.1f}"
            parts.append(f"{trial_of(t.config).name}: {r['agent_steps'] / 1e6:.2f}M steps, "
                         f"{r['labels']:,.0f} labels, return {ret}")
    return " | ".join(parts)


def tuner(spec: SweepSpec, storage: Path, restore: bool, progress_s: float) -> tune.Tuner:
    """A new sweep's Tuner, or a stopped one's restored from STORAGE/tune."""
    trainable = tune.with_resources(run_trial, {"cpu": spec.cpus_per_trial,
                                                "gpu": spec.gpus_per_trial})
    if restore:
        return tune.Tuner.restore(str(storage / TUNE_DIR), trainable,
                                  resume_unfinished=True, resume_errored=True)
    space = [{"seed": t.seed, "flags": [list(f) for f in t.flags]}
             for t in trials(spec.seeds, parse_grid(spec.grid))]
    return tune.Tuner(
        trainable,
        param_space={"trial": tune.grid_search(space), "storage": str(storage),
                     "command": spec.command, "gpus": spec.gpus_per_trial,
                     "poll_s": spec.poll_s},
        tune_config=tune.TuneConfig(reuse_actors=False),
        run_config=tune.RunConfig(
            name=TUNE_DIR, storage_path=str(storage), verbose=0,
            callbacks=[ProgressLine(progress_s)],
            failure_config=tune.FailureConfig(max_failures=spec.max_failures)))
