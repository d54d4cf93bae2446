#!/usr/bin/env python3
"""Enduro's "keep alongside other cars" (§3.2): what the synthetic teachers make of four ways
of driving, before any learning.

    python -m experiments.alongside_teachers                  # 3 episodes of 3,000 steps each
    python -m experiments.alongside_teachers --episodes 1 --steps 1000
    python -m experiments.alongside_teachers --gif follower.gif  # also the follower, drawn
    python -m experiments.alongside_teachers --accelerating 0.2 0.5 0.8  # open-loop speeds only
    python -m experiments.alongside_teachers --following 0 0.25 0.5 0.75 1  # random to follower

The four drivers: random play, always accelerating, always braking, and a scripted follower that
steers beside the nearest car ahead, speeds up to reach it and then brakes or accelerates as
that car drifts back or ahead, reading the frames with the teachers' own detector
(`pref_interface.labellers.alongside`). Per driver it prints the share of steps level with
another car and the near and holding teachers' mean scores per step, and for pairs of 25-step
clips: how many pairs of its own clips each teacher can decide (a tie teaches the predictor
nothing), each teacher's mean answer for the driver's clip against one of random play (1: always
the driver's, 0.5: ties or an even split), and how often each teacher gives the counting
teacher's answer to the same pair of the driver's clips; then the time a label takes each
teacher. The follower shows that the behaviour is within reach of a policy that sees only the
frames, and which teacher says so more clearly.
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from clips.clip import STACK, Clip
from envs import action_names, make_vec_env
from pref_interface.labellers.alongside import CAR_WIDTH, cars_ahead, find_player, is_alongside, other_cars
from pref_interface.labellers.teachers import ENDURO_TEACHERS, make_teacher
from runtime.script_args import ScriptParser, first_paragraph

ENV_ID = "EnduroNoFrameskip-v4"
CLIP_STEPS = 25  # App. A: clips of 25 agent steps (1.7 s) in Atari
TEACHERS = tuple(sorted(ENDURO_TEACHERS))  # the count first
_ACTIONS = {name: i for i, name in enumerate(action_names(ENV_ID))}
# (speed, steer) -> Enduro's action: +1 accelerate / steer right, -1 brake / steer left
_DRIVE = {(0, 0): "noop", (1, 0): "fire", (-1, 0): "down", (0, 1): "right", (0, -1): "left",
          (1, 1): "rightfire", (1, -1): "leftfire", (-1, 1): "downright", (-1, -1): "downleft"}


class Follower:
    """Drives beside the nearest car ahead: accelerates towards it, keeps a car's width and a
    little more to its side, and once level brakes when it drifts back and accelerates when it
    pulls ahead."""

    def __init__(self) -> None:
        self.last_row: int | None = None  # the level car's lowest row in the frame before

    def __call__(self, frame: np.ndarray) -> int:
        player = find_player(frame)
        if player is None:
            return _ACTIONS["fire"]
        col = player[2]
        level = other_cars(frame)
        if level.any():
            rows, cols = np.nonzero(level)
            bottom = int(rows.max())
            drift = 0 if self.last_row is None else bottom - self.last_row  # > 0: it falls back
            speed = -1 if drift > 0 else 1 if drift < 0 else 0
            self.last_row, car_col = bottom, cols.mean()
        else:
            self.last_row = None
            ahead = cars_ahead(frame)
            if not ahead.any():
                return _ACTIONS["fire"]
            rows, cols = np.nonzero(ahead)
            speed, car_col = 1, cols[rows == rows.max()].mean()
        target = car_col + (-1 if col < car_col else 1) * (CAR_WIDTH + 4)
        steer = 1 if col < target - 2 else -1 if col > target + 2 else 0
        return _ACTIONS[_DRIVE[(speed, steer)]]


class PolicyDriver:
    """A saved Enduro policy (a run's directory, a checkpoint or a weights file) sampling its
    actions as in training, from a stack of the last STACK frames it was shown (black frames
    before the first, as the game's first stacks have)."""

    def __init__(self, path: str, rng: np.random.Generator) -> None:
        from pathlib import Path

        from a2c.checkpoint import check_fits, load_policy_weights
        from a2c.policies import make_policy
        from envs import env_kind
        from launch.rundir import playable_policy

        state = load_policy_weights(playable_policy(Path(path)))
        check_fits(ENV_ID, state, path)  # CheckpointError for another game's policy
        self.net = make_policy(env_kind(ENV_ID), len(_ACTIONS))
        self.net.load_state_dict(state["policy"])
        self.net.eval()
        self.rng = rng
        self.stack: list[np.ndarray] = []

    def __call__(self, frame: np.ndarray) -> int:
        import torch

        self.stack = (self.stack or [np.zeros_like(frame)] * (STACK - 1))[-(STACK - 1):] + [frame]
        with torch.no_grad():
            logits, _ = self.net(torch.from_numpy(np.stack(self.stack)[None]))
        probs = torch.softmax(logits[0].double(), -1).numpy()
        return int(self.rng.choice(len(probs), p=probs / probs.sum()))


def _probability(driver: str) -> float:
    """P of `name:P`; ValueError unless it is a probability."""
    p = float(driver.split(":", 1)[1])
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"{driver}: P is a probability, between 0 and 1")
    return p


def driver_policy(driver: str, rng: np.random.Generator) -> Callable[[np.ndarray], int]:
    """frame -> action for a driver: random, follower, one of Enduro's actions held,
    `accelerating:P`, open-loop play that takes one of the three accelerating actions with
    probability P and otherwise one of the six others, uniformly (random play is P = 1/3),
    `following:P`, the follower's action with probability P and a random one otherwise, or
    `policy:PATH`, a saved policy's sampled play (`PolicyDriver`). ValueError for another name."""
    if driver == "random":
        return lambda frame: int(rng.integers(len(_ACTIONS)))
    if driver == "follower":
        return Follower()
    if driver.startswith("following:"):
        p, follower = _probability(driver), Follower()

        def act(frame: np.ndarray) -> int:
            action = follower(frame)  # it reads every frame, so that it knows the car's drift
            return action if rng.random() < p else int(rng.integers(len(_ACTIONS)))
        return act
    if driver.startswith("policy:"):
        return PolicyDriver(driver.split(":", 1)[1], rng)
    if driver.startswith("accelerating:"):
        p = _probability(driver)
        fast = [i for name, i in _ACTIONS.items() if name.endswith("fire")]
        rest = [i for i in _ACTIONS.values() if i not in fast]
        return lambda frame: int(rng.choice(fast if rng.random() < p else rest))
    if driver not in _ACTIONS:
        raise ValueError(f"unknown driver {driver!r}: random, follower, following:P, "
                         f"accelerating:P, policy:PATH or one of {', '.join(_ACTIONS)}")
    action = _ACTIONS[driver]
    return lambda frame: action


@dataclass
class Drive:
    """One episode of a driver: the newest frame of the observation each step acts on, after the
    three before the first step (uint8 (steps + STACK - 1, 84, 84)), and each step's action, game
    reward and episode end."""

    frames: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    dones: np.ndarray | None  # None: not known


def drive(driver: str, steps: int, seed: int) -> Drive:
    """The first `steps` steps of one episode of a driver (`driver_policy`)."""
    env = make_vec_env(ENV_ID, 1, seed=seed)
    act = driver_policy(driver, np.random.default_rng(seed))
    actions, rewards, dones = (np.zeros(steps, t) for t in (np.int64, np.float32, bool))
    try:
        obs = env.reset()
        frames = list(obs[0, :STACK - 1])
        for t in range(steps):
            frame = obs[0, -1].copy()
            frames.append(frame)
            actions[t] = act(frame)
            result = env.step(actions[t:t + 1])
            obs, rewards[t], dones[t] = result.obs, result.rewards[0], result.dones[0]
    finally:
        env.close()
    return Drive(np.stack(frames), actions, rewards, dones)


def play(driver: str, steps: int, seed: int) -> np.ndarray:
    """The frames of `drive`: those a clip's steps are judged by."""
    return drive(driver, steps, seed).frames


def level_share(frames: np.ndarray) -> float:
    """The share of one episode's steps (`play`'s frames) level with another car."""
    return float(np.mean([is_alongside(f) for f in frames[STACK - 1:]]))


def observations(frames: np.ndarray) -> np.ndarray:
    """Each step's observation of one episode (`play`'s frames), the frame it acts on and the
    three before: (steps, STACK, 84, 84)."""
    return np.moveaxis(np.lib.stride_tricks.sliding_window_view(frames, STACK, axis=0), -1, 1)


def clips_of(played: np.ndarray | Drive) -> list[Clip]:
    """Consecutive CLIP_STEPS-step clips of one episode: of a `Drive`, with its actions, rewards
    and episode ends; of its frames alone, with zero actions and rewards and no episode end."""
    if not isinstance(played, Drive):
        steps = len(played) - STACK + 1
        played = Drive(played, np.zeros(steps, np.int64), np.zeros(steps, np.float32), None)
    clips = []
    for i in range((len(played.frames) - STACK + 1) // CLIP_STEPS):
        part = slice(i * CLIP_STEPS, (i + 1) * CLIP_STEPS)
        clips.append(Clip.pack(played.frames[part.start:part.stop + STACK - 1],
                               played.actions[part], played.rewards[part],
                               None if played.dones is None else played.dones[part]))
    return clips


def random_pairs(clips: list[Clip], n: int, rng: np.random.Generator) -> list[tuple[Clip, Clip]]:
    """`n` random pairs of two different clips of `clips`."""
    return [tuple(clips[i] for i in rng.choice(len(clips), 2, replace=False)) for _ in range(n)]


def decided(answers: np.ndarray) -> float:
    """The share of a teacher's answers that decide their pair: not a tie (0.5)."""
    return float(np.mean(np.asarray(answers) != 0.5))


def shaped_terms(episodes: list[np.ndarray], clips: list[Clip]) -> str:
    """The shaped teacher's two terms on one driver's episodes (`play`'s frames) and their clips,
    as table cells: per step (what `--teacher_reward` trains on) each term's variance and the
    score's correlation with the level term; per clip (what a label compares) each term's
    variance."""
    from pref_interface.labellers.alongside import clip_alongside, clip_closing
    from pref_interface.labellers.teachers import AlongsideTeacher, ShapedAlongsideTeacher

    teacher = ShapedAlongsideTeacher()
    obs = np.concatenate([observations(frames) for frames in episodes])
    level, score = AlongsideTeacher().step_scores(obs), teacher.step_scores(obs)
    closing = score - level
    per_clip = np.array([(clip_alongside(c), teacher.closing * clip_closing(c)) for c in clips])
    corr = f"{np.corrcoef(level, score)[0, 1]:.2f}" if level.var() and score.var() else "-"
    return (f"{level.var():.3f} / {closing.var():.3f} / {corr} | "
            f"{per_clip[:, 0].var():.1f} / {per_clip[:, 1].var():.1f}")


def marked(frames: np.ndarray) -> list[np.ndarray]:
    """RGB copies of grey frames with the cars the teachers see: level with the player in red,
    ahead of it in green."""
    out = []
    for frame in frames:
        rgb = np.repeat(frame[..., None], 3, axis=2)
        rgb[cars_ahead(frame)] = (40, 200, 40)
        rgb[other_cars(frame)] = (230, 40, 40)
        out.append(rgb)
    return out


def mix_row(kind: str, p: float, episodes: int, steps: int) -> str:
    """A table row for the driver `KIND:P` (`driver_policy`) over episodes of seeds 0..: P, its
    share of steps level with a car, per episode and in all, and the near and holding teachers'
    mean scores per step."""
    played = [play(f"{kind}:{p}", steps, seed) for seed in range(episodes)]
    shares = [level_share(e) for e in played]
    return (f"| {p:.2f} | {np.mean(shares):.1%} | "
            f"{', '.join(f'{v:.1%}' for v in shares)} | {per_step_scores(played)} |")


def per_step_scores(episodes: list[np.ndarray]) -> str:
    """The near and holding teachers' mean scores per step over episodes (`play`'s frames), as
    "near / hold": the reward of `--teacher_reward` before scaling."""
    teachers = [make_teacher(t) for t in ("alongside_near", "alongside_hold")]
    return " / ".join(
        f"{np.mean([t.step_scores(observations(e)).mean() for e in episodes]):.3f}"
        for t in teachers)


def main(argv: list[str] | None = None) -> int:
    p = ScriptParser(description=first_paragraph(__doc__))
    p.add_argument("--episodes", type=int, default=3, help="episodes of each driver (seeds 0..)")
    p.add_argument("--steps", type=int, default=3000, help="steps of each episode")
    p.add_argument("--pairs", type=int, default=300, help="pairs of clips asked of each teacher")
    p.add_argument("--gif", help="write the follower's first episode here, the cars the teachers "
                   "see marked (level: red, ahead: green)")
    p.add_argument("--gif_start", type=int, default=0, help="the first step drawn")
    p.add_argument("--gif_steps", type=int, default=600, help="steps of that episode drawn")
    p.add_argument("--accelerating", type=float, nargs="+", metavar="P",
                   help="instead of the teachers' table: open-loop drivers that accelerate with "
                        "each probability P (random play: 1/3), does a speed alone keep a car "
                        "alongside?")
    p.add_argument("--following", type=float, nargs="+", metavar="P",
                   help="instead of the teachers' table: drivers that take the follower's action "
                        "with each probability P and a random one otherwise, the way from "
                        "random play (0) to the follower (1)")
    a = p.parse_args(argv)
    if a.episodes < 1 or a.steps < CLIP_STEPS * 2 or a.pairs < 1:
        p.error(f"--episodes and --pairs must be >= 1 and --steps >= {CLIP_STEPS * 2}")
    mixes = [(flag, ps) for flag, ps in (("accelerating", a.accelerating),
                                         ("following", a.following)) if ps]
    for flag, ps in mixes:
        if not all(0 <= x <= 1 for x in ps):
            p.error(f"--{flag} takes probabilities between 0 and 1")
    if mixes:
        print(f"{ENV_ID}: {a.episodes} episode(s) of {a.steps:,} steps per driver")
        for flag, ps in mixes:
            print(f"\n| {flag} | level with a car | per episode | "
                  "per step: alongside_near / alongside_hold |\n|---|---|---|---|")
            for x in ps:
                print(mix_row(flag, x, a.episodes, a.steps), flush=True)
        return 0
    teachers = {name: make_teacher(name) for name in TEACHERS}
    rng = np.random.default_rng(0)
    clips: dict[str, list[Clip]] = {}
    print(f"{ENV_ID}: {a.episodes} episode(s) of {a.steps:,} steps per driver, "
          f"{a.pairs} pairs of {CLIP_STEPS}-step clips per teacher")
    print("| driver | level with a car | per step: alongside_near / alongside_hold | " + " | ".join(
        f"{t}: decided / against random" for t in TEACHERS) + " | " + " | ".join(
        f"{t}: the count's answer" for t in TEACHERS[1:]) + " |")
    print("|---|---|---|" + "---|" * (2 * len(TEACHERS) - 1))
    label_s: dict[str, list[float]] = {name: [] for name in teachers}  # a label's time, per driver
    terms = []  # the shaped teacher's terms, per driver
    for driver in ("random", "fire", "down", "follower"):
        episodes = [play(driver, a.steps, seed) for seed in range(a.episodes)]
        level = np.mean([level_share(e) for e in episodes])
        per_step = per_step_scores(episodes)
        clips[driver] = [c for e in episodes for c in clips_of(e)]
        terms.append(f"| {driver} | {shaped_terms(episodes, clips[driver])} |")
        mine, theirs = clips[driver], clips["random"]
        own_pairs = random_pairs(mine, a.pairs, rng)
        against = [(mine[rng.integers(len(mine))], theirs[rng.integers(len(theirs))])
                   for _ in range(a.pairs)]
        own = {}
        for name, t in teachers.items():
            start = time.perf_counter()
            own[name] = np.array([t.label(*pair) for pair in own_pairs])
            label_s[name].append((time.perf_counter() - start) / len(own_pairs))
        cells = [f"{decided(own[name]):.0%} / "
                 f"{np.mean([t.label(*pair) for pair in against]):.2f}"
                 for name, t in teachers.items()]
        same = [f"{np.mean(own[TEACHERS[0]] == own[name]):.0%}" for name in TEACHERS[1:]]
        print(f"| {driver} | {level:.1%} | {per_step} | " + " | ".join(cells + same) + " |",
              flush=True)
        if driver == "follower" and a.gif:
            from runtime.video import write_gif

            start = STACK - 1 + a.gif_start
            write_gif(marked(episodes[0][start:start + a.gif_steps]), a.gif)
            print(f"wrote {a.gif}")
    print("\nalongside_shaped's two terms, the level steps and closing in: per step, each one's "
          "variance and the score's correlation with the level term; per clip, each one's "
          "variance")
    print("| driver | per step: level / closing / correlation | per clip: level / closing |")
    print("|---|---|---|")
    print("\n".join(terms))
    print("a label takes " + ", ".join(f"{np.mean(v) * 1000:.0f} ms ({name})"
                                       for name, v in label_s.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
