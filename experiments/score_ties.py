#!/usr/bin/env python3
"""Enduro from synthetic preferences: how many pairs of clips the score teacher decides, by
how the clips were played.

    python -m experiments.score_ties                           # the default drivers
    python -m experiments.score_ties --drivers random policy:models/enduro_prefs_seed1.pt
    python -m experiments.score_ties --runs ~/runs/enduro_prefs-seed1 ~/runs/enduro_prefs-seed2

The score teacher (§3.1's synthetic labels, `--teacher oracle`) prefers the clip with more
points and calls two clips that score the same "equally good". A tie teaches r̂ no order, so a
run whose clips rarely score learns from few labels. Per driver (`experiments.alongside_teachers`'
drivers: random play, `accelerating:P`, `follower`, `following:P`, one action held,
`policy:PATH`), over episodes of seeds 0..: the mean score per episode, the share of its 25-step
clips that score, and the share of random pairs of its clips the teacher decides. With `--runs`,
instead, what decided each run's stored labels: a difference in score, or an episode end alone
(the teacher penalises one; in Enduro most are the 3,000-step cut), and the last label the score
decided.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from clips.clip import Clip
from experiments.alongside_teachers import (
    CLIP_STEPS,
    ENV_ID,
    clips_of,
    decided,
    drive,
    driver_policy,
    random_pairs,
)
from pref_interface.labellers.teachers import default_episode_end_penalty, make_teacher
from runtime.script_args import ScriptParser, first_paragraph

DRIVERS = ("random", "accelerating:0.6", "accelerating:0.9", "fire", "follower")


def decided_share(clips: list[Clip], pairs: int, rng: np.random.Generator) -> float:
    """The share of `pairs` random pairs of two different clips that the score teacher decides
    (an answer other than 0.5), as a run's teacher judges them (an episode end penalised)."""
    teacher = make_teacher("oracle", episode_end_penalty=default_episode_end_penalty(ENV_ID))
    return decided([teacher.label(*pair) for pair in random_pairs(clips, pairs, rng)])


def driver_row(driver: str, episodes: int, steps: int, pairs: int) -> str:
    """A table row: the driver, its mean score per episode, the share of its clips that score
    and the share of pairs decided."""
    played = [drive(driver, steps, seed) for seed in range(episodes)]
    clips = [c for d in played for c in clips_of(d)]
    scoring = np.mean([c.true_rewards.sum() != 0 for c in clips])
    share = decided_share(clips, pairs, np.random.default_rng(0))
    return (f"| {driver} | {np.mean([d.rewards.sum() for d in played]):+.1f} | {scoring:.1%} | "
            f"{share:.1%} |")


def store_row(run_dir: Path) -> str:
    """A table row: a run's labels, its ties, the labels the score decided (and the last one's
    place among the stored labels, oldest first) and those an episode end alone decided (both
    clips scoring the same)."""
    from launch.rundir import PREFS_FILE
    from pref_interface.store import PreferenceStore

    by_score = by_end = other = ties = last_by_score = 0
    with PreferenceStore(Path(run_dir) / PREFS_FILE, create=False) as store:
        ids = store.all_ids()
        for n, label_id in enumerate(ids, 1):
            pref = store.get(label_id)
            ends = [c.dones is not None and bool(c.dones.any()) for c in (pref.left, pref.right)]
            if pref.mu == 0.5:
                ties += 1
            elif pref.left.true_rewards.sum() != pref.right.true_rewards.sum():
                by_score, last_by_score = by_score + 1, n
            elif ends[0] != ends[1]:
                by_end += 1
            else:
                other += 1
    last = f" (last: no. {last_by_score:,})" if by_score else ""
    return (f"| {run_dir} | {len(ids):,} | {ties:,} | {by_score:,}{last} | "
            f"{by_end:,} | {other:,} |")


def main(argv: list[str] | None = None) -> int:
    p = ScriptParser(description=first_paragraph(__doc__))
    p.add_argument("--drivers", nargs="+", default=list(DRIVERS),
                   help=f"the drivers (default: {' '.join(DRIVERS)})")
    p.add_argument("--episodes", type=int, default=3, help="episodes of each driver (seeds 0..)")
    p.add_argument("--steps", type=int, default=3000,
                   help="steps of each episode (3,000: Enduro's episode as the runs cut it)")
    p.add_argument("--pairs", type=int, default=2000, help="pairs of clips asked of the teacher")
    p.add_argument("--runs", nargs="+", metavar="RUN_DIR",
                   help="instead: what decided these runs' stored labels")
    a = p.parse_args(argv)
    if a.runs:
        from launch.rundir import PREFS_FILE
        from pref_interface.store import PreferenceStore, StoreError

        for run_dir in a.runs:  # each store opened before any is read: a mistake is said up front
            try:
                PreferenceStore(Path(run_dir) / PREFS_FILE, create=False).close()
            except StoreError as e:
                p.error(f"--runs: {e}")
        print("| run | labels | ties | decided by the score | by an episode end alone | "
              "otherwise |\n|---|---|---|---|---|---|")
        for run_dir in a.runs:
            print(store_row(Path(run_dir)), flush=True)
        return 0
    if a.episodes < 1 or a.pairs < 1 or a.steps < 2 * CLIP_STEPS:
        p.error(f"--episodes and --pairs must be >= 1 and --steps >= {2 * CLIP_STEPS}")
    from a2c.checkpoint import CheckpointError

    for driver in a.drivers:  # each one made once before any plays: a mistake is said up front
        try:
            driver_policy(driver, np.random.default_rng(0))
        except (ValueError, CheckpointError) as e:  # an unknown driver, a policy that is not one
            p.error(f"--drivers: {e}")
    print(f"{ENV_ID}: {a.episodes} episode(s) of {a.steps:,} steps per driver, {a.pairs:,} "
          f"pairs of {CLIP_STEPS}-step clips")
    print("| driver | score per episode | clips that score | pairs decided |\n|---|---|---|---|")
    for driver in a.drivers:
        print(driver_row(driver, a.episodes, a.steps, a.pairs), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
