"""A2C's end of a queue to another process: never blocks the agent (an item that finds the queue
full is dropped), and never leaves the reader holding half an item (`close`)."""
from __future__ import annotations

import queue
from typing import Any

from runtime.queues import close_sending_end

FLUSH_TIMEOUT_S = 5.0  # how long a closing sender waits for its last items to be written


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
