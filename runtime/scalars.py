"""TensorBoard scalars without torch: the processes' one writer.

torch's SummaryWriter writes through the same tensorboard EventFileWriter, but importing it loads
torch and its memory, which labelling and a wrapper's caller need for nothing
else.
"""
from __future__ import annotations

import math
import os
import time

from tensorboard.compat.proto.event_pb2 import Event, SessionLog
from tensorboard.compat.proto.summary_pb2 import Summary
from tensorboard.summary.writer.event_file_writer import EventFileWriter


class ScalarWriter:
    """Writes scalar events into `log_dir` (the event writer creates it), as TensorBoard reads
    them.

    `purge_step`: where a resumed process starts (the step of the checkpoint it loaded). A run
    stopped without a checkpoint at its end had logged steps it will now play again; a session
    start just after `purge_step` makes TensorBoard (and `experiments.runlog`) drop this
    directory's earlier points logged after the checkpoint, so the curves go on from it instead
    of doubling back. Points at the checkpoint's own step were logged before it was saved (the
    last ones as the process stopped) and are kept.
    """

    def __init__(self, log_dir: str | os.PathLike, purge_step: int | None = None) -> None:
        self._events = EventFileWriter(str(log_dir))
        if purge_step is not None:  # TensorBoard drops the points at and after a start's step
            self._events.add_event(Event(wall_time=time.time(), step=int(purge_step) + 1,
                                         session_log=SessionLog(status=SessionLog.START)))

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        self._events.add_event(Event(
            wall_time=time.time(), step=int(step),
            summary=Summary(value=[Summary.Value(tag=tag, simple_value=float(value))])))

    def flush(self) -> None:
        self._events.flush()

    def close(self) -> None:
        self._events.close()


class Telemetry:
    """A process's scalars, recorded beside the algorithm and written together, as
    stable-baselines3's logger does: `record(tag, value)` wherever a figure arises (the last value
    counts), `record_max` (the largest counts), `record_each` for events that are each a point
    (an episode's return) at a step of their own, and `dump(step)` writes what was recorded
    since the last dump, the others at that step. `due()` says whether `every_s` seconds have
    passed since the last dump."""

    def __init__(self, log_dir: str | os.PathLike | None, purge_step: int | None = None,
                 every_s: float = 1.0) -> None:
        self.writer = ScalarWriter(log_dir, purge_step) if log_dir is not None else None
        self.every_s = every_s
        self.last_dump = time.monotonic()
        self._last: dict[str, float] = {}
        self._each: list[tuple[str, float, int]] = []

    def record(self, tag: str, value: float) -> None:
        self._last[tag] = float(value)

    def record_max(self, tag: str, value: float) -> None:
        """Keep the largest value recorded under `tag` since the last dump (a NaN stays)."""
        value, kept = float(value), self._last.get(tag)
        if kept is None or value > kept or math.isnan(value):
            self._last[tag] = value

    def record_each(self, tag: str, value: float, step: int) -> None:
        """One point of its own, written (at the next dump) at `step`."""
        self._each.append((tag, float(value), int(step)))

    def since_dump(self) -> float:
        """Seconds since the last dump (or since this was made)."""
        return time.monotonic() - self.last_dump

    def due(self) -> bool:
        return self.since_dump() >= self.every_s

    def dump(self, step: int) -> None:
        if self.writer is not None:
            for tag, value, at in self._each:
                self.writer.add_scalar(tag, value, at)
            for tag, value in self._last.items():
                self.writer.add_scalar(tag, value, step)
            self.writer.flush()
        self._last.clear()
        self._each.clear()
        self.last_dump = time.monotonic()

    def close(self, step: int | None = None) -> None:
        """Write what was recorded since the last dump at `step` (dropped without one), then
        close the file."""
        if step is not None and (self._last or self._each):
            self.dump(step)
        if self.writer is not None:
            self.writer.close()
