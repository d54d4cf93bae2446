"""The reading end of a queue from another process, read in a thread of its own.

`multiprocessing.Queue.get_nowait` waits for the rest of a message already begun in the pipe: a
sender killed part-way through writing one (a label with its two clips is larger than the pipe's
buffer) would leave the reading process waiting forever, past its stop and its checkpoint. Read
here, such a message holds up only the reading thread; the process goes on, stops and saves.
"""
from __future__ import annotations

import queue
import threading
from typing import Any


class QueueReader:
    """Takes every item of `q`, in order, as it arrives; `get_nowait` hands them on."""

    def __init__(self, q: Any, name: str = "queue-reader") -> None:
        self._items: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._read, args=(q,), name=name, daemon=True).start()

    def _read(self, q: Any) -> None:
        while True:
            try:
                item = q.get()
            except (EOFError, OSError, ValueError):  # the queue closed: nothing more comes
                return
            self._items.put(item)

    def get_nowait(self) -> Any:
        """The next item; queue.Empty when none has arrived whole."""
        return self._items.get_nowait()

    def get(self, timeout: float) -> Any:
        """The next item, waited for up to `timeout` seconds; queue.Empty when none came whole."""
        return self._items.get(timeout=timeout)
