#!/usr/bin/env python3
"""Enduro's "keep alongside other cars" (§3.2), without RL: does r̂ learn to pay for the
behaviour once its labels include clips of driving closer to it?

    python -m experiments.alongside_labels ~/runs/enduro_ppo_hold --runs_dir ~/runs/alongside_labels
    python -m experiments.alongside_labels RUN --labels 300 --drivers following:0.5 follower

RUN is a run taught by one of Enduro's teachers. Two predictors are pretrained from scratch with
the same settings (`run.py pretrain_reward_predictor`; by default one member for 30 epochs,
cheaper than a run's three for 50): `base` on the labels of RUN's store, `closer` on those and
`--labels` more from the same teacher, on random pairs of 25-step clips of `--drivers` (those of
`experiments.alongside_teachers`: random play, the scripted follower, `following:P`,
`policy:PATH` for a saved policy's sampled play), a share held
out for validation as the labelling process holds it out. Each is then probed as
`experiments.probe_predictor --policy follower` does, on fresh episodes: how often r̂ and the
teacher prefer the follower's clip to random play's, and how often r̂ orders pairs of clips of
that play as the teacher does. Runs that exist are reused, so the command continues after a stop.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from experiments.label_efficiency import pretrained
from experiments.sweep import Trial, add_sweep_flags, run_sweep, sweep_options
from launch.rundir import PREFS_FILE
from pref_interface.labellers.teachers import ENDURO_TEACHERS, make_teacher, teacher_kind
from pref_interface.store import PreferenceStore
from runtime.script_args import ScriptParser, first_paragraph

ROOT = Path(__file__).resolve().parent.parent
ENV_ID = "EnduroNoFrameskip-v4"
ARMS = ("base", "closer")
DONE = "labels-complete"  # marks a store whose labels are all in


def driver_clips(drivers: list[str], episodes: int, steps: int, seed: int) -> list:
    """The 25-step clips of `episodes` episodes of `steps` steps of each driver."""
    from experiments.alongside_teachers import clips_of, play

    return [clip for driver in drivers for k in range(episodes)
            for clip in clips_of(play(driver, steps, seed + k))]


def add_labels(store_path: Path, clips: list, teacher, n: int, val_fraction: float,
               rng: np.random.Generator) -> int:
    """`n` of the teacher's labels on random pairs of `clips` added to the store, each held out
    for validation with probability `val_fraction`; a pair the teacher cannot decide (None) is
    passed over. Returns the labels added."""
    from clips.clip import Preference

    added = 0
    with PreferenceStore(store_path, create=False) as store:
        for _ in range(n):
            i, j = rng.choice(len(clips), 2, replace=False)
            mu = teacher.label(clips[i], clips[j])
            if mu is not None:
                store.add(Preference(clips[i], clips[j], mu, "synthetic",
                                     is_validation=bool(rng.random() < val_fraction)))
                added += 1
    return added


def probe(run_dir: Path, steps: int, n_envs: int, seed: int) -> dict[str, float]:
    """A pretrained predictor against its teacher on the follower's and random play's clips."""
    from experiments.probe_predictor import follower_envs, follower_preferred, probe_run

    found = probe_run(run_dir, "follower", steps, n_envs, seed)
    by_r_hat, by_teacher = follower_preferred(found, follower_envs(n_envs).start)
    return {"r_hat": by_r_hat, "teacher": by_teacher, "agreement": found.clip_agreement()}


def main(argv: list[str] | None = None) -> int:
    p = ScriptParser(description=first_paragraph(__doc__))
    p.add_argument("run_dir", type=Path, help="a run taught by one of Enduro's teachers")
    p.add_argument("--labels", type=int, default=500, help="labels added on the drivers' clips")
    p.add_argument("--drivers", nargs="+", default=["random", "following:0.5", "following:0.85",
                                                    "follower"],
                   help="whose clips the added labels compare (experiments.alongside_teachers)")
    p.add_argument("--episodes", type=int, default=2, help="episodes of each driver")
    p.add_argument("--steps", type=int, default=1500, help="steps of each driver's episode")
    p.add_argument("--members", type=int, default=1, help="the predictors' ensemble members")
    p.add_argument("--epochs", type=int, default=30, help="pretraining epochs")
    p.add_argument("--seed", type=int, default=0, help="seed of the drivers, pairs and runs")
    p.add_argument("--probe_steps", type=int, default=3000, help="steps of each probe env")
    p.add_argument("--probe_envs", type=int, default=4, help="envs the probe plays (half follow)")
    p.add_argument("--runs_dir", type=Path, default=ROOT / "runs" / "alongside_labels",
                   help="where the stores and runs go")
    p.add_argument("--extra", default="", help="more run.py flags for both runs, quoted")
    add_sweep_flags(p)
    a = p.parse_args(argv)
    from launch.cli import UsageError, load_settings

    try:
        settings = load_settings(a.run_dir.expanduser())
    except UsageError as e:
        p.error(str(e))
    if teacher_kind(settings.teacher) not in ENDURO_TEACHERS:
        p.error(f"{a.run_dir} was not taught by one of Enduro's teachers "
                f"({', '.join(sorted(ENDURO_TEACHERS))})")
    if a.labels < 1 or a.probe_envs < 2:
        p.error("--labels must be positive and --probe_envs at least 2")
    out = a.runs_dir.expanduser()
    stores = {arm: out / f"{arm}-labels" for arm in ARMS}
    for arm, folder in stores.items():
        if (folder / DONE).is_file():
            continue
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.glob(f"{PREFS_FILE}*"):  # a store cut short is made again
            old.unlink()
        with PreferenceStore(a.run_dir.expanduser() / PREFS_FILE, create=False) as src:
            src.backup_to(folder / PREFS_FILE)
        if arm == "closer":
            from pref_interface.config import LabellingConfig

            clips = driver_clips(a.drivers, a.episodes, a.steps, a.seed)
            added = add_labels(folder / PREFS_FILE, clips, make_teacher(settings.teacher),
                               a.labels, LabellingConfig.val_fraction,
                               np.random.default_rng(a.seed))
            print(f"closer: {added} labels on {len(clips)} clips of {' '.join(a.drivers)}")
        (folder / DONE).touch()
    trials = [Trial(a.seed, setting=arm, setting_flags=("--load_prefs_dir", str(stores[arm])))
              for arm in ARMS]
    todo = [t for t in trials if not pretrained(out / t.name)]
    if todo:
        code = run_sweep(["pretrain_reward_predictor", ENV_ID, "--synthetic_prefs", "--teacher",
                          settings.teacher, "--ensemble_size", str(a.members),
                          "--n_initial_epochs", str(a.epochs), *a.extra.split()],
                         todo, out / "sweep", runs_dir=out, **sweep_options(a))
        if code:
            return code
    print(f"\n| labels | r̂ prefers the follower's clip | {settings.teacher} prefers it | "
          "r̂ orders pairs as the teacher |\n|---|---|---|---|")
    for arm, t in zip(ARMS, trials):
        with PreferenceStore(stores[arm] / PREFS_FILE, create=False) as store:
            n = len(store)
        r = probe(out / t.name, a.probe_steps, a.probe_envs, a.seed + 1)
        print(f"| {arm}: {n:,} | {r['r_hat']:.1%} | {r['teacher']:.1%} | {r['agreement']:.1%} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
