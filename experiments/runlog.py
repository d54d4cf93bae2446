"""Read a run directory's TensorBoard scalars, with every curve put on the agent-step axis."""
from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from launch.configs import MILLION
from launch.rundir import PREFS_FILE, saved_settings
from pref_interface.store import StoreError, stored_labels


class _ResumeNotice(logging.Filter):
    """Drops TensorBoard's warning that it purged points after a session start: every resumed
    run writes one on purpose (`runtime.scalars.ScalarWriter`'s purge_step)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Detected out of order event.step")


logging.getLogger("tensorboard").addFilter(_ResumeNotice())


def _events(event_dir: Path):
    """Every event in one directory (None if it does not exist), loaded in one read."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    if not event_dir.is_dir():
        return None
    ea = EventAccumulator(str(event_dir), size_guidance={"scalars": 0})
    ea.Reload()
    return ea


def _points(events, tag: str) -> np.ndarray:
    if events is None or tag not in events.Tags()["scalars"]:
        return np.zeros((0, 3))
    return np.array([(e.wall_time, e.step, e.value) for e in events.Scalars(tag)])


def scalars(event_dir: Path, tag: str) -> np.ndarray:
    """(n, 3) array of (wall_time, step, value) for one tag; empty if the tag is absent."""
    return _points(_events(event_dir), tag)


# A2C logs every second, and every 10 s while the pace holds it (a2c.loop_side.HELD_POINT_S): a
# longer silence is a stopped or paused process.
STOPPED_GAP_S = 60.0


def time_weights(points: np.ndarray, starts: np.ndarray | None = None) -> np.ndarray:
    """Seconds each point of a rate or a time share (rows of `scalars`) stands for: the wall-clock
    time since the previous point, 0 for the first one and after a stop (a silence of over
    STOPPED_GAP_S, or one across a start of the run: `starts`, Unix times). A2C logs such scalars
    over the time since its last point, so a wait gives a low point that must count for its
    whole length: the weighted mean of `charts/SPS` is steps over time."""
    if len(points) == 0:
        return np.zeros(0)
    dt = np.diff(points[:, 0], prepend=points[0, 0])
    dt[dt > STOPPED_GAP_S] = 0.0
    if starts is not None and len(starts):  # each point whose interval holds a start
        after = np.searchsorted(points[:, 0], starts, side="left")
        dt[after[after < len(points)]] = 0.0
    return dt


def start_times(run_dir: Path) -> np.ndarray:
    """Unix times at which the run was started and resumed (its machines file, one line a start;
    empty where it has none)."""
    from datetime import datetime

    from launch.rundir import MACHINES_FILE

    try:
        lines = (run_dir / MACHINES_FILE).read_text().splitlines()
    except OSError:
        return np.zeros(0)
    times = []
    for line in lines:
        try:
            times.append(datetime.fromisoformat(line.split("\t", 1)[0]).timestamp())
        except ValueError:  # a line of another form: that start is not known
            continue
    return np.array(times)


RATE_POINTS = 60  # A2C's last rates averaged: a minute of run.py's (one a second)


class RunLog:
    """One run's curves. Scalars logged by other processes (labels, predictor) are mapped to agent
    steps through wall-clock time, using the A2C process's own (time, step) points. Each event
    directory is read once, when first asked for; `refresh` reads what a running run has written
    since."""

    def __init__(self, run_dir: str | Path):
        self.run_dir = Path(run_dir)
        self.tb = self.run_dir / "tb"
        self._loaded: dict[Path, object] = {}
        self.sps = self._scalars(self.tb, "charts/SPS")  # logged every second: the time -> step map
        self.starts = start_times(self.run_dir)
        self._stored: int | None = None  # the store's label count, read once per refresh

    def refresh(self) -> "RunLog":
        """Read the events written since the last read (TensorBoard's reader goes on from where it
        stopped); a directory that did not exist yet is looked for again."""
        for event_dir, events in list(self._loaded.items()):
            if events is None:
                del self._loaded[event_dir]
            else:
                events.Reload()
        self.sps = self._scalars(self.tb, "charts/SPS")
        self.starts = start_times(self.run_dir)  # a resume since the last read
        self._stored = None
        return self

    def progress(self, window: int = 10) -> dict[str, float]:
        """Where the run stands: its newest agent steps, the labels in its store (while gathering,
        too), the mean true return of its last `window` episodes, the target of a policy's
        training (--million_timesteps) and A2C's steps per second over its last RATE_POINTS
        points (NaN where not known yet, or not a policy's training)."""
        labels = self._scalars(self.tb / "labels", "labels/total")
        if not len(labels):
            labels = self._scalars(self.tb / "gather", "labels/total")
        returns = self._scalars(self.tb, "charts/episodic_return")[-window:, 2]
        try:
            saved = saved_settings(self.run_dir)
            trains = saved.get("mode", "").startswith("train_policy")  # not a gathering's
            target = float(saved["million_timesteps"]) * MILLION if trains else float("nan")
        except (ValueError, KeyError, TypeError):
            target = float("nan")
        return {"agent_steps": float(self.sps[-1, 1]) if len(self.sps) else 0.0,
                "labels": float(labels[-1, 2]) if len(labels) else 0.0,
                "return": float(returns.mean()) if len(returns) else float("nan"),
                "target_steps": target,
                "steps_per_s": float(self.sps[-RATE_POINTS:, 2].mean()) if len(self.sps)
                else float("nan")}

    def _scalars(self, event_dir: Path, tag: str) -> np.ndarray:
        if event_dir not in self._loaded:
            self._loaded[event_dir] = _events(event_dir)
        return _points(self._loaded[event_dir], tag)

    def _to_steps(self, wall_time: np.ndarray) -> np.ndarray:
        if len(self.sps) == 0:
            return np.full_like(wall_time, np.nan)
        return np.interp(wall_time, self.sps[:, 0], self.sps[:, 1])

    def returns(self) -> tuple[np.ndarray, np.ndarray]:
        """(agent steps, true episode return) of every finished episode."""
        r = self._scalars(self.tb, "charts/episodic_return")
        return r[:, 1], r[:, 2]

    def curve(self, tag: str, process: str = "") -> tuple[np.ndarray, np.ndarray]:
        """(agent steps, value) of one scalar. `process` is the tb/ subfolder of the process that
        logged it ("" for A2C, whose points are on the step axis already; "labels" or
        "reward_predictor", whose points are put there through their wall-clock times)."""
        r = self._scalars(self.tb / process if process else self.tb, tag)
        return (r[:, 1] if not process else self._to_steps(r[:, 0])), r[:, 2]

    def timed(self, tag: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(agent steps, value, seconds each point stands for: `time_weights`) of a rate or a time
        share that A2C logs, such as `charts/SPS` or `charts/waiting_for_predictor`."""
        r = self._scalars(self.tb, tag)
        return r[:, 1], r[:, 2], time_weights(r, self.starts)

    def labels(self) -> tuple[np.ndarray, np.ndarray]:
        """(agent steps, labels in the store) during policy training; labels stored after the
        last logged count are counted at the run's last step."""
        steps, totals = self.curve("labels/total", "labels")
        if self._stored is None:
            try:
                self._stored = stored_labels(self.run_dir / PREFS_FILE)
            except (StoreError, OSError):  # unreadable: the logged counts alone
                self._stored = 0
        stored = self._stored
        if len(totals) and stored > totals[-1]:
            last = max(self.last_step(), steps[-1])
            steps, totals = np.append(steps, last), np.append(totals, stored)
        return steps, totals

    def last_step(self) -> float:
        """The run's newest agent step: its last episode's end or A2C's last rate point."""
        ends = self.returns()[0]
        return max(float(ends[-1]) if len(ends) else 0.0,
                   float(self.sps[-1, 1]) if len(self.sps) else 0.0)

    def labels_at(self, steps: float) -> float | None:
        """Labels in the store when A2C was at `steps` agent steps; None before the first point."""
        return count_at(*self.labels(), steps)

    def predictor_accuracy(self) -> tuple[np.ndarray, np.ndarray]:
        return self.curve("reward_predictor/val_accuracy", "reward_predictor")

    def _active_s(self, wall_time: np.ndarray) -> np.ndarray:
        """Seconds of policy training up to each `wall_time`, not counting the time a resumed run
        was stopped (a gap across a start, or of over STOPPED_GAP_S, between A2C points)."""
        if len(self.sps) == 0:
            return np.zeros_like(wall_time)
        return np.interp(wall_time, self.sps[:, 0],
                         np.cumsum(time_weights(self.sps, self.starts)))

    def wall_clock_s(self) -> float:
        """Seconds of policy training from the first to the last A2C point (stops excluded)."""
        return float(self._active_s(self.sps[-1:, 0])[0]) if len(self.sps) > 1 else 0.0

    def episode_training_s(self) -> np.ndarray:
        """Seconds of policy training (stops not counted) at the end of each of `returns`."""
        return self._active_s(self._scalars(self.tb, "charts/episodic_return")[:, 0])

    def first_time_at(self, level: float, window: int = 64) -> tuple[float, float] | None:
        """(agent steps, seconds since training started) when the mean of the last `window`
        episodes' true returns first reaches `level` (time stopped not counted); None if it never
        does."""
        r = self._scalars(self.tb, "charts/episodic_return")
        i = first_reached(r[:, 2], level, window)
        return None if i is None else (float(r[i, 1]), float(self._active_s(r[i:i + 1, 0])[0]))


def count_at(steps: np.ndarray, counts: np.ndarray, at: float) -> float | None:
    """The last of `counts` logged at or before agent step `at`; None before the first."""
    before = counts[steps <= at]
    return float(before[-1]) if len(before) else None


def first_reached(values: np.ndarray, level: float, window: int) -> int | None:
    """Index of the episode with which the mean of the last `window` episodes first reaches
    `level`; None if it never does (nor before `window` episodes)."""
    reached = np.flatnonzero(smooth(values, window)[window - 1:] >= level)
    return None if len(reached) == 0 else int(reached[0]) + window - 1


def best_window(steps: np.ndarray, values: np.ndarray, window: int
                ) -> tuple[float, float] | None:
    """(mean, agent steps at its last episode) of the `window` consecutive episodes whose mean
    true return is highest; None with fewer than `window` episodes."""
    means = smooth(values, window)[window - 1:]
    if len(means) == 0:
        return None
    i = int(np.argmax(means))
    return float(means[i]), float(steps[i + window - 1])


def smooth(values: np.ndarray, window: int) -> np.ndarray:
    """Trailing mean over up to `window` points."""
    if len(values) == 0:
        return values
    c = np.cumsum(np.insert(values, 0, 0.0))
    idx = np.arange(1, len(values) + 1)
    lo = np.maximum(0, idx - window)
    return (c[idx] - c[lo]) / (idx - lo)


def level_reached(run_dir: Path, level: float, window: int = 64) -> dict | None:
    """Whether a run's mean true return of `window` episodes reached `level` (as a sweep's
    `stop_at` stops it): {"reached": bool, "last_steps", "last_return"} and, when reached, the
    agent steps, the labels in the store and the seconds since the run started (its initial
    labelling and pretraining included, stops during training not) at that moment. None for a
    run that neither reached it nor ended at its agent steps (not started, or stopped early)."""

    from a2c.config import checkpoint_steps, checkpoints
    from launch.cli import load_settings
    from launch.rundir import POLICY_DIR, is_run_dir

    if not is_run_dir(run_dir):
        return None
    log = RunLog(run_dir)
    hit = log.first_time_at(level, window) if (run_dir / "tb").is_dir() else None
    if hit is None:
        kept = checkpoints(run_dir / POLICY_DIR)
        if not kept or checkpoint_steps(kept[-1]) < load_settings(run_dir).million_timesteps * 1e6:
            return None
    steps, returns = log.returns()
    result = {"reached": hit is not None, "last_steps": float(steps[-1]) if len(steps) else 0.0,
              "last_return": float(returns[-window:].mean()) if len(returns) else float("nan")}
    if hit is not None:
        at_steps, training_s = hit
        setup_s = 0.0  # the initial labels and pretraining: from the run's start to A2C's first
        if len(log.starts) and len(log.sps):
            setup_s = max(0.0, float(log.sps[0, 0]) - float(log.starts[0]))
        labels = log.labels_at(at_steps)
        result.update(steps=at_steps, wall_s=setup_s + training_s,
                      labels=float("nan") if labels is None else labels)
    return result
