#!/usr/bin/env python3
"""Probe a run's reward predictor against the game's own reward: what does r̂ see of the score?

    python -m experiments.probe_predictor RUN_DIR                 # random play
    python -m experiments.probe_predictor RUN_DIR --policy run    # the run's newest policy
    python -m experiments.probe_predictor RUN_DIR --policy fixed  # each action held throughout
    python -m experiments.probe_predictor RUN_DIR --policy follower  # Enduro: the scripted follower
    python -m experiments.probe_predictor RUN_DIR --policy follower --against run  # ... or the run's
    python -m experiments.probe_predictor RUN_DIR --stored_labels # the run's own labels

Plays the run's env, scores every step with the run's saved predictor exactly as A2C gets it
(eval mode, each member normalised, members averaged), and prints:
- the predicted reward's mean and std on these frames (A2C's scale: `--reward_std` is the target);
- its correlation with the true reward per step and over 25-step clips (what labels compare);
- clip agreement: for random pairs of clips whose true returns differ, how often the predicted
  returns order them the same way (the synthetic labeller's answer on this policy's clips);
- the mean predicted reward in the steps around true reward events (a miss in Pong is -1).
For a run taught by one of Enduro's teachers, r̂ is compared with that teacher's score of each step
instead of the game's reward: the steps level with another car (`alongside`), plus the credit for
closing in on one (`alongside_shaped`) or for each step's nearness to one (`alongside_near`). With
`--out` it draws the last two. Comparing `--policy random` with `--policy run` shows reward
hacking: the policy's own clips scored well by r̂ but badly by the game. `--policy fixed` plays
each action held at every step, from the same starts, and prints one line each: r̂'s mean a step
and the true reward's (or the share of steps level with a car), what the simplest play earns from
each. `--policy follower` (Enduro) plays the scripted follower of `experiments.alongside_teachers`
in half the envs and random play (or, `--against run`, the run's newest policy) in the others,
side by side, and says whether r̂ pays for the
behaviour: its mean a step for each, over pairs of clips, one of each, how often r̂ and the
run's teacher prefer the follower's, and r̂'s mean a step for each within bands of the teacher's
score (does r̂ pay the follower's best steps as it pays random play's at the same score?); with
`--following P` the follower acts only with probability P, part of the way to the behaviour (does
r̂ pay for the first steps towards it?).
`--stored_labels` plays nothing: it scores the run's own training and validation labels (ties
left out), each member's accuracy and that of the reward A2C is given, and for a run of one of
Enduro's teachers how often the count of level steps alone gives the label (a predictor that
learnt only the count would score that): does the predictor fit its own labels at all?
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from launch.rundir import is_run_dir
from pref_interface.labellers.alongside import judges
from pref_interface.labellers.teachers import (
    ENDURO_TEACHERS,
    AlongsideTeacher,
    make_teacher,
    teacher_kind,
)
from runtime.outputs import prepare_figure
from runtime.script_args import ScriptParser

if TYPE_CHECKING:
    from launch.rundir import Run

CLIP = 25  # App. A: clips of 25 agent steps
LAGS = np.arange(-20, 6)  # steps around an event, negative before it
TRUE_REWARD, LEVEL_STEPS = "the true reward", AlongsideTeacher.measure  # what r̂ is compared with


@dataclass
class Probe:
    """Predicted (T, N) and true (T, N) rewards of T steps of N envs, and what they tell. For a
    run taught by one of Enduro's teachers, `true` is that teacher's score of each step instead
    (`target` names it)."""

    predicted: np.ndarray
    true: np.ndarray
    target: str = TRUE_REWARD

    def step_correlation(self) -> float:
        return _corr(self.predicted.ravel(), self.true.ravel())

    def clip_returns(self) -> tuple[np.ndarray, np.ndarray]:
        """Summed rewards of every CLIP-step window (overlapping), predicted and true."""
        return clip_sums(self.predicted), clip_sums(self.true)

    def clip_correlation(self) -> float:
        return _corr(*self.clip_returns())

    def clip_agreement(self, n_pairs: int = 20_000, seed: int = 0) -> float:
        """Fraction of random clip pairs with different true returns that r̂ orders the same way
        (NaN when every clip has the same true return)."""
        pred, true = self.clip_returns()
        rng = np.random.default_rng(seed)
        i, j = rng.integers(0, len(true), (2, n_pairs))
        decisive = true[i] != true[j]
        if not decisive.any():
            return float("nan")
        same = np.sign(pred[i] - pred[j]) == np.sign(true[i] - true[j])
        return float(same[decisive].mean())

    def around_events(self, sign: int) -> tuple[np.ndarray, np.ndarray, int]:
        """Mean and standard error of the predicted reward at LAGS steps from each true reward of
        this sign, minus the overall mean; and the number of events."""
        t_max = self.true.shape[0]
        events = [(t, n) for t, n in np.argwhere(np.sign(self.true) == sign)
                  if t + LAGS[0] >= 0 and t + LAGS[-1] < t_max]
        if not events:
            return np.full(len(LAGS), np.nan), np.full(len(LAGS), np.nan), 0
        rows = np.array([[self.predicted[t + lag, n] for lag in LAGS] for t, n in events])
        rows -= self.predicted.mean()
        return rows.mean(0), rows.std(0) / np.sqrt(len(rows)), len(rows)


def clip_sums(x: np.ndarray) -> np.ndarray:
    """The sums of every CLIP-step window (overlapping) of each env's column of `x` (T, N)."""
    c = np.concatenate([np.zeros((1, x.shape[1])), np.cumsum(x, 0)])
    return (c[CLIP:] - c[:-CLIP]).ravel()


def follower_envs(n_envs: int) -> range:
    """The envs the scripted follower drives in `--policy follower`: the second half; the first
    play at random or (`--against run`) the run's policy."""
    return range(n_envs // 2, n_envs)


def follower_preferred(probe: Probe, n_random: int, n_pairs: int = 20_000, seed: int = 0
                       ) -> tuple[float, float]:
    """The probe's first `n_random` envs played by the other player (random play or the run's
    policy), the others by the scripted follower: for random pairs of clips, one of each, how
    often r̂ and the teacher's score prefer the follower's (a tie counts half)."""
    def prefers(x: np.ndarray) -> float:
        rand, follow = clip_sums(x[:, :n_random]), clip_sums(x[:, n_random:])
        rng = np.random.default_rng(seed)
        diff = follow[rng.integers(0, len(follow), n_pairs)] - rand[rng.integers(0, len(rand),
                                                                                 n_pairs)]
        return float(np.mean(np.sign(diff)) / 2 + 0.5)

    return prefers(probe.predicted), prefers(probe.true)


def follower_contrast(probe: Probe, n_random: int, other: str = "random play") -> str:
    """Whether r̂ pays for the behaviour (`follower_preferred`), with r̂'s mean a step for the
    follower and for the `other` player."""
    p = probe.predicted
    by_r_hat, by_teacher = follower_preferred(probe, n_random)
    return (f"r̂ a step: follower {p[:, n_random:].mean():+.4f}, {other} "
            f"{p[:, :n_random].mean():+.4f}; of pairs of {CLIP}-step clips, one of each, r̂ "
            f"prefers the follower's in {by_r_hat:.1%}, {probe.target} in {by_teacher:.1%} "
            "(ties half)")


def _corr(a: np.ndarray, b: np.ndarray) -> float:
    if a.std() == 0 or b.std() == 0:
        return float("nan")
    return float(np.corrcoef(a, b)[0, 1])


def collect(env, reward_fn: Callable[[np.ndarray, np.ndarray], np.ndarray],
            act: Callable[[np.ndarray], np.ndarray], steps: int, teacher: Any = None) -> Probe:
    """Play `steps` steps of a vector env, scoring each observation before it is acted on, as
    A2C's rollout does. With one of Enduro's teachers (`teachers.ENDURO_TEACHERS`), r̂ is compared
    with that teacher's score of each step (`step_scores`) instead of the reward."""
    obs = env.reset()
    predicted, true = [], []
    for _ in range(steps):
        actions = act(obs)
        predicted.append(reward_fn(obs, actions))
        if teacher is not None:
            true.append(teacher.step_scores(obs))
        result = env.step(actions)
        if teacher is None:
            true.append(result.rewards)
        obs = result.obs
    return Probe(np.array(predicted, dtype=np.float64), np.array(true, dtype=np.float64),
                 TRUE_REWARD if teacher is None else teacher.measure)


def saved_predictor(run: Run):
    """The run's saved reward predictor, as A2C uses it (raises CheckpointError)."""
    from launch.configs import trainer_config
    from launch.rundir import PREDICTOR_FILE
    from reward_predictor.reward_fn import load_ensemble

    return load_ensemble(trainer_config(run, load_from=None, save=False),
                         str(run.dir / "reward_predictor" / PREDICTOR_FILE))


def run_teacher(run: Run):
    """The run's synthetic teacher where it is one of Enduro's (r̂ is then compared with its score
    of each step), else None (the game's reward)."""
    if teacher_kind(run.settings.teacher) in ENDURO_TEACHERS:
        return make_teacher(run.settings.teacher)
    return None


def load_run(run: Run, policy: str, n_envs: int, seed: int, following: float = 1.0,
             against: str = "random"):
    """The run's env, its predictor as A2C uses it, and an action function: random play, the
    run's newest policy (A2C's, or the one `examples.ppo` saved), or (`follower`, Enduro) the
    `against` player (`random` or `run`) in the first half of the envs and the scripted follower
    in the others, taking its action with probability `following` and a random one otherwise."""
    from envs import make_vec_env

    ensemble = saved_predictor(run)
    env = make_vec_env(run.settings.env_id, n_envs, seed=seed, num_threads=1)
    rng = np.random.default_rng(seed)
    plays_run = policy == "run" or (policy == "follower" and against == "run")
    base = run_policy(run, env.num_actions, seed) if plays_run else (
        lambda obs: rng.integers(0, env.num_actions, len(obs)))
    if policy != "follower":
        return env, ensemble.reward, base
    from experiments.alongside_teachers import driver_policy

    driver = "follower" if following == 1 else f"following:{following}"
    followers = {i: driver_policy(driver, rng) for i in follower_envs(n_envs)}  # one an env

    def act(obs: np.ndarray) -> np.ndarray:
        actions = np.asarray(base(obs)).copy()
        for i, follower in followers.items():
            actions[i] = follower(obs[i, -1])
        return actions
    return env, ensemble.reward, act


def run_policy(run: Run, num_actions: int, seed: int) -> Callable[[np.ndarray], np.ndarray]:
    """The run's newest policy (A2C's, or the one `examples.ppo` saved), sampling its actions."""
    import torch

    from a2c.checkpoint import load_policy_weights
    from a2c.policies import make_policy
    from a2c.rollout import sample_actions
    from launch.rundir import newest_policy

    net = make_policy(run.env_kind, num_actions)
    net.load_state_dict(load_policy_weights(newest_policy(run.dir))["policy"])
    net.eval()
    torch.manual_seed(seed)
    return lambda obs: sample_actions(net, obs)


def probe_run(run_dir: Path, policy: str, steps: int, n_envs: int, seed: int,
              following: float = 1.0) -> Probe:
    """A saved run's predictor against its target (the reward, or its Enduro teacher's score) on
    `steps` fresh steps of `n_envs` envs played by `policy` (`load_run`'s)."""
    from launch.cli import saved_run

    run = saved_run(run_dir)
    env, reward_fn, act = load_run(run, policy, n_envs, seed, following)
    try:
        return collect(env, reward_fn, act, steps, run_teacher(run))
    finally:
        env.close()


def each_action(make_env: Callable[[], object],
                reward_fn: Callable[[np.ndarray, np.ndarray], np.ndarray], names: list[str],
                steps: int, teacher: Any = None) -> dict[str, Probe]:
    """A probe per action, that action held at every step of a fresh env (the same starts)."""
    probes = {}
    for k, name in enumerate(names):
        env = make_env()
        try:
            probes[name] = collect(env, reward_fn, lambda obs, k=k: np.full(len(obs), k), steps,
                                   teacher)
        finally:
            env.close()
    return probes


def each_action_report(probes: dict[str, Probe]) -> str:
    """One line per held action: r̂'s mean a step beside what it is compared with."""
    lines = []
    for name, probe in probes.items():
        mean = probe.true.mean()
        target = (f"level with a car in {mean:.1%} of steps" if probe.target == LEVEL_STEPS
                  else f"{probe.target} {mean:+.4f} a step")
        lines.append(f"always {name:<10} r̂ {probe.predicted.mean():+.4f} a step, {target}")
    return "\n".join(lines)


def plot(probe: Probe, out: str, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    events = probe.target == TRUE_REWARD  # a teacher's score has no game events to look around
    fig, axes = plt.subplots(1, 2 if events else 1, figsize=(11 if events else 5.5, 4))
    ax, bx = axes if events else (None, axes)
    if events:
        for sign, name, colour in ((-1, "true reward < 0", "C3"), (1, "true reward > 0", "C2")):
            mean, se, n = probe.around_events(sign)
            if n:
                ax.errorbar(LAGS, mean, yerr=se, color=colour, capsize=2,
                            label=f"{name} ({n} events)")
        ax.axhline(0, color="grey", lw=1)
        ax.axvline(0, color="grey", lw=1, ls="--")
        ax.set(xlabel="steps from the event", ylabel="predicted reward − its mean",
               title="r̂ around the game's rewards")
        ax.legend()
    pred, true = probe.clip_returns()
    bx.scatter(true + np.random.default_rng(0).uniform(-0.15, 0.15, len(true)), pred, s=2, alpha=0.2)
    bx.set(xlabel=f"{probe.target} over a {CLIP}-step clip (jittered)",
           ylabel="predicted return", title=f"clips: correlation {probe.clip_correlation():.2f}")
    fig.suptitle(title)
    fig.tight_layout()
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)


def by_score_band(probe: Probe, n_random: int, other: str = "random play") -> str:
    """r̂'s mean a step for the `other` player (the first `n_random` envs) and the follower (the
    others) within bands of the teacher's score: the steps it scores 0, then thirds of the others.
    Tells whether r̂ pays for the follower's best steps as it pays for the other's at the same
    score."""
    true, pred = probe.true, probe.predicted
    positive = true > 0
    edges = (np.unique(np.quantile(true[positive], [0, 1 / 3, 2 / 3, 1])) if positive.any()
             else np.zeros(0))
    # band 0: the steps scored 0; then [lo, hi) between the edges, the last one closed
    band_of = np.where(positive, 1 + np.searchsorted(edges[1:-1], true, side="right"), 0)
    names = ["0"] + ([f"{edges[0]:g}"] if len(edges) == 1 else  # one positive value: one band
                     [f"{lo:.2f}–{hi:.2f}" for lo, hi in zip(edges[:-1], edges[1:])])
    lines = [f"| {probe.target} a step | {other}: share, r̂ | follower: share, r̂ |",
             "|---|---|---|"]
    for k, name in enumerate(names):
        cells = []
        for cols in (slice(0, n_random), slice(n_random, None)):
            inside = band_of[:, cols] == k
            mean = f"{pred[:, cols][inside].mean():+.4f}" if inside.any() else "–"
            cells.append(f"{inside.mean():.0%}, {mean}")
        lines.append(f"| {name} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


def report(probe: Probe) -> str:
    lines = [f"predicted reward: mean {probe.predicted.mean():+.4f}, "
             f"std {probe.predicted.std():.4f}"]
    if probe.true.std() == 0:  # e.g. Enduro's random play, which never passes a car
        lines.append(f"{probe.target} was {probe.true.flat[0]:g} at every step: nothing to compare "
                     "r̂ with (play more --steps, or --policy run)")
        return "\n".join(lines)
    lines += [f"correlation with {probe.target}: per step {probe.step_correlation():.3f}, "
              f"per {CLIP}-step clip {probe.clip_correlation():.3f}",
              f"clip agreement (pairs that differ in {probe.target}): "
              f"{probe.clip_agreement():.3f}"]
    if probe.target == LEVEL_STEPS:
        lines.append(f"share of {LEVEL_STEPS}: {probe.true.mean():.1%}")
    if probe.target != TRUE_REWARD:  # a teacher's score: no game events to look around
        return "\n".join(lines)
    for sign, name in ((-1, "negative"), (1, "positive")):
        mean, _, n = probe.around_events(sign)
        if n:
            before = mean[(LAGS >= -10) & (LAGS <= 0)].sum()
            lines.append(f"{n} {name} true rewards: predicted reward over the 10 steps before "
                         f"and at them, relative to its mean: {before:+.3f}")
    return "\n".join(lines)


def stored_label_accuracy(run: Run, counted: bool) -> str:
    """Per split of the run's stored labels (ties left out): each member's accuracy and that of
    the reward A2C is given (the members' normalised returns averaged), and with `counted` how
    often the counting teacher gives the label (its ties score one half)."""
    from launch.rundir import PREFS_FILE
    from reward_predictor.process import load_prefs

    ensemble = saved_predictor(run)
    prefs = [p for p in load_prefs(str(run.dir / PREFS_FILE), run.settings.max_prefs)
             if p.mu != 0.5]
    count = AlongsideTeacher()
    lines = ["| labels | decided | members | r̂ |" + (" count alone |" if counted else ""),
             "|---|---|---|---|" + ("---|" if counted else "")]
    for name, split in (("training", [p for p in prefs if not p.is_validation]),
                        ("validation", [p for p in prefs if p.is_validation])):
        if not split:
            continue
        scores = ensemble.evaluate(split)
        members = " / ".join(f"{acc:.0%}" for acc in scores["member_accuracy"])
        line = f"| {name} | {len(split)} | {members} | {scores['accuracy']:.0%} |"
        if counted:
            agree = [1.0 - abs(count.label(p.left, p.right) - p.mu) for p in split]
            line += f" {np.mean(agree):.0%} |"
        lines.append(line)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = ScriptParser(description=__doc__.splitlines()[0])
    p.add_argument("run_dir", help="a run directory with a saved reward predictor")
    p.add_argument("--policy", choices=("random", "run", "fixed", "follower"), default="random",
                   help="who plays: uniformly random actions, the run's newest policy, each "
                        "action held throughout (a line each), or (Enduro) the scripted "
                        "follower in half the envs and random play in the others")
    p.add_argument("--following", type=float, default=1.0, metavar="P",
                   help="with --policy follower: the follower's action with probability P and a "
                        "random one otherwise, part of the way from random play to it")
    p.add_argument("--against", choices=("random", "run"), default="random",
                   help="with --policy follower: who plays the other half of the envs, random "
                        "play or the run's newest policy (does r̂ rank the follower above what "
                        "the learner found?)")
    p.add_argument("--steps", type=int, default=1000, help="steps of each env")
    p.add_argument("--n_envs", type=int, default=8, help="envs played side by side")
    p.add_argument("--seed", type=int, default=1, help="env and action seed")
    p.add_argument("--out", help="write the figure here (.png)")
    p.add_argument("--stored_labels", action="store_true",
                   help="play nothing: the predictor's accuracy on the run's own stored labels")
    a = p.parse_args(argv)
    run_dir = Path(a.run_dir)
    if not is_run_dir(run_dir) or \
            not (run_dir / "reward_predictor" / "reward_predictor.pt").is_file():
        p.error(f"{run_dir} is not a run directory with a saved reward predictor")
    if a.steps <= CLIP or a.n_envs <= 0:
        p.error(f"--steps must exceed {CLIP} and --n_envs must be positive")
    if not 0 < a.following <= 1 or (a.following != 1 and a.policy != "follower"):
        p.error("--following is a probability in (0, 1], with --policy follower")
    if a.against != "random" and a.policy != "follower":
        p.error("--against goes with --policy follower")
    if a.out:
        try:
            prepare_figure(a.out, "--out")
        except ValueError as e:
            p.error(str(e))
    import torch
    torch.set_num_threads(1)
    from a2c.checkpoint import CheckpointError
    from launch.cli import UsageError, saved_run
    try:
        run = saved_run(run_dir)
        if a.stored_labels:
            counted = teacher_kind(run.settings.teacher) in ENDURO_TEACHERS
            print(f"{run_dir}: the predictor on its own labels\n"
                  f"{stored_label_accuracy(run, counted)}")
            return 0
        if a.policy == "follower" and not judges(run.settings.env_id):
            raise UsageError("--policy follower drives in Enduro; this run is "
                             f"{run.settings.env_id}")
        if a.policy == "follower" and a.n_envs < 2:
            raise UsageError("--policy follower needs --n_envs 2 or more: it drives half of them")
        env, reward_fn, act = load_run(run, "random" if a.policy == "fixed" else a.policy,
                                       a.n_envs, a.seed, a.following, a.against)
    except (CheckpointError, UsageError) as e:
        p.error(str(e))
    teacher = run_teacher(run)
    other = "the run's policy" if a.against == "run" else "random play"
    played = f"follower against {other}" if a.policy == "follower" else f"{a.policy} play"
    print(f"{run_dir} ({played}, {a.steps} steps x {a.n_envs} envs)")
    if a.policy == "fixed":
        from envs import action_names, make_vec_env
        env.close()
        env_id = run.settings.env_id
        print(each_action_report(each_action(
            lambda: make_vec_env(env_id, a.n_envs, seed=a.seed, num_threads=1), reward_fn,
            action_names(env_id), a.steps, teacher)))
        return 0
    try:
        probe = collect(env, reward_fn, act, a.steps, teacher)
    finally:
        env.close()
    print(report(probe))
    if a.policy == "follower":
        print(follower_contrast(probe, follower_envs(a.n_envs).start, other))
        print(by_score_band(probe, follower_envs(a.n_envs).start, other))
    if a.out:
        plot(probe, a.out, f"{run_dir.name}: {a.policy} play")
        print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
