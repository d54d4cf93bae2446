"""A2C's end of a queue to another process: never blocks the agent, and never leaves the reader
holding half an item.

A `multiprocessing.Queue` writes each item through a feeder thread. If the sending process exits
while that thread is part-way through a large item (an episode can be several MB), the
reader that has started on it waits forever for the rest: the pipe stays open because the parent
holds its write end too. `QueueSender.close` gives the feeder a bounded time to finish, which is
plenty when the reader is alive and reading, and gives up when nobody reads.
"""
from __future__ import annotations

import queue
from typing import Any

FLUSH_TIMEOUT_S = 5.0


class QueueSender:
    """Puts items without waiting; an item that finds the queue full is dropped and counted (as in
    the reference implementation: clips are plentiful, the agent's time is not)."""

    def __init__(self, q: Any, dropped_counter: Any | None = None) -> None:
        """`dropped_counter`: an optional shared `multiprocessing.Value('i')` of drops."""
        self.queue = q
        self.dropped_counter = dropped_counter
        self.sent = 0
        self.dropped = 0
        # Should close() never run (a crash), items still buffered are lost rather than hold up
        # the exit of the sending process.
        if hasattr(q, "cancel_join_thread"):
            q.cancel_join_thread()

    def send(self, item: Any) -> bool:
        """Queue `item` if there is room; False (and one more drop counted) if not."""
        try:
            self.queue.put_nowait(item)
        except queue.Full:
            self.dropped += 1
            if self.dropped_counter is not None:
                with self.dropped_counter.get_lock():
                    self.dropped_counter.value += 1
            return False
        self.sent += 1
        return True

    def close(self, timeout_s: float = FLUSH_TIMEOUT_S) -> None:
        """No more items: see `close_sending_end`."""
        close_sending_end(self.queue, timeout_s)


def close_sending_end(q: Any, timeout_s: float = FLUSH_TIMEOUT_S) -> None:
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
