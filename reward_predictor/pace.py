"""A floor on reward-predictor training per agent step.

The paper's predictor trains on about 1 label per 10 agent steps (App. A; REFERENCE.md). On two
CPU cores, with the trainer sharing them with A2C, ours managed about 1 per 100, and its reward
was easy for the policy to exploit (README, "Pong from preferences"). With a floor, A2C waits
before each rollout while the trainer is behind, and the trainer, seeing it wait, stops resting
and takes the idle threads.
"""
from __future__ import annotations

import time
from typing import Any

from reward_predictor.shared import SharedWeights

POLL_S = 0.02  # how often a waiting A2C rechecks the trainer's progress


class PredictorPace:
    """Built in the A2C process from the shared-weights handle; both counts start when the
    processes (re)start, so a resumed run keeps the pace from where it resumed."""

    def __init__(self, shared_weights: SharedWeights, min_labels_per_step: float = 0.0) -> None:
        self.shared_weights = shared_weights
        self.min_labels_per_step = min_labels_per_step

    def labels_per_step(self, agent_steps: int) -> float:
        """Labels each member has trained on per agent step so far (NaN before any step)."""
        return self.shared_weights.labels_trained / agent_steps if agent_steps else float("nan")

    def wait(self, agent_steps: int, stop_event: Any = None) -> float:
        """Block while the trainer has trained on fewer than `min_labels_per_step * agent_steps`
        labels per member, or until `stop_event` is set; returns the seconds waited."""
        needed = self.min_labels_per_step * agent_steps
        if self.shared_weights.labels_trained >= needed:
            return 0.0
        start = time.monotonic()
        self.shared_weights.consumer_waiting = True
        try:
            while self.shared_weights.labels_trained < needed:
                if stop_event is None:
                    time.sleep(POLL_S)
                elif stop_event.wait(POLL_S):
                    break
        finally:
            self.shared_weights.consumer_waiting = False
        return time.monotonic() - start
