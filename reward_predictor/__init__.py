"""Reward predictor r̂: an ensemble of nets fit to preference labels (Sec. 2.2.3, App. A.2).

The names below are imported on first use, so `reward_predictor.config` stays free of torch.
"""
from __future__ import annotations

import importlib
from typing import Any

_HOMES = {
    "AtariRewardNet": "nets", "MovingDotRewardNet": "nets", "make_reward_net": "nets",
    "RewardPredictorEnsemble": "ensemble", "bootstrap_counts": "ensemble",
    "preference_loss": "loss", "RunningNormaliser": "normaliser", "SharedWeights": "shared",
    "TrainerConfig": "config", "TrainerStats": "config",
    "build_ensemble": "process", "build_trainer": "process", "PredictorTraining": "process",
    "CheckpointError": "trainer", "RewardPredictorTrainer": "trainer",
}
__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'reward_predictor' has no attribute {name!r}")
    return getattr(importlib.import_module(f"reward_predictor.{_HOMES[name]}"), name)
