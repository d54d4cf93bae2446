"""Who answers the queries: anything with `label(left, right) -> mu | None`.

The synthetic oracle of §3.1 is here; noisy scripted teachers and the human terminal labeller
implement the same `Labeller` protocol.
"""
from __future__ import annotations

from typing import Protocol, runtime_checkable

from pref_interface.segment import Segment


@runtime_checkable
class Labeller(Protocol):
    """Answers a query about two clips.

    `label` returns mu, the probability that `left` is better (1.0 left, 0.0 right, 0.5 equally
    good), or None when the pair is incomparable (§2.2.2: such pairs are not stored). It may block
    (a human thinking). `source` says what kind of labels these are: "synthetic" or "human".
    """

    source: str

    def label(self, left: Segment, right: Segment) -> float | None: ...


class OracleTeacher:
    """§3.1 synthetic labels: prefers the clip with the higher sum of true rewards; ties get 0.5."""

    source = "synthetic"

    def label(self, left: Segment, right: Segment) -> float:
        r_left, r_right = left.true_return, right.true_return
        if r_left > r_right:
            return 1.0
        if r_left < r_right:
            return 0.0
        return 0.5
