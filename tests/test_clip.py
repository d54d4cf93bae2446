"""The one clip form: packed from the agent to a batch, the same data back, each clip held once by
the trainer and freed with its last label, always pickled packed."""
from __future__ import annotations

import pickle

import numpy as np
import pytest

from clips.clip import Clip, Preference
from reward_predictor import (
    MovingDotRewardNet,
    RewardPredictorEnsemble,
    RewardPredictorTrainer,
)
from reward_predictor.clip_pool import ClipPool
from tests.helpers import clip_from_stacks, random_clip


def _sparse_clip(rng: np.random.Generator, t: int = 25, dones: bool = True) -> Clip:
    return random_clip(rng, t, dot_density=0.05, dones=dones)  # sparse, as game frames are


def test_a_clip_gives_back_its_frames_and_is_far_smaller_than_them():
    rng = np.random.default_rng(0)
    for dones in (True, False):
        frames = (rng.random((28, 84, 84)) < 0.05).astype(np.uint8) * 255
        actions, rewards = rng.integers(0, 6, 25), rng.normal(size=25).astype(np.float32)
        clip = Clip.pack(frames, actions, rewards, np.arange(25) == 3 if dones else None)
        assert np.array_equal(clip.frames(), frames) and clip.expanded is None
        assert np.array_equal(clip.stacks()[7], frames[7:11])
        assert (clip.dones is None) != dones and clip.n_episode_ends == int(dones)
        assert clip.nbytes < frames.nbytes / 4
        expanded = clip.expand()
        assert expanded.expanded is not None and np.array_equal(expanded.frames(), frames)
        assert expanded.key == clip.key and expanded.expand() is expanded


def test_a_clip_crosses_a_process_boundary_packed_even_when_expanded():
    clip = _sparse_clip(np.random.default_rng(4)).expand()
    sent = pickle.dumps(clip)
    assert len(sent) < clip.frames().nbytes / 4
    back = pickle.loads(sent)
    assert back.expanded is None and np.array_equal(back.frames(), clip.frames())


def test_a_clip_in_two_labels_is_held_once_and_goes_with_its_last_label():
    rng = np.random.default_rng(1)
    a, b, c, d, e = (_sparse_clip(rng) for _ in range(5))
    trainer = RewardPredictorTrainer(RewardPredictorEnsemble(MovingDotRewardNet, ensemble_size=1),
                                     max_prefs=2)
    trainer.add(Preference(a, b, 1.0))
    trainer.add(Preference(pickle.loads(pickle.dumps(a)), c, 0.0))  # `a` again, from a queue
    assert len(trainer.clips) == 3
    trainer.add(Preference(d, e, 0.5))  # the first label goes; `a` stays with the second
    assert len(trainer.clips) == 4
    trainer.add(Preference(d, b, 1.0))  # the second goes, and `a` and `c` with it
    assert len(trainer.clips) == 3
    held = trainer.held_labels()
    assert [p.mu for p in held] == [0.5, 1.0]
    assert np.array_equal(held[1].left.frames(), d.frames()) and held[0].left is held[1].left


def test_a_pool_counts_references_per_clip_and_holds_clips_packed():
    rng = np.random.default_rng(2)
    pool, clip = ClipPool(), _sparse_clip(rng)
    key = pool.add(clip.expand())
    assert pool.get(key).expanded is None
    assert pool.add(Clip.pack(clip.frames().copy(), clip.actions.copy(),
                              clip.true_rewards.copy(), clip.dones)) == key
    pool.release(key)
    assert len(pool) == 1 and np.array_equal(pool.get(key).frames(), clip.frames())
    pool.release(key)
    assert len(pool) == 0


def test_clips_carry_optional_episode_ends():
    stacks = np.zeros((3, 4, 84, 84), np.uint8)
    clip = clip_from_stacks(stacks, np.zeros(3), np.zeros(3))
    assert clip.dones is None and clip.n_episode_ends == 0
    clip = clip_from_stacks(stacks, np.zeros(3), np.zeros(3), dones=[0, 0, 1])
    assert clip.dones.dtype == bool and clip.n_episode_ends == 1
    with pytest.raises(AssertionError):
        Clip.pack(clip.frames(), clip.actions, clip.true_rewards, np.zeros(2, bool))
