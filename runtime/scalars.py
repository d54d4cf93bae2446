"""TensorBoard scalars without torch: the processes' one writer.

torch's SummaryWriter writes through the same tensorboard EventFileWriter, but importing it loads
torch (≈200 MB RSS), which the preference interface and a wrapper's caller need for nothing else.
"""
from __future__ import annotations

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
    start at `purge_step` makes TensorBoard (and `experiments.runlog`) drop this directory's
    earlier points from that step on, so the curves go on from the checkpoint instead of doubling
    back.
    """

    def __init__(self, log_dir: str | os.PathLike, purge_step: int | None = None) -> None:
        self._events = EventFileWriter(str(log_dir))
        if purge_step is not None:
            self._events.add_event(Event(wall_time=time.time(), step=int(purge_step),
                                         session_log=SessionLog(status=SessionLog.START)))

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        self._events.add_event(Event(
            wall_time=time.time(), step=int(step),
            summary=Summary(value=[Summary.Value(tag=tag, simple_value=float(value))])))

    def flush(self) -> None:
        self._events.flush()

    def close(self) -> None:
        self._events.close()
