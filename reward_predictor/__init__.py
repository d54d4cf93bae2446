"""Reward predictor r̂: an ensemble of nets fit to preference labels (Sec. 2.2.3, App. A.2)."""
from reward_predictor.ensemble import RewardPredictorEnsemble, bootstrap_counts
from reward_predictor.loss import preference_loss
from reward_predictor.nets import AtariRewardNet, MovingDotRewardNet, make_reward_net
from reward_predictor.normaliser import RunningNormaliser
from reward_predictor.process import TrainerConfig, TrainerStats, build_ensemble, run_trainer
from reward_predictor.shared import SharedWeights
from reward_predictor.trainer import CheckpointError, RewardPredictorTrainer

__all__ = [
    "AtariRewardNet", "CheckpointError", "MovingDotRewardNet", "RewardPredictorEnsemble",
    "RewardPredictorTrainer", "RunningNormaliser", "SharedWeights", "TrainerConfig",
    "TrainerStats", "bootstrap_counts", "build_ensemble", "make_reward_net", "preference_loss",
    "run_trainer",
]
