"""TensorBoard scalars without torch: the processes' one writer.

torch's SummaryWriter writes through the same tensorboard EventFileWriter, but importing it loads
torch (≈200 MB RSS), which the preference interface and a wrapper's caller need for nothing else.
"""
from __future__ import annotations

import os
import time

from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import Summary
from tensorboard.summary.writer.event_file_writer import EventFileWriter


class ScalarWriter:
    """Writes scalar events into `log_dir` (the event writer creates it), as TensorBoard reads
    them."""

    def __init__(self, log_dir: str | os.PathLike) -> None:
        self._events = EventFileWriter(str(log_dir))

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        self._events.add_event(Event(
            wall_time=time.time(), step=int(step),
            summary=Summary(value=[Summary.Value(tag=tag, simple_value=float(value))])))

    def flush(self) -> None:
        self._events.flush()

    def close(self) -> None:
        self._events.close()
