"""The reward predictor as other processes use it: built in the process that needs it, kept up to
date from the trainer's shared weights."""
from __future__ import annotations

import numpy as np
import torch

from reward_predictor.ensemble import RewardPredictorEnsemble
from reward_predictor.normaliser import RunningNormaliser
from reward_predictor.process import TrainerConfig, build_ensemble
from reward_predictor.shared import SharedWeights


class _SharedEnsemble:
    """A consumer's own copy of the ensemble, in eval mode, kept up to date by pulling the trainer's
    published weights (cheap when nothing changed, never waits long)."""

    def __init__(self, shared_weights: SharedWeights, config: TrainerConfig):
        self.shared_weights = shared_weights
        # Start from the weights the trainer starts from (the pretrained or resumed predictor),
        # so that nothing is predicted by an untrained copy before the trainer first publishes.
        self.ensemble = (load_ensemble(config, config.load_ckpt_path) if config.load_ckpt_path
                         else build_ensemble(config))
        self.ensemble.eval()


class PredictedReward(_SharedEnsemble):
    """A2C's reward function r̂: the members' normalised predictions, averaged (App. A.2), with
    the trainer's newest weights at every call."""

    def __call__(self, obs: np.ndarray, actions: np.ndarray) -> np.ndarray:
        self.shared_weights.pull(self.ensemble)
        return self.ensemble.reward(obs, actions)


class PreferencePredictor(_SharedEnsemble):
    """P[left > right] under each member: what disagreement-based query selection needs (App. A)."""

    def __call__(self, left, right) -> np.ndarray:
        self.shared_weights.pull(self.ensemble)  # the newest weights at every call
        return self.ensemble.predict_preference(left, right)


class TeacherReward:
    """A2C's reward from a synthetic teacher's own per-step score (an Enduro teacher's
    `step_scores`), scaled as r̂ is (App. A.2: mean 0, std `reward_std`), with running statistics
    of the policy's own steps (r̂'s come from its training clips; a resumed run gathers them
    again): about what a predictor that learnt the teacher perfectly would give
    (`--teacher_reward`)."""

    # A floor on the score's variance, so that the first level steps after a stretch of none
    # are not scaled up without bound: a level step (score 1) is then at most 10 stds.
    VAR_FLOOR = 0.01

    def __init__(self, teacher: str, reward_std: float) -> None:
        from pref_interface.labellers.teachers import make_teacher

        self.teacher = make_teacher(teacher)
        self.normaliser = RunningNormaliser(reward_std, eps=self.VAR_FLOOR)

    def __call__(self, obs: np.ndarray, actions: np.ndarray) -> np.ndarray:
        return self.scale(self.teacher.step_scores(obs))

    def scale(self, scores: np.ndarray) -> np.ndarray:
        """The teacher's step scores (N,) scaled as r̂, the running statistics updated first."""
        raw = torch.from_numpy(scores)
        self.normaliser.update(raw)
        return self.normaliser(raw).numpy().astype(np.float32)


def load_ensemble(config: TrainerConfig, ckpt_path: str) -> RewardPredictorEnsemble:
    """An ensemble restored from a trainer checkpoint; raises CheckpointError."""
    from reward_predictor.trainer import RewardPredictorTrainer

    ensemble = build_ensemble(config)
    RewardPredictorTrainer(ensemble).load(ckpt_path, optimizers=False)
    return ensemble


def frozen_reward(config: TrainerConfig, ckpt_path: str):
    """A reward function from a saved predictor that never changes (no labels, no training)."""
    return load_ensemble(config, ckpt_path).reward
