"""The trainer reads its labels through a thread: a message its sender was killed part-way
through writing holds up only that thread."""
import multiprocessing as mp
import os
import queue
import struct
import time

import pytest

from runtime.queue_reader import QueueReader
from tests.helpers import wait_until


def test_a_half_written_message_holds_up_only_the_reading_thread():
    q = mp.get_context("spawn").Queue()
    reader = QueueReader(q)
    q.put({"label": 1})
    got = []
    wait_until(lambda: _take(reader, got), 10, "the whole label handed on")
    assert got == [{"label": 1}]
    # What a sender killed part-way through a large label leaves: a length and only some bytes.
    os.write(q._writer.fileno(), struct.pack("!i", 1_000_000) + b"x" * 100)  # noqa: SLF001
    time.sleep(0.2)  # the reading thread is now inside that message
    start = time.monotonic()
    with pytest.raises(queue.Empty):
        reader.get_nowait()  # q.get_nowait() would wait for the rest forever
    assert time.monotonic() - start < 1.0


def _take(reader: QueueReader, got: list) -> bool:
    try:
        got.append(reader.get_nowait())
    except queue.Empty:
        return False
    return True
