"""The trainer reads its labels through a thread: a message its sender was killed part-way
through writing holds up only that thread."""
import multiprocessing as mp
import queue
import time

import pytest

from runtime.queues import QueueReader
from tests.helpers import wait_until, write_half_a_message


def test_a_half_written_message_holds_up_only_the_reading_thread():
    q = mp.get_context("spawn").Queue()
    reader = QueueReader(q)
    q.put({"label": 1})
    got = []
    wait_until(lambda: _take(reader, got), 10, "the whole label handed on")
    assert got == [{"label": 1}]
    write_half_a_message(q)  # a sender killed part-way through a large label
    time.sleep(0.2)  # the reading thread is now inside that message
    start = time.monotonic()
    with pytest.raises(queue.Empty):
        reader.get_nowait()  # q.get_nowait() would wait for the rest forever
    assert time.monotonic() - start < 1.0


def _unpickle_fails():
    raise RuntimeError("this item does not unpickle")


class _Unpicklable:
    def __reduce__(self):
        return _unpickle_fails, ()


def test_an_item_that_cannot_be_read_is_raised_to_the_reader_and_the_next_still_comes():
    """As reading the queue itself would: the process fails, rather than train on without the
    labels behind it."""
    q = mp.get_context("spawn").Queue()
    reader = QueueReader(q)
    q.put(_Unpicklable())
    q.put({"label": 2})
    wait_until(lambda: not reader._items.empty(), 10, "the item read")  # noqa: SLF001
    with pytest.raises(RuntimeError, match="does not unpickle"):
        reader.get_nowait()
    assert reader.get(timeout=10) == {"label": 2}


def _take(reader: QueueReader, got: list) -> bool:
    try:
        got.append(reader.get_nowait())
    except queue.Empty:
        return False
    return True
