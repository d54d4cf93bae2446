"""The reward predictor as the supervising process hands it to a child: real functions it can
import and pickle without importing torch (which is imported when they are called, in the
child). Pretraining is a process body (the trainer's is launch/loop.py's); r̂ for the agent and
P[left > right] for query selection are built in the process that uses them, from the shared
weights."""
from __future__ import annotations

from typing import Any


def run_pretraining(config: Any, **channels: Any) -> None:
    """The pretraining process's body: `reward_predictor.process.run_pretraining`."""
    from reward_predictor.process import run_pretraining as body

    body(config, **channels)


def predicted_reward(shared_weights: Any, config: Any):
    """The agent's r̂ (`reward_fn.PredictedReward`), kept up to date from the trainer."""
    from reward_predictor.reward_fn import PredictedReward

    return PredictedReward(shared_weights, config)


def preference_predictor(shared_weights: Any, config: Any):
    """Each member's P[left > right], for disagreement selection (`reward_fn`)."""
    from reward_predictor.reward_fn import PreferencePredictor

    return PreferencePredictor(shared_weights, config)


def frozen_reward(config: Any, ckpt_path: str):
    """r̂ from a saved predictor that never changes (`--frozen_reward_predictor`)."""
    from reward_predictor.reward_fn import frozen_reward as make

    return make(config, ckpt_path)


def teacher_reward(teacher: str, reward_std: float):
    """The teacher's per-step score as the agent's reward, normalised as r̂ is
    (`--teacher_reward`; `reward_fn.TeacherReward`)."""
    from reward_predictor.reward_fn import TeacherReward

    return TeacherReward(teacher, reward_std)


def check_predictor(config: Any, ckpt_path: str) -> None:
    """Load a predictor checkpoint (CheckpointError, one line, if it fails)."""
    from reward_predictor.reward_fn import load_ensemble

    load_ensemble(config, ckpt_path)
