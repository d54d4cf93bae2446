"""Which clips to compare: a buffer of recent clips and the choice of pairs to show."""
from __future__ import annotations

import math
from collections import OrderedDict
from itertools import combinations
from typing import Callable, Sequence

import numpy as np

from clips.clip import Clip

OVERSAMPLE = 10  # App. A: disagreement draws 10x more candidate pairs than it shows

Candidate = tuple[int, Clip, int, Clip]  # (id_a, clip_a, id_b, clip_b)
# Scores candidate pairs, higher = more worth asking about (e.g. the ensemble's disagreement).
PairScorer = Callable[[Sequence[Candidate]], np.ndarray]


def select_pairs(candidates: Sequence[Candidate], k: int, rng: np.random.Generator,
                 score: PairScorer | None = None) -> list[Candidate]:
    """Choose up to `k` of the candidate pairs to show.

    Without `score`, uniformly at random. With `score`, the `k` highest-scoring ones (§2.2.4: draw
    more candidate pairs than are shown and query those where the predictors disagree most).
    """
    k = min(k, len(candidates))
    if k <= 0:
        return []
    if score is None:
        chosen = rng.choice(len(candidates), size=k, replace=False)
    else:
        scores = np.asarray(score(candidates), dtype=np.float64)
        assert scores.shape == (len(candidates),), scores.shape
        chosen = np.argsort(-scores, kind="stable")[:k]
    shown = [candidates[j] for j in chosen]
    if hasattr(score, "record"):  # a score with memory (k-center) learns which pairs were shown
        score.record(shown)
    return shown


class ClipBuffer:
    """The most recent `max_clips` clips, each with an increasing id, and the pairs of them
    already offered for labelling (never offered twice). Clips are held packed, as they came.

    Each clip is put in the validation split with probability `val_fraction` when it arrives,
    and pairs are only drawn within a split. A label's split is then that of its clips, so no
    validation label shares a clip with a training label (a split drawn per label leaked
    validation into training: docs/experiments.md). The draw is a function of the seed and the
    clip's id, so a pair answered after its clips left the buffer (a person away, a team's slow
    tab) still has its split.
    """

    def __init__(self, max_clips: int = 1000, val_fraction: float = 0.0,
                 seed: int | np.random.SeedSequence = 0,
                 max_pairs_per_clip: int | None = None) -> None:
        assert max_clips >= 2 and 0.0 <= val_fraction < 1.0, (max_clips, val_fraction)
        assert max_pairs_per_clip is None or max_pairs_per_clip >= 1, max_pairs_per_clip
        self.max_clips = max_clips
        self.val_fraction = val_fraction
        # Labels made faster than clips arrive would reuse a few clips many times over: a cap makes
        # labelling wait for new clips (docs/experiments.md, "MovingDot's initial labels").
        self.max_pairs_per_clip = max_pairs_per_clip
        self._split_seed = (seed if isinstance(seed, np.random.SeedSequence)
                            else np.random.SeedSequence(seed))
        self._clips: OrderedDict[int, Clip] = OrderedDict()
        self._is_val: dict[int, bool] = {}
        self._given_split: dict[int, bool] = {}  # ids whose split was given, not drawn (add)
        self._next_id = 0
        # Pairs offered, (smaller id, larger id), among training [0] / validation [1] clips.
        self._offered: tuple[set[tuple[int, int]], ...] = (set(), set())
        self._pairs_offered = [0, 0]  # how many of each were ever offered, evicted ones included
        self._partners: dict[int, set[int]] = {}  # id -> ids it was offered with, for eviction

    def add(self, clip: Clip, is_validation: bool | None = None) -> int:
        """Keep a clip, evicting the oldest beyond `max_clips`; returns its id. Its split is
        drawn, unless `is_validation` gives it (a clip that comes back, as a demonstration does,
        keeps one split, so that it is in labels of one split only; two clips of the same
        content cut apart, say a still scene, may still fall in both)."""
        clip_id = self._next_id
        self._next_id += 1
        self._clips[clip_id] = clip
        if is_validation is not None:
            self._given_split[clip_id] = is_validation
        self._is_val[clip_id] = self.is_validation(clip_id)
        while len(self._clips) > self.max_clips:
            old, _ = self._clips.popitem(last=False)
            split = self._is_val.pop(old)
            for other in self._partners.pop(old, ()):
                self._offered[split].discard((min(old, other), max(old, other)))
                self._partners[other].discard(old)
        return clip_id

    def is_validation(self, clip_id: int) -> bool:
        """Whether a clip (and so every label on it) belongs to the validation split; also for
        a clip no longer held."""
        split = self._is_val.get(clip_id, self._given_split.get(clip_id))
        return self._draw_split(clip_id) if split is None else split

    def _draw_split(self, clip_id: int) -> bool:
        if not self.val_fraction:
            return False
        s = self._split_seed
        own = np.random.SeedSequence(s.entropy, spawn_key=(*s.spawn_key, clip_id))
        return bool(np.random.default_rng(own).random() < self.val_fraction)

    def __len__(self) -> int:
        return len(self._clips)

    @property
    def n_unoffered_pairs(self) -> int:
        return sum(self._n_unoffered(split) for split in (False, True))

    def _has_room(self, clip_id: int, extra: int = 0) -> bool:
        """Whether a clip may be offered in one more pair (`extra` pairs already chosen for it)."""
        cap = self.max_pairs_per_clip
        return cap is None or len(self._partners.get(clip_id, ())) + extra < cap

    def _ids(self, split: bool) -> np.ndarray:
        """The ids of one split that may still be offered."""
        return np.fromiter((i for i, v in self._is_val.items() if v == split and self._has_room(i)),
                           dtype=np.int64)

    def _n_unoffered(self, split: bool) -> int:
        """Pairs never offered among the clips of a split that may still be offered (an upper
        bound with a cap: one draw cannot use a clip more often than it has room for)."""
        ids = set(self._ids(split).tolist())
        offered_within = sum(len(self._partners.get(i, set()) & ids) for i in ids) // 2
        return len(ids) * (len(ids) - 1) // 2 - offered_within

    def sample_new_pairs(self, k: int, rng: np.random.Generator, score: PairScorer | None = None,
                         oversampling: int = OVERSAMPLE) -> list[Candidate]:
        """Up to `k` pairs of distinct clips never offered before, marked as offered now.

        With `score`, `oversampling * k` candidates are drawn and the best `k` kept (§2.2.4 / App.
        A: 10x more candidates than queries); without it, `k` random pairs. Which clip is left
        is random, so neither side is favoured. Fewer than `k` when the buffer runs out of pairs.
        """
        chosen: list[Candidate] = []
        for split in (True, False):  # validation first: training fills what it could not give
            wanted = self._validation_share(k) if split else k - len(chosen)
            if wanted > 0:
                drawn = self._draw_unoffered(wanted if score is None else wanted * oversampling,
                                             rng, split)
                candidates = [(a, self._clips[a], b, self._clips[b]) for a, b in drawn]
                chosen += select_pairs(candidates, wanted, rng, score)
        for a, _, b, _ in chosen:
            self._offered[self._is_val[a]].add((min(a, b), max(a, b)))
            self._pairs_offered[self._is_val[a]] += 1
            self._partners.setdefault(a, set()).add(b)
            self._partners.setdefault(b, set()).add(a)
        return chosen

    def _validation_share(self, k: int) -> int:
        """How many of the next `k` pairs should come from the validation split: as many as bring
        the share of validation pairs ever offered back to `val_fraction`. When the split has too
        few clips (labels coming faster than clips, as when gathering), training pairs fill in and
        the next calls make up the shortfall."""
        n_val, n_all = self._pairs_offered[True], sum(self._pairs_offered)
        return max(0, min(k, math.floor(self.val_fraction * (n_all + k)) - n_val))

    def _draw_unoffered(self, m: int, rng: np.random.Generator, split: bool
                        ) -> list[tuple[int, int]]:
        """`m` distinct unoffered id pairs within one split (fewer if there are not that many),
        random order."""
        m = min(m, self._n_unoffered(split))
        if m <= 0:
            return []
        ids = self._ids(split)
        found: dict[tuple[int, int], None] = {}  # insertion-ordered set
        chosen_for: dict[int, int] = {}  # pairs found so far per clip, for max_pairs_per_clip

        def take(pair: tuple[int, int]) -> bool:
            if pair in self._offered[split] or pair in found or not all(
                    self._has_room(i, chosen_for.get(i, 0)) for i in pair):
                return False
            found[pair] = None
            for i in pair:
                chosen_for[i] = chosen_for.get(i, 0) + 1
            return True
        # Rejection sampling is cheap while most pairs are unoffered (the usual case: the buffer
        # turns over long before its ~500k pairs are used up); enumerate when it stops working.
        for _ in range(20):
            a, b = rng.integers(len(ids), size=(2, 2 * (m - len(found)) + 8))
            for x, y in zip(ids[a[a != b]], ids[b[a != b]]):
                if take((int(min(x, y)), int(max(x, y)))) and len(found) == m:
                    break
            if len(found) == m:
                break
        else:
            pool = list(combinations(ids.tolist(), 2))
            for j in rng.permutation(len(pool)):
                if len(found) == m:
                    break
                take(pool[j])
        m = len(found)  # with a cap, fewer pairs can be possible than _n_unoffered counts
        flip = rng.random(m) < 0.5
        return [(b, a) if f else (a, b) for (a, b), f in zip(found, flip)]
