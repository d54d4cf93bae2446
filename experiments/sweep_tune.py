"""The sweep's Ray Tune side (`experiments.sweep`): a trial as Tune runs it, the progress it
reports, and the driver's progress line. Kept apart so that the sweep's `--help` and its checks
do without importing Ray."""
from __future__ import annotations

import ctypes
import logging
import math
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ray import tune

from experiments.runlog import RunLog
from experiments.sweep_trial import CONSOLE_DIR, RUNS_DIR, TUNE_DIR, Trial, device_flags
from launch.rundir import run_dir_holder, wait_released
from launch.supervisor import duration

ROOT = Path(__file__).resolve().parent.parent
USAGE_STATUS = 2  # run.py refused its command line
EARLIER_RUN_WAIT_S = 600  # how long a trial waits for its run's earlier process to save and end


def _die_with_parent() -> None:
    """In the child: SIGTERM when the trial's worker dies (Linux), so run.py saves and stops."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def trial_of(config: dict[str, Any]) -> Trial:
    t = config["trial"]
    return Trial(t["seed"], tuple(tuple(f) for f in t["flags"]), t.get("setting"),
                 tuple(t.get("setting_flags", ())))


def run_trial(config: dict[str, Any]) -> None:
    """Tune's trainable: start the trial's run, or resume it where its run directory exists, and
    report its progress until it ends. A run that fails raises, so that Tune starts it again.
    With a level to stop at, a run that reaches it is stopped (it saves its checkpoints) and
    done, and one there already is not started."""
    trial = trial_of(config)
    run_dir = Path(config.get("runs_dir") or Path(config["storage"]) / RUNS_DIR) / trial.name
    log = RunLog(run_dir)  # read on as the run writes (`refresh`)
    stop_at = config.get("stop_at")
    if _reached(log, stop_at):
        tune.report({**log.progress(), "exit_status": 0})
        return
    argv = trial.run_argv(config["command"], run_dir) + device_flags(config["gpus"])
    console_path = Path(config["storage"]) / CONSOLE_DIR / f"{trial.name}.txt"
    console_path.parent.mkdir(parents=True, exist_ok=True)
    at_level = False
    with open(console_path, "a") as console:
        _wait_for_earlier_process(run_dir, console)
        proc = subprocess.Popen([sys.executable, str(ROOT / "run.py"), *argv], cwd=ROOT,
                                stdout=console, stderr=subprocess.STDOUT, start_new_session=True,
                                preexec_fn=_die_with_parent)
        try:
            while not _ended(proc, config["poll_s"]):
                log.refresh()
                if _reached(log, stop_at):
                    at_level = True
                    break
                tune.report(log.progress())
        finally:
            if proc.poll() is None:  # at its level, or the trial is being stopped: let run.py
                proc.send_signal(signal.SIGTERM)  # save and end
                proc.wait()
    status = 0 if at_level else proc.returncode
    tune.report({**log.refresh().progress(), "exit_status": status})
    if status not in (0, USAGE_STATUS):  # bad input would fail again: not retried
        raise RuntimeError(f"run.py ended with status {status}: {console_path}")


def _wait_for_earlier_process(run_dir: Path, console) -> None:
    """Where the trial's earlier run.py still holds its run directory (its worker or node died
    and it is saving its work), wait for it to end before resuming the run."""
    holder = run_dir_holder(run_dir)
    if holder:
        print(f"waiting for {holder} to save its work and end", file=console, flush=True)
        if wait_released([run_dir], EARLIER_RUN_WAIT_S):
            raise RuntimeError(f"{run_dir} still held by {run_dir_holder(run_dir)} after "
                               f"{EARLIER_RUN_WAIT_S} s")


def _reached(log: RunLog, stop_at: list | None) -> bool:
    """Whether the run's mean true return of its last `window` episodes has reached `level`
    (`stop_at` = [level, window]) at some point."""
    if stop_at is None:
        return False
    level, window = stop_at
    return log.first_time_at(level, int(window)) is not None


def _ended(proc: subprocess.Popen, wait_s: float) -> bool:
    try:
        proc.wait(timeout=wait_s)
        return True
    except subprocess.TimeoutExpired:
        return False


class ProgressLine(tune.Callback):
    """Prints the sweep's state every `every_s` seconds: trials running, queued, done, failed and
    (after Ctrl-C) stopped, and each running trial's agent steps, labels and mean return."""

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
    """`sweep: 1 running, 2 queued, 3 done, 0 failed | seed0: 1.20M/6M steps, 900 labels, return
    -3.4, 2 h 10 min left` (the time left at the trial's rate over its last minute);
    after Ctrl-C, the trials stopped before their end are counted apart (`, 1 stopped`)."""
    count: dict[str, int] = {}
    for t in trials:
        status = t.status
        last = latest.get(t.trial_id) or getattr(t, "last_result", None) or {}
        if status == "TERMINATED" and last.get("exit_status") is None:
            status = "STOPPED"  # ended by the sweep's stop, not by its run's end
        elif status == "TERMINATED" and last["exit_status"] != 0:
            status = "ERROR"  # its command line refused (not retried)
        count[status] = count.get(status, 0) + 1
    parts = [f"sweep: {count.get('RUNNING', 0)} running, {count.get('PENDING', 0)} queued, "
             f"{count.get('TERMINATED', 0)} done, {count.get('ERROR', 0)} failed"
             + (f", {count['STOPPED']} stopped" if count.get("STOPPED") else "")]
    for t in trials:
        r = latest.get(t.trial_id)
        if t.status == "RUNNING" and r and "agent_steps" in r:
            ret = "-" if math.isnan(r["return"]) else f"{r['return']:+.1f}"
            steps, target = r["agent_steps"], r.get("target_steps", math.nan)
            rate = r.get("steps_per_s", math.nan)
            of = "" if math.isnan(target) else f"/{target / 1e6:g}M"
            left = (f", {duration((target - steps) / rate)} left"
                    if rate > 0 and steps < target else "")  # False for NaN
            parts.append(f"{trial_of(t.config).name}: {steps / 1e6:.2f}M{of} steps, "
                         f"{r['labels']:,.0f} labels, return {ret}{left}")
    return " | ".join(parts)


class _TuneNotes(logging.Filter):
    """Drops Tune's own notes that the sweep says in its words: how to resume (Tune's API, where
    the user has a command) and the missing metrics of a trial that never started."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        return "Tuner.restore" not in text and not text.startswith("Failed to fetch metrics")


def _quiet_tune_notes() -> None:
    for name in ("ray.tune.tune", "ray.tune.analysis.experiment_analysis"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _TuneNotes) for f in logger.filters):
            logger.addFilter(_TuneNotes())


def tuner(command: list[str], all_trials: list[Trial], storage: Path, runs_dir: Path,
          restore: bool, progress_s: float, *, cpus_per_trial: float, gpus_per_trial: float,
          max_failures: int, poll_s: float, stop_at: tuple[float, int] | None) -> tune.Tuner:
    """A new sweep's Tuner, or a stopped one's restored from STORAGE/tune."""
    _quiet_tune_notes()
    trainable = tune.with_resources(run_trial, {"cpu": cpus_per_trial, "gpu": gpus_per_trial})
    if restore:
        return tune.Tuner.restore(str(storage / TUNE_DIR), trainable,
                                  resume_unfinished=True, resume_errored=True)
    space = [{"seed": t.seed, "flags": [list(f) for f in t.flags], "setting": t.setting,
              "setting_flags": list(t.setting_flags)} for t in all_trials]
    return tune.Tuner(
        trainable,
        param_space={"trial": tune.grid_search(space), "storage": str(storage),
                     "runs_dir": str(runs_dir), "command": command, "gpus": gpus_per_trial,
                     "poll_s": poll_s, "stop_at": None if stop_at is None else list(stop_at)},
        tune_config=tune.TuneConfig(reuse_actors=False),
        run_config=tune.RunConfig(
            name=TUNE_DIR, storage_path=str(storage), verbose=0,
            callbacks=[ProgressLine(progress_s)],
            failure_config=tune.FailureConfig(max_failures=max_failures)))
