"""The two ends of a `multiprocessing.Queue` between processes, so that neither side dying at
any instant holds up the other.

A queue's item larger than the pipe's buffer (a label with its two clips, an episode) is written
in parts by the sender's feeder thread, and reading the queue waits for all of it. So:
- the reading end is read in a thread of its own (`QueueReader`): a sender killed part-way
  through an item holds up only that thread, and the process goes on, stops and saves;
- the sending end, closing, gives the feeder a bounded time to finish the items already put
  (`close_sending_end`): a reader part-way through one gets it whole, and a reader that stopped
  reading does not hold up the sender's exit.
"""
from __future__ import annotations

import queue
import threading
from typing import Any


class QueueReader:
    """Takes every item of `q`, in order, as it arrives; `get_nowait` hands them on. An item that
    cannot be read (say, one that does not unpickle) is raised from there, in the reading
    process, as reading the queue itself would raise it."""

    def __init__(self, q: Any, name: str = "queue-reader") -> None:
        self._items: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._read, args=(q,), name=name, daemon=True).start()

    def _read(self, q: Any) -> None:
        while True:
            try:
                item = q.get()
            except Exception as e:  # noqa: BLE001 - handed to the reader, raised there
                if _closed_here(q):  # this process closed the queue: nothing more comes
                    return
                # Whatever the item's unpickling raised (EOFError and ValueError too). The pipe
                # itself cannot end here: a Queue carries both its ends into every process.
                item = _Unreadable(e)
            self._items.put(item)

    def get_nowait(self) -> Any:
        """The next item; queue.Empty when none has arrived whole."""
        return _checked(self._items.get_nowait())

    def get(self, timeout: float) -> Any:
        """The next item, waited for up to `timeout` seconds; queue.Empty when none came whole."""
        return _checked(self._items.get(timeout=timeout))


class _Unreadable:
    def __init__(self, error: Exception) -> None:
        self.error = error


def _closed_here(q: Any) -> bool:
    # CPython's multiprocessing.Queue marks itself closed, and its get() then raises ValueError.
    return bool(getattr(q, "_closed", False))


def _checked(item: Any) -> Any:
    if isinstance(item, _Unreadable):
        raise item.error
    return item


def close_sending_end(q: Any, timeout_s: float) -> None:
    """This process sends no more on `q`: wait up to `timeout_s` for the feeder thread to finish
    writing the items already put, so that a reader part-way through one gets all of it, and
    never longer (the process's exit does not wait for a reader that stopped reading)."""
    if not hasattr(q, "close"):
        return  # a plain queue.Queue (tests): nothing in flight between processes
    q.cancel_join_thread()
    q.close()
    # `join_thread` has no timeout and does nothing once the join is cancelled, so wait on the
    # feeder thread itself (CPython's `Queue._thread`).
    feeder = getattr(q, "_thread", None)
    if feeder is not None:
        feeder.join(timeout_s)
