"""The paper's features the first pass left out: query selection by ensemble disagreement, the
annealed label schedule, adaptive L2, the noise-free preference model, scripted teachers (B-Pref)
and the episode-end penalty of the synthetic oracle."""
from __future__ import annotations

import io
import math
import zipfile

import numpy as np
import pytest
import torch
from torch import nn

from pref_interface.cutter import ClipCutter
from pref_interface.pairs import OVERSAMPLE, ClipBuffer, select_pairs
from pref_interface.schedule import LabelSchedule
from pref_interface.clip import Preference, Clip
from pref_interface.selection import disagreement_score, make_pair_scorer
from pref_interface.store import PreferenceStore, decode_clip, encode_clip
from tests.helpers import clip_from_stacks
from pref_interface.teachers import (BoltzmannTeacher, EqualTeacher, Labeller, MistakeTeacher,
                                     MyopicTeacher, OracleTeacher, SkipTeacher, make_teacher,
                                     teacher_return)
from reward_predictor import MovingDotRewardNet, RewardPredictorEnsemble, RewardPredictorTrainer
from reward_predictor.regularisation import INITIAL_ADAPTIVE_L2, MIN_L2, adapt_l2

torch.set_num_threads(1)

_FRAMES = {t: np.zeros((t + 3, 84, 84), np.uint8) for t in (1, 2, 3, 5, 25)}  # shared, read-only


def clip(rewards, dones=None, value: int | None = None) -> Clip:
    """A clip with the given per-step true rewards; `value` fills its frames (else shared zeros)."""
    rewards = np.asarray(rewards, np.float32)
    t = len(rewards)
    frames = _FRAMES[t] if value is None else np.full((t + 3, 84, 84), value, np.uint8)
    return Clip.pack(frames, np.zeros(t, np.int64), rewards,
                   None if dones is None else np.asarray(dones, bool))


# ---- query selection (§2.2.4, App. A) ----------------------------------------------------------

def fake_predictor(calls: list | None = None):
    """Three 'members' whose predictions for a pair spread by a known amount: the pair (a, b) of
    clips tagged a and b (in true_rewards[0]) gets P = 0.5 + d * (-1, 0, 1), d = ((7a + 13b) % 41)
    / 100, so its variance across members is 2 d^2 / 3."""
    def predict(left, right):
        a = np.array([s.true_rewards[0] for s in left])
        b = np.array([s.true_rewards[0] for s in right])
        if calls is not None:
            calls.append(len(left))
        d = ((7 * a + 13 * b) % 41) / 100
        return 0.5 + d[None, :] * np.array([-1.0, 0.0, 1.0])[:, None]
    return predict


def known_variance(a: float, b: float) -> float:
    return 2 * (((7 * a + 13 * b) % 41) / 100) ** 2 / 3


def test_selection_picks_the_highest_variance_pairs():
    rng = np.random.default_rng(0)
    clips = [clip([float(i)]) for i in range(40)]
    candidates = [(i, clips[i], j, clips[j]) for i, j in rng.integers(40, size=(60, 2)) if i != j]
    score = disagreement_score(fake_predictor())
    assert np.allclose(score(candidates), [known_variance(i, j) for i, _, j, _ in candidates])
    chosen = select_pairs(candidates, 5, rng, score)
    variances = sorted((known_variance(i, j) for i, _, j, _ in candidates), reverse=True)
    assert sorted((known_variance(i, j) for i, _, j, _ in chosen), reverse=True) == variances[:5]


def test_buffer_offers_the_most_disagreed_of_ten_times_more_candidates():
    buf = ClipBuffer(max_segs=100)
    for i in range(100):
        buf.add(clip([float(i)]))
    calls: list[int] = []
    seen: list = []
    predict = fake_predictor(calls)
    score = disagreement_score(predict)

    def spy(cands):
        seen.extend(cands)
        return score(cands)

    chosen = buf.sample_new_pairs(3, np.random.default_rng(1), score=spy)
    assert calls == [3 * OVERSAMPLE] and len(seen) == 3 * OVERSAMPLE  # App. A: 10x the queries
    top = sorted((known_variance(a, b) for a, _, b, _ in seen), reverse=True)[:3]
    assert sorted((known_variance(a, b) for a, _, b, _ in chosen), reverse=True) == top
    assert len(buf.sample_new_pairs(2, np.random.default_rng(1), score=spy, oversample=1)) == 2
    assert calls[-1] == 2
    with pytest.raises(ValueError):
        buf.sample_new_pairs(2, np.random.default_rng(1), score=spy, oversample=0)


def test_random_selection_does_not_depend_on_the_predictor():
    def boom(left, right):
        raise AssertionError("random selection must not ask the predictor")

    assert make_pair_scorer("random", boom) is None and make_pair_scorer("random") is None
    picks = []
    for _ in range(2):
        buf = ClipBuffer(max_segs=50)
        for i in range(50):
            buf.add(clip([float(i)]))
        picks.append([(a, b) for a, _, b, _ in buf.sample_new_pairs(5, np.random.default_rng(3),
                                                                    make_pair_scorer("random"))])
    assert picks[0] == picks[1]
    assert make_pair_scorer("disagreement", fake_predictor()) is not None
    with pytest.raises(ValueError, match="random, disagreement"):
        make_pair_scorer("entropy", fake_predictor())
    with pytest.raises(ValueError):
        make_pair_scorer("disagreement")


def test_disagreement_is_the_variance_of_the_ensembles_predicted_preferences():
    torch.manual_seed(0)
    ens = RewardPredictorEnsemble(MovingDotRewardNet, n_members=3)
    rng = np.random.default_rng(0)
    clips = [Clip.pack(rng.integers(0, 256, (5, 84, 84), dtype=np.uint8), rng.integers(0, 5, 2),
                    np.zeros(2, np.float32)) for _ in range(8)]
    candidates = [(i, clips[i], i + 4, clips[i + 4]) for i in range(4)]
    p = ens.predict_preference(clips[:4], clips[4:])
    assert p.shape == (3, 4)
    assert np.allclose(disagreement_score(ens.predict_preference)(candidates), p.var(0), atol=1e-7)


# ---- label schedule (App. A) -------------------------------------------------------------------

def test_schedule_rate_halves_after_5e6_frames():
    s = LabelSchedule("annealed", max_labels=3000, total_frames=40_000_000, n_initial=500)
    r0 = s.rate(0)
    assert r0 > 0
    assert s.rate(4_999_999) == r0  # constant within a block of 5e6 frames
    assert s.rate(5_000_000) == pytest.approx(r0 / 2)  # 5e6 / (5e6 + 5e6)
    assert s.rate(9_999_999) == pytest.approx(r0 / 2)
    assert s.rate(10_000_000) == pytest.approx(r0 / 3)  # 5e6 / (1e7 + 5e6)
    assert s.rate(35_000_000) == pytest.approx(r0 / 8)
    # Labels made in the first block are twice those of the second.
    first = s.labels_due(5_000_000) - s.labels_due(0)
    second = s.labels_due(10_000_000) - s.labels_due(5_000_000)
    assert first == pytest.approx(2 * second, abs=1)


def test_schedule_spends_the_budget_and_never_exceeds_it():
    for kind in ("annealed", "constant"):
        s = LabelSchedule(kind, max_labels=3000, total_frames=50_000_000, n_initial=500)
        frames = np.linspace(0, 60_000_000, 2001)
        due = [s.labels_due(t) for t in frames]
        assert due[0] == 500 and all(isinstance(d, int) for d in due)
        assert all(b >= a for a, b in zip(due, due[1:]))  # monotone
        assert max(due) == 3000 and s.labels_due(50_000_000) == 3000
        assert s.labels_due(49_000_000) < 3000
    const = LabelSchedule("constant", 3000, 50_000_000, 500)
    assert const.labels_due(25_000_000) == 1750  # linear in T
    annealed = LabelSchedule("annealed", 3000, 50_000_000, 500)
    assert annealed.labels_due(25_000_000) > const.labels_due(25_000_000)  # front-loaded
    for bad in (dict(kind="hyperbolic"), dict(n_initial=4000), dict(total_frames=0)):
        with pytest.raises(ValueError):
            LabelSchedule(**{"kind": "annealed", "max_labels": 3000, "total_frames": 1000, **bad})


# ---- adaptive L2 (App. A; Ibarz et al. 2018) ---------------------------------------------------

def test_l2_moves_up_when_validation_loss_is_high_and_down_when_low():
    l2 = [1e-4] * 4
    new = adapt_l2(l2, val_loss=[2.0, 1.3, 1.0, 1.6], train_loss=[1.0, 1.0, 1.0, 1.0])
    assert new[0] > 1e-4  # 2.0 > 1.5x: over-fitting
    assert new[1] == 1e-4  # between 1.1x and 1.5x: leave it
    assert new[2] < 1e-4  # 1.0 < 1.1x
    assert new[3] > 1e-4
    assert adapt_l2([1e-4], [float("nan")], [1.0]) == [1e-4]  # no validation labels yet


def test_l2_is_never_negative():
    coef = [1e-4, 0.0, -1.0]
    for _ in range(500):
        coef = adapt_l2(coef, [0.1] * 3, [1.0] * 3)
        assert all(c >= 0.0 for c in coef)
    assert coef[0] == MIN_L2 and coef[1] == 0.0 and coef[2] == 0.0
    assert adapt_l2([0.0], [9.0], [1.0]) == [MIN_L2]  # raised from zero


def dot_prefs(rng: np.random.Generator, n: int, is_validation: bool) -> list[Preference]:
    def clip():
        return Clip.pack(rng.integers(0, 256, (5, 84, 84), dtype=np.uint8), rng.integers(0, 5, 2),
                       rng.normal(size=2).astype(np.float32))
    return [Preference(clip(), clip(), float(rng.choice([0.0, 1.0])), is_validation=is_validation)
            for _ in range(n)]


def test_trainer_adapts_each_members_l2_after_validation():
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    ens = RewardPredictorEnsemble(MovingDotRewardNet, n_members=3)
    fixed = RewardPredictorTrainer(ens, seed=0)
    assert fixed.adapt_regularisation({"member_val_loss": [9.0] * 3,
                                       "member_inbag_loss": [1.0] * 3}) == [0.0] * 3  # switched off
    trainer = RewardPredictorTrainer(ens, seed=0, adaptive_l2=True)
    assert ens.l2 == [INITIAL_ADAPTIVE_L2] * 3  # Ibarz et al. 2018: start at 1e-4
    new = trainer.adapt_regularisation({"member_val_loss": [2.0, 1.2, 0.5],
                                        "member_inbag_loss": [1.0, 1.0, 1.0]})
    assert new == ens.l2 and new[0] > 1e-4 and new[1] == 1e-4 and new[2] < 1e-4
    for pref in dot_prefs(rng, 12, False) + dot_prefs(rng, 6, True):
        trainer.add(pref)
    trainer.train_steps(2)
    metrics = trainer.validate()
    assert len(metrics["member_inbag_loss"]) == 3 and len(metrics["member_val_loss"]) == 3
    assert all(c > 0 for c in trainer.adapt_regularisation())


def test_inbag_loss_weights_labels_by_the_members_bootstrap_counts():
    torch.manual_seed(0)
    ens = RewardPredictorEnsemble(MovingDotRewardNet, n_members=2)
    prefs = dot_prefs(np.random.default_rng(1), 4, False)
    plain = ens.evaluate(prefs, weights=np.ones((4, 2)))
    assert np.allclose(plain["member_weighted_loss"], plain["member_loss"], atol=1e-6)
    only_first = ens.evaluate(prefs, weights=np.array([[1, 0], [0, 0], [0, 0], [0, 0]]))
    assert only_first["member_weighted_loss"][0] == pytest.approx(ens.evaluate(prefs[:1])["member_loss"][0],
                                                                  abs=1e-5)
    assert only_first["member_weighted_loss"][1] == pytest.approx(plain["member_loss"][1], abs=1e-6)


# ---- noise model (§2.2.3) ----------------------------------------------------------------------

class CornerNet(nn.Module):
    """r = 10 * w * (top-left pixel of the newest frame) / 255: one weight to read gradients off."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.ones(1, 1))

    def forward(self, obs: torch.Tensor, actions: torch.Tensor | None = None) -> torch.Tensor:
        return obs[..., -1, 0, 0].float() / 255.0 * 10.0 * self.w[0, 0]


def test_plain_bradley_terry_without_noise_changes_the_gradients():
    """noise=0 is the plain model: a confidently contradicted label pulls with full force."""
    pref = Preference(clip([0.0], value=0), clip([0.0], value=255), mu=1.0)  # r_left 0, r_right 10

    def grad(noise: float) -> float:
        ens = RewardPredictorEnsemble(CornerNet, n_members=1, noise=noise)
        ens.optimizers = [torch.optim.SGD(ens.members[0].parameters(), lr=1.0)]
        loss = ens.train_step([[pref]])["loss"]
        assert math.isfinite(loss)
        return 1.0 - float(ens.members[0].w.detach())  # SGD with lr 1: the step is the gradient

    delta = -10.0
    p = 1 / (1 + math.exp(-delta))
    assert grad(0.0) == pytest.approx(10 * (1 - p), rel=1e-4)  # d/dw of -log sigmoid(-10 w)
    assert grad(0.1) == pytest.approx(10 * 0.9 * p * (1 - p) / (0.05 + 0.9 * p), rel=1e-3)
    assert grad(0.1) < 0.01 * grad(0.0)


# ---- scripted teachers (B-Pref, Lee et al. 2021) -----------------------------------------------

def random_pairs(rng: np.random.Generator, n: int, steps: int = 1, scale: float = 2.0):
    return [(clip(rng.normal(0, scale, steps)), clip(rng.normal(0, scale, steps))) for _ in range(n)]


def test_boltzmann_teacher_agrees_as_often_as_the_sigmoid_says():
    teacher = BoltzmannTeacher(beta=1.0, rng=0)
    assert isinstance(teacher, Labeller) and teacher.source == "synthetic"
    n = 3000
    for diff in (0.5, 1.0, 2.0):
        left, right = clip([diff]), clip([0.0])
        agree = np.mean([teacher.label(left, right) for _ in range(n)])
        p = 1 / (1 + math.exp(-diff))
        assert agree == pytest.approx(p, abs=4 * math.sqrt(p * (1 - p) / n))
    coin = BoltzmannTeacher(0.0, rng=1)  # beta 0: coin flips
    flips = [coin.label(clip([5.0]), clip([0.0])) for _ in range(2000)]
    assert np.mean(flips) == pytest.approx(0.5, abs=0.05)
    assert BoltzmannTeacher(float("inf"), rng=1).label(clip([0.1]), clip([0.0])) == 1.0


def test_mistake_teacher_flips_the_oracle_label_with_probability_eps():
    rng = np.random.default_rng(1)
    pairs = random_pairs(rng, 4000)
    oracle, teacher = OracleTeacher(), MistakeTeacher(eps=0.2, rng=2)
    flipped = np.mean([teacher.label(a, b) != oracle.label(a, b) for a, b in pairs])
    assert flipped == pytest.approx(0.2, abs=4 * math.sqrt(0.2 * 0.8 / 4000))
    assert all(teacher.label(clip([1.0]), clip([1.0])) == 0.5 for _ in range(50))  # a tie stays one


def test_skip_teacher_skips_exactly_the_pairs_where_both_clips_are_poor():
    rng = np.random.default_rng(3)
    teacher, oracle = SkipTeacher(threshold=0.5), OracleTeacher()
    for a, b in random_pairs(rng, 500):
        both_low = a.true_return < 0.5 and b.true_return < 0.5
        got = teacher.label(a, b)
        assert (got is None) == both_low
        if not both_low:
            assert got == oracle.label(a, b)


def test_equal_teacher_ties_exactly_the_close_pairs():
    rng = np.random.default_rng(4)
    teacher, oracle = EqualTeacher(threshold=1.0), OracleTeacher()
    n_ties = 0
    for a, b in random_pairs(rng, 500):
        close = abs(a.true_return - b.true_return) < 1.0
        n_ties += close
        assert teacher.label(a, b) == (0.5 if close else oracle.label(a, b))
    assert 50 < n_ties < 450


def test_myopic_teacher_prefers_reward_late_in_the_clip():
    early, late = clip([1.0, 0, 0, 0, 0]), clip([0, 0, 0, 0, 1.0])
    assert OracleTeacher().label(early, late) == 0.5
    assert MyopicTeacher(gamma=0.9).label(early, late) == 0.0
    big_early = clip([2.0, 0, 0, 0, 0])  # more reward, but long ago
    assert OracleTeacher().label(big_early, late) == 1.0
    assert MyopicTeacher(gamma=0.5).label(big_early, late) == 0.0  # 2 * 0.5^4 < 1
    assert teacher_return(clip([1.0, 2.0, 3.0]), gamma=0.5) == pytest.approx(0.25 + 1.0 + 3.0)


def test_synthetic_teachers_penalise_episode_ends_inside_a_clip():
    """App. A: the synthetic oracle replaces episode ends by a penalty (except in Pong)."""
    dies = clip([1.0, 1.0], dones=[False, True])
    idle = clip([0.0, 0.0], dones=[False, False])
    assert OracleTeacher().label(dies, idle) == 1.0  # 0 disables the penalty (Pong)
    assert OracleTeacher(episode_end_penalty=5.0).label(dies, idle) == 0.0
    assert teacher_return(dies, episode_end_penalty=5.0) == pytest.approx(-3.0)
    assert teacher_return(clip([1.0, 1.0]), episode_end_penalty=5.0) == 2.0  # dones None: no end
    for spec in ("mistake:eps=0", "skip:threshold=-100", "equal:threshold=0", "myopic:gamma=1",
                 "boltzmann:beta=inf"):
        assert make_teacher(spec, rng=0, episode_end_penalty=5.0).label(dies, idle) == 0.0, spec
    with pytest.raises(ValueError):
        OracleTeacher(episode_end_penalty=-1.0)


def test_teacher_spec_parser_builds_each_teacher_and_rejects_junk():
    cases = {"oracle": (OracleTeacher, None, None), "boltzmann:beta=2.5": (BoltzmannTeacher, "beta", 2.5),
             "mistake:eps=0.1": (MistakeTeacher, "eps", 0.1),
             "skip:threshold=0": (SkipTeacher, "threshold", 0.0),
             "equal:threshold=0.5": (EqualTeacher, "threshold", 0.5),
             "myopic:gamma=0.9": (MyopicTeacher, "gamma", 0.9), "mistake": (MistakeTeacher, "eps", 0.1)}
    for spec, (cls, attr, value) in cases.items():
        teacher = make_teacher(spec, rng=0)
        assert type(teacher) is cls and isinstance(teacher, Labeller), spec
        if attr:
            assert getattr(teacher, attr) == value
    a, b = random_pairs(np.random.default_rng(5), 1)[0]
    labels = [[make_teacher("boltzmann:beta=0.3", rng=7).label(a, b) for _ in range(20)] for _ in range(2)]
    assert labels[0] == labels[1]  # seeded: reproducible
    for junk in ("", "human", "oracle:beta=1", "mistake:eps=2", "mistake:eps=abc", "boltzmann:gamma=1",
                 "myopic:gamma=0", "equal:threshold=-1", "skip:threshold=nan", "mistake:eps"):
        with pytest.raises(ValueError) as e:
            make_teacher(junk)
        assert "\n" not in str(e.value) and "oracle, boltzmann" in str(e.value), junk


# ---- episode ends in clips, the cutter and the store ----------------------------------------

def test_clips_carry_optional_episode_ends():
    stacks = np.zeros((3, 4, 84, 84), np.uint8)
    clip = clip_from_stacks(stacks, np.zeros(3), np.zeros(3))
    assert clip.dones is None and clip.n_episode_ends == 0
    clip = clip_from_stacks(stacks, np.zeros(3), np.zeros(3), dones=[0, 0, 1])
    assert clip.dones.dtype == bool and clip.n_episode_ends == 1
    with pytest.raises(AssertionError):
        Clip.pack(clip.frames(), clip.actions, clip.true_rewards, np.zeros(2, bool))


def test_cutter_marks_a_clip_that_ends_with_its_episode():
    frames = [np.full((84, 84), v, np.uint8) for v in range(20)]
    # One env: an episode whose last step is step 2, then a new one (first frame repeated).
    stacks = [np.stack(frames[t:t + 4]) for t in range(3)] + [np.stack([frames[10]] * 4)]
    for t in range(3):
        stacks.append(np.concatenate([stacks[-1][1:], frames[11 + t][None]]))
    obs = np.stack(stacks)[:, None]  # (7, 1, 4, 84, 84)
    dones = np.zeros((6, 1), bool)
    dones[2, 0] = True
    clips = ClipCutter(1, clip_length=3).observe(obs, np.zeros((6, 1), np.int64),
                                                      np.zeros((6, 1), np.float32), dones)
    assert len(clips) == 2
    assert clips[0].dones.tolist() == [False, False, True] and clips[1].dones.tolist() == [False] * 3


def test_store_keeps_episode_ends_and_reads_older_clips(tmp_path):
    with_ends = clip([1.0, 2.0], dones=[False, True], value=7)
    without = clip([3.0, 4.0], value=9)
    assert decode_clip(encode_clip(with_ends)).dones.tolist() == [False, True]
    assert decode_clip(encode_clip(without)).dones is None
    buf = io.BytesIO()  # a blob written before clips had `dones`
    np.savez_compressed(buf, frames=with_ends.frames(), actions=with_ends.actions,
                        true_rewards=with_ends.true_rewards)
    assert decode_clip(buf.getvalue()).dones is None

    with PreferenceStore(tmp_path / "a.db") as store:
        store.add(Preference(with_ends, without, 1.0))
        store.add(Preference(without, with_ends, 0.0))
        assert store.get(1).left.dones.tolist() == [False, True] and store.get(1).right.dones is None
        store.export_npz(tmp_path / "labels.npz")
    with PreferenceStore(tmp_path / "b.db") as store:
        store.import_npz(tmp_path / "labels.npz")
        p = store.latest(2)
        assert p[0].left.dones.tolist() == [False, True] and p[0].right.dones is None
        assert p[1].left.dones is None and p[1].right.dones.tolist() == [False, True]
    # An export written before `dones` existed imports with dones=None.
    with zipfile.ZipFile(tmp_path / "labels.npz") as src, \
            zipfile.ZipFile(tmp_path / "old.npz", "w") as dst:
        for name in src.namelist():
            if name not in ("dones.npy", "seg_has_dones.npy"):
                dst.writestr(name, src.read(name))
    with PreferenceStore(tmp_path / "c.db") as store:
        assert store.import_npz(tmp_path / "old.npz") == 2
        assert all(s.dones is None for p in store.latest(2) for s in (p.left, p.right))
