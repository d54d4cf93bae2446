"""Query selection (§2.2.4): which of the candidate clip pairs are worth a label.

`select_pairs` / `ClipBuffer.sample_new_pairs` take a `score` for the candidates; this module
makes the one the paper uses. App. A: draw 10x more candidate pairs than are shown and show those
with the highest variance of the predicted preference across the ensemble members. Uniformly random
pairs (no score) stay the default.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from pref_interface.pairs import Candidate, PairScorer
from pref_interface.clip import Clip

SELECTIONS = ("random", "disagreement")

# P[left preferred] under each ensemble member: (left clips, right clips) -> (n_members, B),
# e.g. `RewardPredictorEnsemble.predict_preference`.
PreferencePredictor = Callable[[Sequence[Clip], Sequence[Clip]], np.ndarray]


def disagreement_score(predict_preference: PreferencePredictor) -> PairScorer:
    """A `score` for `select_pairs`: the variance across ensemble members of the predicted
    P[left > right] of each candidate pair (§2.2.4). One call scores all candidates at once.

    With a single member the variance is 0 everywhere, so the choice falls back to the
    candidates' (random) order.
    """
    def score(candidates: Sequence[Candidate]) -> np.ndarray:
        if not candidates:
            return np.zeros(0)
        left = [c[1] for c in candidates]
        right = [c[3] for c in candidates]
        p = np.asarray(predict_preference(left, right), dtype=np.float64)
        assert p.ndim == 2 and p.shape[1] == len(candidates), (p.shape, len(candidates))
        return p.var(axis=0)

    return score


def make_pair_scorer(selection: str, predict_preference: PreferencePredictor | None = None
                     ) -> PairScorer | None:
    """The `score` a CLI value names: "random" gives None (uniform pairs), "disagreement" needs
    `predict_preference` (the interface's copy of the ensemble)."""
    if selection == "random":
        return None
    if selection == "disagreement":
        if predict_preference is None:
            raise ValueError("disagreement selection needs the reward predictor ensemble")
        return disagreement_score(predict_preference)
    raise ValueError(f"unknown query selection {selection!r}; expected one of: {', '.join(SELECTIONS)}")
