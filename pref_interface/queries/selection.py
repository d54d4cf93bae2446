"""Query selection (§2.2.4): which of the candidate clip pairs are worth a label.

`select_pairs` / `ClipBuffer.sample_new_pairs` take a `score` for the candidates; this module
makes the one the paper uses. App. A: draw 10x more candidate pairs than are shown and show those
with the highest variance of the predicted preference across the ensemble members. Beyond the
paper, B-Pref's entropy sampler shows those whose ensemble-mean preference is most uncertain,
and its k-center sampler those least like any pair shown before (coverage, no predictor).
Uniformly random pairs (no score) stay the default.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from clips.clip import Clip
from pref_interface.queries.pairs import Candidate, PairScorer

SELECTIONS = ("random", "disagreement", "entropy", "k_center")  # --query_selection
PREDICTOR_SELECTIONS = ("disagreement", "entropy")  # the selections that ask the ensemble

# P[left preferred] under each ensemble member: (left clips, right clips) -> (ensemble_size, B),
# e.g. `RewardPredictorEnsemble.predict_preference`.
PreferencePredictor = Callable[[Sequence[Clip], Sequence[Clip]], np.ndarray]


def _predicted(predict_preference: PreferencePredictor, candidates: Sequence[Candidate]
               ) -> np.ndarray:
    """Each member's P[left > right] for every candidate: (ensemble_size, n_candidates)."""
    p = np.asarray(predict_preference([c[1] for c in candidates], [c[3] for c in candidates]),
                   dtype=np.float64)
    assert p.ndim == 2 and p.shape[1] == len(candidates), (p.shape, len(candidates))
    return p


def disagreement_score(predict_preference: PreferencePredictor) -> PairScorer:
    """A `score` for `select_pairs`: the variance across ensemble members of the predicted
    P[left > right] of each candidate pair (§2.2.4). One call scores all candidates at once.

    With a single member the variance is 0 everywhere, so the choice falls back to the
    candidates' (random) order.
    """
    def score(candidates: Sequence[Candidate]) -> np.ndarray:
        return _predicted(predict_preference, candidates).var(axis=0) if candidates \
            else np.zeros(0)

    return score


def entropy_score(predict_preference: PreferencePredictor) -> PairScorer:
    """A `score` for `select_pairs`: the entropy (nats) of the ensemble's mean P[left > right],
    highest where the predictor is least sure which clip a person prefers (B-Pref's entropy
    sampler; a single member works too)."""
    def score(candidates: Sequence[Candidate]) -> np.ndarray:
        if not candidates:
            return np.zeros(0)
        p = np.clip(_predicted(predict_preference, candidates).mean(axis=0), 1e-12, 1 - 1e-12)
        return -(p * np.log(p) + (1 - p) * np.log(1 - p))

    return score


class KCenterScore:
    """A `score` for `select_pairs` by coverage (B-Pref's k-center sampler): candidates are ranked
    by farthest-first traversal, each next one the farthest from the pairs shown before and from
    those ranked above it, so the top `k` are the greedy k-center choice for any `k`. A pair's
    feature is its two clips' frames, mean-pooled 6x6 (14x14 pixels) and joined left then right.
    `select_pairs` tells it which pairs were shown (`record`); the latest `memory` are kept.
    """

    def __init__(self, memory: int = 2000):
        self.memory = memory
        self.n_shown = 0
        self._shown: np.ndarray | None = None  # (memory, feature) ring of the pairs shown
        self._norms = np.zeros(memory, np.float32)  # their squared lengths
        self._scored: dict[tuple[int, int], np.ndarray] = {}  # the last candidates' features

    @staticmethod
    def feature(candidate: Candidate) -> np.ndarray:
        """float32: both clips' frames pooled to 14x14, scaled to [0, 1], left then right."""
        pooled = [c.frames().reshape(-1, 14, 6, 14, 6).mean(axis=(2, 4)).ravel()
                  for c in (candidate[1], candidate[3])]
        return (np.concatenate(pooled) / 255.0).astype(np.float32)

    def __call__(self, candidates: Sequence[Candidate]) -> np.ndarray:
        if not candidates:
            return np.zeros(0)
        f = np.stack([self.feature(c) for c in candidates])
        self._scored = {(c[0], c[2]): f[i] for i, c in enumerate(candidates)}
        # squared distance of each candidate to its nearest shown pair (inf when none was shown)
        nearest = np.full(len(f), np.inf)
        n = min(self.n_shown, self.memory)
        if n and self._shown is not None and self._shown.shape[1] == f.shape[1]:
            d = (f ** 2).sum(1)[:, None] + self._norms[None, :n] - 2 * f @ self._shown[:n].T
            nearest = d.min(axis=1)
        rank = np.empty(len(f))
        for r in range(len(f)):  # farthest first; ties (nothing shown yet) keep the random order
            j = int(np.argmax(nearest))
            rank[j], nearest[j] = r, -np.inf
            left = nearest > -np.inf
            nearest[left] = np.minimum(nearest[left], ((f[left] - f[j]) ** 2).sum(1))
        return -rank

    def record(self, shown: Sequence[Candidate]) -> None:
        """Remember the pairs that were shown, so later candidates are scored against them."""
        for c in shown:
            f = self._scored.get((c[0], c[2]))  # scored just before: not unpacked again
            if f is None:
                f = self.feature(c)
            if self._shown is None or self._shown.shape[1] != len(f):
                self._shown, self.n_shown = np.empty((self.memory, len(f)), np.float32), 0
            i = self.n_shown % self.memory
            self._shown[i], self._norms[i] = f, f @ f
            self.n_shown += 1


def make_pair_scorer(selection: str, predict_preference: PreferencePredictor | None = None
                     ) -> PairScorer | None:
    """The `score` a CLI value names: "random" gives None (uniform pairs); "k_center" needs
    nothing; "disagreement" and "entropy" need `predict_preference` (labelling's copy of the
    ensemble)."""
    if selection == "random":
        return None
    if selection == "k_center":
        return KCenterScore()
    scorers = {"disagreement": disagreement_score, "entropy": entropy_score}
    assert set(scorers) == set(PREDICTOR_SELECTIONS)
    if selection in scorers:
        if predict_preference is None:
            raise ValueError(f"{selection} selection needs the reward predictor ensemble")
        return scorers[selection](predict_preference)
    raise ValueError(f"unknown query selection {selection!r}; expected one of: {', '.join(SELECTIONS)}")
