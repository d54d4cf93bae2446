"""How many torch threads the trainer's next step gets.

While A2C waits for the predictor (and in pretraining) its thread is free, and a step on both
cores is faster on Pong; MovingDot's small net gains nothing. But a step on two threads meets at
every operation's end, and when another process keeps a core busy (a browser showing the
labelling page, a build, another job: Linux shares the CPU between its sessions, or autogroups,
before it reads `nice`), the thread that waits for the descheduled one stalls the step many times
over (docs/results.md). So borrowing is kept only while its steps are faster."""
from __future__ import annotations

import collections

import torch

PROBE_EVERY_STEPS = 100  # while not borrowing, one step in this many borrows again, to see
SAMPLES = 3  # recent steps per thread count whose median is compared


class ThreadChoice:
    """`threads(agent_waiting)` for the next step, `record(threads, seconds)` after it."""

    def __init__(self, own: int, borrowed: int) -> None:
        self.own, self.borrowed = own, borrowed
        self._seconds: dict[int, collections.deque] = {
            n: collections.deque(maxlen=SAMPLES) for n in (own, borrowed)}
        self._since_probe = 0

    def threads(self, agent_waiting: bool) -> int:
        if not agent_waiting or self.borrowed <= self.own:
            return self.own
        if self.borrowing_pays:
            return self.borrowed
        self._since_probe += 1
        if self._since_probe >= PROBE_EVERY_STEPS:
            self._since_probe = 0
            return self.borrowed
        return self.own

    def take(self, agent_waiting: bool) -> int:
        """`threads(agent_waiting)`, made torch's thread count for the step that follows."""
        n = self.threads(agent_waiting)
        if n != torch.get_num_threads():
            torch.set_num_threads(n)
        return n

    def record(self, threads: int, seconds: float) -> None:
        if threads in self._seconds:
            self._seconds[threads].append(seconds)

    @property
    def borrowing_pays(self) -> bool:
        """Whether steps on the borrowed threads are, lately, no slower than on its own."""
        return self._median(self.borrowed) <= self._median(self.own)

    def _median(self, threads: int) -> float:
        """The median of the recent steps on `threads`; 0 before any (so that each is tried)."""
        times = sorted(self._seconds[threads])
        return times[len(times) // 2] if times else 0.0
