"""How many labels should exist at each point of a run: the labelling schedule.

App. A: "we decreased the rate of labelling every 5*10^6 frames to be roughly proportional to
5*10^6 / (T + 5*10^6)", T = frames so far. Frames are emulator frames: agent steps x 4 with the
Atari frameskip (MovingDot uses the same preprocessing). Here the rate is held constant within
each block of 5*10^6 frames, r_k = r_0 / (k + 1) for block k, and r_0 is chosen so that the whole
label budget is spent by the end of the run. The synthetic labeller asks `labels_due(T)` and
labels only while it has made fewer.
"""
from __future__ import annotations

import math

FRAMESKIP = 4  # App. A: Atari frameskip; frames = agent steps x 4
ANNEAL_EVERY_FRAMES = 5_000_000  # App. A: the rate is lowered every 5*10^6 frames
KINDS = ("constant", "annealed")


class LabelSchedule:
    """Cumulative labels due after `T` frames, initial labels included.

    Args:
        kind: "annealed" (App. A: rate proportional to 5e6 / (T + 5e6), lowered every 5e6 frames)
            or "constant" (labels due grow linearly in T).
        max_labels: labels due by `total_frames` (and never more).
        total_frames: the run's length in frames (agent steps x FRAMESKIP).
        n_initial: labels due at T = 0 (App. A: 500 from the untrained policy).
        anneal_every: frames per block of constant rate in the annealed schedule.
    """

    def __init__(self, kind: str, max_labels: int, total_frames: int, n_initial: int = 0,
                 anneal_every: int = ANNEAL_EVERY_FRAMES) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown label schedule {kind!r}; expected one of: {', '.join(KINDS)}")
        if not 0 <= n_initial <= max_labels:
            raise ValueError(f"need 0 <= n_initial <= max_labels, got {n_initial} and {max_labels}")
        if total_frames <= 0 or anneal_every <= 0:
            raise ValueError(f"total_frames and anneal_every must be positive, got {total_frames}, "
                             f"{anneal_every}")
        self.kind = kind
        self.max_labels = int(max_labels)
        self.total_frames = int(total_frames)
        self.n_initial = int(n_initial)
        self.anneal_every = int(anneal_every)
        # Labels per frame at T = 0, so that labels_due(total_frames) == max_labels.
        self.initial_rate = (self.max_labels - self.n_initial) / self._rate_integral(self.total_frames)

    def _relative_rate(self, frames: float) -> float:
        """The rate at `frames` relative to the rate at T = 0."""
        if self.kind == "constant":
            return 1.0
        block = math.floor(frames / self.anneal_every)  # T_k = k * 5e6 within block k
        return 1.0 / (block + 1)  # 5e6 / (T_k + 5e6)

    def _rate_integral(self, frames: float) -> float:
        """Integral of the relative rate from 0 to `frames`."""
        if self.kind == "constant":
            return float(frames)
        full = math.floor(frames / self.anneal_every)
        # Harmonic sum over the finished blocks, plus the part of the current one.
        harmonic = math.fsum(1.0 / (k + 1) for k in range(full))
        return self.anneal_every * harmonic + (frames - full * self.anneal_every) / (full + 1)

    def rate(self, frames_so_far: float) -> float:
        """Labels per frame at `frames_so_far` (0 once the run's length is reached)."""
        if frames_so_far >= self.total_frames:
            return 0.0
        return self.initial_rate * self._relative_rate(max(0.0, frames_so_far))

    def labels_due(self, frames_so_far: float) -> int:
        """How many labels should exist after `frames_so_far` frames, the initial ones included:
        non-decreasing, `n_initial` at 0, `max_labels` from `total_frames` on."""
        if frames_so_far >= self.total_frames:
            return self.max_labels
        due = self.n_initial + self.initial_rate * self._rate_integral(max(0.0, frames_so_far))
        # The small epsilon keeps float round-off from holding back a label that is due exactly.
        return min(self.max_labels, math.floor(due + 1e-9))
