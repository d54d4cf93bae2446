"""A floor, and optionally a ceiling, on reward-predictor training per agent step.

App. A.2: "The predictor is trained asynchronously from the RL agent, and on our hardware
typically processes 1 label per 10 RL timesteps." That describes their hardware, and "the
predictor" is the ensemble, so the rate may count each member's labels or all members' together;
the paper does not say. Left alone on a 2-core CPU our trainer fell far behind that pace and the
policy learnt to exploit its reward (docs/experiments.md, "Pong from preferences: what we
found"). With a floor, A2C waits
before each rollout while the trainer is behind, and the trainer, seeing it wait, stops resting
and takes the idle threads.

A ceiling does the converse: the trainer rests while it has trained on more labels per agent step
than it allows (`ahead_of_agent`). With the floor at the same value the pace is the same on any
machine: without one, how much the predictor trains per agent step is set by the processor and by
whatever else runs on it (`--reward_predictor_duty` is a share of time, not of steps).
"""
from __future__ import annotations

import time
from typing import Any

from reward_predictor.config import PACE_UNITS
from reward_predictor.shared import SharedWeights

POLL_S = 0.005  # how often a waiting A2C rechecks the trainer's progress (once a trainer step)


def labels_per_member(labels_per_step: float, unit: str, ensemble_size: int) -> float:
    """The floor on each member's labels per agent step for a pace that counts the labels of each
    `unit`: "member" (the stricter reading of App. A.2, the default) or "ensemble" (all members
    together, so each member trains 1/ensemble_size as much)."""
    if unit not in PACE_UNITS:
        raise ValueError(f"pace unit {unit!r} is none of {', '.join(PACE_UNITS)}")
    return labels_per_step if unit == "member" else labels_per_step / ensemble_size


def ceiling_of_pace(settings: Any) -> float:
    """--max_predictor_labels_per_step, never below --min_predictor_labels_per_step (or A2C and
    the trainer would wait for each other); 0: none."""
    ceiling = settings.max_predictor_labels_per_step
    return max(ceiling, settings.min_predictor_labels_per_step) if ceiling > 0 else 0.0


class PredictorPace:
    """Built in the A2C process from the shared-weights handle; both counts start when the
    processes (re)start, so a resumed run keeps the pace from where it resumed."""

    def __init__(self, shared_weights: SharedWeights, min_labels_per_step: float = 0.0) -> None:
        self.shared_weights = shared_weights
        self.min_labels_per_step = min_labels_per_step

    def labels_per_step(self, agent_steps: int) -> float:
        """Labels each member has trained on per agent step so far (NaN before any step)."""
        return self.shared_weights.labels_trained / agent_steps if agent_steps else float("nan")

    def wait(self, agent_steps: int, stop_event: Any = None, timeout_s: float | None = None
             ) -> float:
        """Block while the trainer has trained on fewer than `min_labels_per_step * agent_steps`
        labels per member, until `stop_event` is set or for at most `timeout_s`; returns the
        seconds waited. The steps are also the trainer's measure for a ceiling
        (`ahead_of_agent`)."""
        self.shared_weights.agent_steps = agent_steps
        needed = self.min_labels_per_step * agent_steps
        if self.shared_weights.labels_trained >= needed:
            return 0.0
        start = time.monotonic()
        self.shared_weights.consumer_waiting = True
        try:
            while self.shared_weights.labels_trained < needed:
                if timeout_s is not None and time.monotonic() - start >= timeout_s:
                    break
                if stop_event is None:
                    time.sleep(POLL_S)
                elif stop_event.wait(POLL_S):
                    break
        finally:
            self.shared_weights.consumer_waiting = False
        return time.monotonic() - start


def ahead_of_agent(shared_weights: SharedWeights, max_labels_per_step: float) -> bool:
    """Whether each member has trained on at least `max_labels_per_step` labels per agent step
    of the consumer's so far (never with a ceiling of 0: none)."""
    return max_labels_per_step > 0 and \
        shared_weights.labels_trained >= max_labels_per_step * shared_weights.agent_steps
