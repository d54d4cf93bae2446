"""The predicted reward r̂ as the agent sees it: built inside the A2C process from shared weights."""
from __future__ import annotations

import numpy as np

from reward_predictor.process import TrainerConfig, build_ensemble
from reward_predictor.shared import SharedWeights


class PredictedReward:
    """A2C's reward function: the ensemble's normalised, averaged prediction (App. A.2).

    Pulls the newest published weights before each call (cheap when nothing changed, never waits
    long), so a training step reaches the agent by its next rollout.
    """

    def __init__(self, shared_weights: SharedWeights, config: TrainerConfig):
        self.shared_weights = shared_weights
        self.ensemble = build_ensemble(config)
        self.ensemble.eval()
        self.shared_weights.pull(self.ensemble)

    def __call__(self, obs: np.ndarray, actions: np.ndarray) -> np.ndarray:
        self.shared_weights.pull(self.ensemble)
        return self.ensemble.reward(obs, actions)

    @property
    def version(self) -> int:
        return self.shared_weights.version


def frozen_reward(config: TrainerConfig, ckpt_path: str):
    """A reward function from a saved predictor that never changes (no labels, no training)."""
    ensemble = load_ensemble(config, ckpt_path)
    ensemble.eval()
    return ensemble.reward


def load_ensemble(config: TrainerConfig, ckpt_path: str):
    """An ensemble restored from a trainer checkpoint (for a frozen predictor)."""
    from reward_predictor.trainer import RewardPredictorTrainer

    ensemble = build_ensemble(config)
    RewardPredictorTrainer(ensemble).load(ckpt_path)
    return ensemble




class PreferencePredictor:
    """P[left > right] under each ensemble member, from the newest shared weights: what the
    preference interface needs for disagreement-based query selection (App. A)."""

    def __init__(self, shared_weights: SharedWeights, config: TrainerConfig):
        self.shared_weights = shared_weights
        self.ensemble = build_ensemble(config)
        self.ensemble.eval()

    def __call__(self, left, right) -> np.ndarray:
        self.shared_weights.pull(self.ensemble)
        return self.ensemble.predict_preference(left, right)
