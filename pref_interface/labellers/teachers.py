"""Who answers the queries: anything with `label(left, right) -> mu | None`.

The synthetic oracle of §3.1 is here, with the scripted teachers of B-Pref (Lee et al. 2021):
Boltzmann-rational, mistake, skip, equal and myopic, Enduro's "keep alongside other cars" (§3.2)
counted, shaped by closing in, by nearness and by holding a car's speed, and `make_teacher` to
pick one from a CLI string. The person as a labeller (`human.py`) implements the same
`Labeller` protocol.

Every synthetic teacher but the "alongside" ones judges a clip by its true reward, minus
`episode_end_penalty` for each episode end inside the clip (App. A: the agent is never told of
episode ends, so the synthetic oracle penalises them instead, except in Pong).
"""
from __future__ import annotations

import math
from typing import Callable, Protocol, runtime_checkable

import numpy as np

from clips.clip import STACK, Clip
from pref_interface.labellers.alongside import (alongside_steps, clip_alongside, clip_closing,
                                                holding, nearest_car, nearness)


@runtime_checkable
class Labeller(Protocol):
    """Answers a query about two clips.

    `label` returns mu, the probability that `left` is better (1.0 left, 0.0 right, 0.5 equally
    good), or None when the pair is incomparable (§2.2.2: such pairs are not stored). It may block
    (a human thinking). `source` says what kind of labels these are: "synthetic" or "human".
    The other calls are hooks with nothing to do by default; a labeller inherits them.
    """

    source: str

    def label(self, left: Clip, right: Clip) -> float | None: ...

    def upcoming(self, left: Clip, right: Clip) -> None:
        """The pair that will be asked next (a person's page loads it ahead)."""

    def stored(self, label_id: int) -> None:
        """The last answer is in the store as `label_id` (a person may change labels)."""

    def idle(self) -> None:
        """No pair to ask now (a person's page may still send edits)."""

    def show_order(self, sorters: dict) -> None:
        """The sorted clips of each split, after a sorting query or answer (`--queries sort`)."""

    def close(self) -> None:
        """Labelling is over."""


def teacher_return(clip: Clip, episode_end_penalty: float = 0.0, gamma: float = 1.0) -> float:
    """What a synthetic teacher thinks a clip is worth: sum_t gamma^(T-1-t) (r_t - penalty * done_t).

    gamma < 1 is B-Pref's myopic teacher, which weighs the end of the clip most; the penalty is
    charged at the step the episode ended (App. A: episode ends replaced by a penalty).
    """
    assert episode_end_penalty >= 0.0, episode_end_penalty
    rewards = clip.true_rewards.astype(np.float64)
    if episode_end_penalty and clip.dones is not None:
        rewards = rewards - episode_end_penalty * clip.dones
    if gamma != 1.0:
        rewards = rewards * gamma ** np.arange(len(rewards) - 1, -1, -1, dtype=np.float64)
    return float(rewards.sum())


def default_episode_end_penalty(env_id: str) -> float:
    """App. A: the synthetic oracle penalises episode ends in Atari games, except in Pong (where
    the episode ends only once the game is decided); MovingDot's episodes end on a timer. An end
    by a time limit counts as one (Enduro's cut at 3,000 agent steps, App. A.2, ends nearly every
    episode), as an env's `done` tells it."""
    from envs import env_kind

    return 0.0 if env_kind(env_id) != "atari" or env_id.startswith("Pong") else 1.0


def _prefer(r_left: float, r_right: float) -> float:
    """1.0 if left is worth more, 0.0 if right is, 0.5 if they are equal."""
    return 1.0 if r_left > r_right else 0.0 if r_left < r_right else 0.5


class OracleTeacher(Labeller):
    """§3.1 synthetic labels: prefers the clip with the higher sum of true rewards; ties get 0.5.

    Args:
        episode_end_penalty: subtracted from a clip's return for each episode end in it (>= 0;
            0 disables, as for Pong in App. A).
    """

    source = "synthetic"

    def __init__(self, episode_end_penalty: float = 0.0) -> None:
        if episode_end_penalty < 0:
            raise ValueError(f"episode_end_penalty is a cost and must be >= 0, got {episode_end_penalty}")
        self.episode_end_penalty = float(episode_end_penalty)

    def returns(self, left: Clip, right: Clip) -> tuple[float, float]:
        """The two clips' returns as this teacher sees them."""
        return (teacher_return(left, self.episode_end_penalty),
                teacher_return(right, self.episode_end_penalty))

    def label(self, left: Clip, right: Clip) -> float | None:
        return _prefer(*self.returns(left, right))


class BoltzmannTeacher(OracleTeacher):
    """B-Pref's stochastic rational teacher: P[left] = sigmoid(beta (R_left - R_right)), and the
    label (1.0 or 0.0) is drawn from it. beta = inf is the oracle except on exact ties, where
    both are drawn with probability 1/2."""

    def __init__(self, beta: float = 1.0, rng: np.random.Generator | int | None = None,
                 episode_end_penalty: float = 0.0) -> None:
        super().__init__(episode_end_penalty)
        if not beta >= 0:
            raise ValueError(f"beta must be >= 0, got {beta}")
        self.beta = float(beta)
        self.rng = np.random.default_rng(rng)

    def p_left(self, left: Clip, right: Clip) -> float:
        """The probability that this teacher answers "left"."""
        r_left, r_right = self.returns(left, right)
        if r_left == r_right:
            return 0.5
        x = self.beta * (r_left - r_right)  # +-inf when beta is inf
        return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))

    def label(self, left: Clip, right: Clip) -> float:
        return 1.0 if self.rng.random() < self.p_left(left, right) else 0.0


class MistakeTeacher(OracleTeacher):
    """B-Pref's mistake teacher: the oracle's answer, flipped with probability `eps` (a tie stays
    a tie)."""

    def __init__(self, eps: float = 0.1, rng: np.random.Generator | int | None = None,
                 episode_end_penalty: float = 0.0) -> None:
        super().__init__(episode_end_penalty)
        if not 0.0 <= eps <= 1.0:
            raise ValueError(f"eps must be a probability, got {eps}")
        self.eps = float(eps)
        self.rng = np.random.default_rng(rng)

    def label(self, left: Clip, right: Clip) -> float:
        mu = _prefer(*self.returns(left, right))
        return 1.0 - mu if self.rng.random() < self.eps else mu


class SkipTeacher(OracleTeacher):
    """B-Pref's skip teacher: no answer (None: incomparable, not stored) when both clips' returns
    are below `threshold`; the oracle's answer otherwise."""

    def __init__(self, threshold: float = 0.0, rng: np.random.Generator | int | None = None,
                 episode_end_penalty: float = 0.0) -> None:
        super().__init__(episode_end_penalty)
        self.threshold = float(threshold)

    def label(self, left: Clip, right: Clip) -> float | None:
        r_left, r_right = self.returns(left, right)
        if r_left < self.threshold and r_right < self.threshold:
            return None
        return _prefer(r_left, r_right)


class EqualTeacher(OracleTeacher):
    """B-Pref's equal teacher: a tie (0.5) when the returns differ by less than `threshold`; the
    oracle's answer otherwise."""

    def __init__(self, threshold: float = 0.5, rng: np.random.Generator | int | None = None,
                 episode_end_penalty: float = 0.0) -> None:
        super().__init__(episode_end_penalty)
        if not threshold >= 0:
            raise ValueError(f"threshold must be >= 0, got {threshold}")
        self.threshold = float(threshold)

    def label(self, left: Clip, right: Clip) -> float:
        r_left, r_right = self.returns(left, right)
        return 0.5 if abs(r_left - r_right) < self.threshold else _prefer(r_left, r_right)


class MyopicTeacher(OracleTeacher):
    """B-Pref's myopic teacher: compares sum_t gamma^(T-1-t) r_t, so what happens late in a clip
    counts most."""

    def __init__(self, gamma: float = 0.9, rng: np.random.Generator | int | None = None,
                 episode_end_penalty: float = 0.0) -> None:
        super().__init__(episode_end_penalty)
        if not 0.0 < gamma <= 1.0:
            raise ValueError(f"gamma must be in (0, 1], got {gamma}")
        self.gamma = float(gamma)

    def returns(self, left: Clip, right: Clip) -> tuple[float, float]:
        return (teacher_return(left, self.episode_end_penalty, self.gamma),
                teacher_return(right, self.episode_end_penalty, self.gamma))


class AlongsideTeacher(OracleTeacher):
    """Synthetic labels for "keep alongside other cars" (§3.2, Enduro only): prefers the clip with
    more steps level with another car (pref_interface/labellers/alongside.py), 0.5 on equal counts. The
    true reward and episode ends are ignored: only what the frames show counts."""

    measure = "steps level with a car"  # what `step_scores` gives, for reports

    def returns(self, left: Clip, right: Clip) -> tuple[float, float]:
        return float(clip_alongside(left)), float(clip_alongside(right))

    def step_scores(self, obs: np.ndarray) -> np.ndarray:
        """(N,): what one step of N envs adds to a clip's worth, from their observations
        (N, STACK, 84, 84): 1 where the newest frame is level with a car."""
        return alongside_steps(obs[:, -1]).astype(np.float64)


class ShapedAlongsideTeacher(AlongsideTeacher):
    """"Keep alongside other cars" judged as a person watching would: the level steps, plus credit
    for closing in on a car, `closing` times how much nearer to a car the clip ends than it starts
    (`clip_closing`, -1..1: from no car seen ahead to level is +1, a car pulling away or passed
    and left behind is a loss). Catching a car up and then holding its speed both pay, where the
    count alone rewards only the steps spent level."""

    def __init__(self, closing: float = 10.0, rng: np.random.Generator | int | None = None,
                 episode_end_penalty: float = 0.0) -> None:
        super().__init__(episode_end_penalty)
        if not closing >= 0:
            raise ValueError(f"closing must be >= 0, got {closing}")
        self.closing = float(closing)

    measure = "the shaped alongside score"

    def returns(self, left: Clip, right: Clip) -> tuple[float, float]:
        return tuple(clip_alongside(c) + self.closing * clip_closing(c) for c in (left, right))

    def step_scores(self, obs: np.ndarray) -> np.ndarray:
        """The level step plus `closing` times the change in nearness from the frame before.
        Summed over a clip, the changes come to the nearness of its last frame less that of the
        frame before its first step (`clip_closing` compares medians of frames at each end)."""
        closer = [nearness(f[-1]) - nearness(f[-2]) for f in obs]
        return super().step_scores(obs) + self.closing * np.array(closer)


class NearAlongsideTeacher(AlongsideTeacher):
    """"Keep alongside other cars" judged by how much of a clip is spent near another car: each
    step's worth is 1 if level with a car, plus `near` times its nearness to the nearest car (1
    level, falling to 0 for a car at the top of the road or none seen). A person credits a clip
    that sits close behind a car or catches one up; unlike the shaped teacher's closing term,
    each step's worth is read from its own frame, as the predictor's r̂ is."""

    measure = "the near alongside score"

    def __init__(self, near: float = 1.0, rng: np.random.Generator | int | None = None,
                 episode_end_penalty: float = 0.0) -> None:
        super().__init__(episode_end_penalty)
        if not near >= 0:
            raise ValueError(f"near must be >= 0, got {near}")
        self.near = float(near)

    def returns(self, left: Clip, right: Clip) -> tuple[float, float]:
        return tuple(float(self._frame_scores(c.step_frames()).sum()) for c in (left, right))

    def step_scores(self, obs: np.ndarray) -> np.ndarray:
        return self._frame_scores(obs[:, -1])

    def _frame_scores(self, frames: np.ndarray) -> np.ndarray:
        return self._worth(np.array([nearness(f) for f in frames], dtype=np.float64))

    def _worth(self, near: np.ndarray) -> np.ndarray:
        """Each step's worth from its frame's nearness."""
        return (near == 1.0) + self.near * near  # nearness is 1 exactly when a car is level


class HoldAlongsideTeacher(NearAlongsideTeacher):
    """"Keep alongside other cars" judged by a person who also credits matching a car's speed:
    the near teacher's worth of each step, plus `hold` times its nearness times how nearly the
    nearest car stays in its row from the frame before (`alongside.holding`). Catching a car up,
    then holding its speed beside or close behind it, is what the step's worth climbs with, and
    braking or accelerating changes it within a few steps."""

    measure = "the holding alongside score"

    def __init__(self, hold: float = 1.0, rng: np.random.Generator | int | None = None,
                 episode_end_penalty: float = 0.0) -> None:
        super().__init__(rng=rng, episode_end_penalty=episode_end_penalty)
        if not hold >= 0:
            raise ValueError(f"hold must be >= 0, got {hold}")
        self.hold = float(hold)

    def returns(self, left: Clip, right: Clip) -> tuple[float, float]:
        return tuple(float(self._step_scores(c.frames()[STACK - 2:]).sum()) for c in (left, right))

    def step_scores(self, obs: np.ndarray) -> np.ndarray:
        return np.array([self._step_scores(o[-2:])[0] for o in obs], dtype=np.float64)

    def _step_scores(self, frames: np.ndarray) -> np.ndarray:
        """The worth of each step of frames (T + 1, 84, 84): the frame before the first step,
        then the frame each step leads to."""
        near, rows = zip(*(nearest_car(f) for f in frames))
        now = np.array(near[1:], dtype=np.float64)
        held = np.array([holding(a, b) for a, b in zip(rows, rows[1:])])
        return self._worth(now) + self.hold * now * held


# kind -> (class, its one parameter and that parameter's default); "oracle", "alongside": none.
TEACHERS: dict[str, tuple[Callable[..., OracleTeacher], str | None, float | None]] = {
    "oracle": (OracleTeacher, None, None),
    "alongside": (AlongsideTeacher, None, None),
    "alongside_shaped": (ShapedAlongsideTeacher, "closing", 10.0),
    "alongside_near": (NearAlongsideTeacher, "near", 1.0),
    "alongside_hold": (HoldAlongsideTeacher, "hold", 1.0),
    "boltzmann": (BoltzmannTeacher, "beta", 1.0),
    "mistake": (MistakeTeacher, "eps", 0.1),
    "skip": (SkipTeacher, "threshold", 0.0),
    "equal": (EqualTeacher, "threshold", 0.5),
    "myopic": (MyopicTeacher, "gamma", 0.9),
}
# the teachers that judge Enduro's frames, not the reward
ENDURO_TEACHERS = frozenset({"alongside", "alongside_shaped", "alongside_near", "alongside_hold"})
TEACHER_SPECS = ("oracle, boltzmann:beta=1.0, mistake:eps=0.1, skip:threshold=0, equal:threshold=0.5, "
                 "myopic:gamma=0.9, alongside (Enduro), alongside_shaped:closing=10 (Enduro), "
                 "alongside_near:near=1 (Enduro), alongside_hold:hold=1 (Enduro)")


def teacher_kind(spec: str) -> str:
    """The kind a teacher's CLI value names: "mistake" for "mistake:eps=0.1"."""
    return spec.strip().partition(":")[0]


def make_teacher(spec: str, rng: np.random.Generator | int | None = None,
                 episode_end_penalty: float = 0.0) -> OracleTeacher:
    """The synthetic teacher a CLI value names: "KIND" or "KIND:PARAM=VALUE" (e.g.
    "mistake:eps=0.1"); an omitted parameter takes its default. Raises ValueError with a one-line
    message listing the valid kinds."""
    kind, params = teacher_kind(spec), spec.strip().partition(":")[2]
    if kind not in TEACHERS:
        raise ValueError(f"unknown teacher {spec!r}; expected one of: {TEACHER_SPECS}")
    cls, name, default = TEACHERS[kind]
    if name is None:
        if params:
            raise ValueError(f"teacher {kind!r} takes no parameters, got {spec!r}; valid: {TEACHER_SPECS}")
        return cls(episode_end_penalty)
    value = default
    if params:
        key, eq, text = params.partition("=")
        try:
            if key.strip() != name or not eq:
                raise ValueError
            value = float(text)
            if math.isnan(value):
                raise ValueError
        except ValueError:
            raise ValueError(f"bad teacher {spec!r}: {kind} takes {name}=NUMBER; valid: {TEACHER_SPECS}"
                             ) from None
    try:
        return cls(value, rng=rng, episode_end_penalty=episode_end_penalty)
    except ValueError as e:
        raise ValueError(f"bad teacher {spec!r}: {e}; valid: {TEACHER_SPECS}") from None
