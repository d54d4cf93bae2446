"""Clips held packed: the same data back, each clip held once, freed with its last label."""
from __future__ import annotations

import numpy as np

from pref_interface.packed import ClipPool, PackedSegment
from pref_interface.segment import Preference, Segment
from reward_predictor import MovingDotRewardNet, RewardPredictorEnsemble, RewardPredictorTrainer
from tests.helpers import random_clip


def _segment(rng: np.random.Generator, t: int = 25, dones: bool = True) -> Segment:
    return random_clip(rng, t, dot_density=0.05, dones=dones)  # sparse, as game frames are


def test_a_packed_segment_unpacks_to_the_same_clip_and_is_far_smaller():
    rng = np.random.default_rng(0)
    for dones in (True, False):
        seg = _segment(rng, dones=dones)
        packed = PackedSegment.pack(seg)
        back = packed.unpack()
        assert np.array_equal(back.frames, seg.frames) and np.array_equal(back.actions, seg.actions)
        assert np.array_equal(back.true_rewards, seg.true_rewards)
        assert (back.dones is None) == (seg.dones is None)
        assert seg.dones is None or np.array_equal(back.dones, seg.dones)
        assert packed.nbytes < seg.frames.nbytes / 4


def test_a_clip_in_two_labels_is_held_once_and_goes_with_its_last_label():
    rng = np.random.default_rng(1)
    a, b, c, d, e = (_segment(rng) for _ in range(5))
    trainer = RewardPredictorTrainer(RewardPredictorEnsemble(MovingDotRewardNet, n_members=1),
                                     max_prefs=2)
    trainer.add(Preference(a, b, 1.0))
    trainer.add(Preference(a, c, 0.0))  # the same clip again, as a label pickled apart would be
    assert len(trainer.clips) == 3
    trainer.add(Preference(d, e, 0.5))  # the first label goes; `a` stays with the second
    assert len(trainer.clips) == 4
    trainer.add(Preference(d, b, 1.0))  # the second goes, and `a` and `c` with it
    assert len(trainer.clips) == 3
    held = trainer.held_labels()
    assert [p.mu for p in held] == [0.5, 1.0]
    assert np.array_equal(held[1].left.frames, d.frames) and held[0].left is held[1].left


def test_a_pool_counts_references_per_clip():
    rng = np.random.default_rng(2)
    pool, seg = ClipPool(), _segment(rng)
    key = pool.add(seg)
    assert pool.add(Segment(seg.frames.copy(), seg.actions.copy(), seg.true_rewards.copy(),
                            seg.dones)) == key
    pool.release(key)
    assert len(pool) == 1 and np.array_equal(pool.get(key).frames, seg.frames)
    pool.release(key)
    assert len(pool) == 0


def test_a_label_that_arrives_packed_is_held_as_it_came():
    # The interface sends labels with their clips packed (no raw frames cross the queue).
    rng = np.random.default_rng(3)
    a, b = _segment(rng), _segment(rng)
    trainer = RewardPredictorTrainer(RewardPredictorEnsemble(MovingDotRewardNet, n_members=1))
    trainer.add(Preference(PackedSegment.pack(a), PackedSegment.pack(b), 0.0, is_validation=True))
    trainer.add(Preference(a, b, 1.0))  # the same clips, raw: still held once
    assert len(trainer.clips) == 2
    held = trainer.held_labels()
    assert np.array_equal(held[0].left.frames, a.frames) and held[0].is_validation
    assert np.array_equal(held[1].right.frames, b.frames) and held[1].mu == 1.0
