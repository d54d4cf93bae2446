#!/usr/bin/env python3
"""Record a driver's Enduro play as demonstrations, for `--demonstrations FILE`.

    python -m experiments.record_demonstrations follower.npz --driver follower
    python -m experiments.record_demonstrations mixed.npz --driver following:0.85 --episodes 2

The drivers are those of `experiments.alongside_teachers` (the scripted follower, `following:P`,
`policy:PATH` for a saved policy's sampled play, ...). Each episode's first `--steps` steps are
cut into 25-step clips with their actions, game rewards and episode ends, and written as
clips/demonstrations.py describes. It prints each episode's share of steps level with another
car. A scripted driver stands in here for a person's own driving (`demonstrate.py` records that).
"""
from __future__ import annotations

import sys
from pathlib import Path

from a2c.checkpoint import CheckpointError
from clips.demonstrations import save_demonstrations
from envs import check_seed
from experiments.alongside_teachers import ENV_ID, clips_of, drive, driver_policy, level_share
from runtime.outputs import prepare_output
from runtime.script_args import ScriptParser


def main(argv: list[str] | None = None) -> int:
    p = ScriptParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path, help="the demonstrations file to write (never overwritten)")
    p.add_argument("--driver", default="follower",
                   help="who drives (experiments.alongside_teachers): follower, following:P, "
                        "policy:PATH, random, ...")
    p.add_argument("--episodes", type=int, default=3, help="episodes, seeds --seed, --seed + 1, ...")
    p.add_argument("--steps", type=int, default=3000, help="steps of each episode recorded")
    p.add_argument("--seed", type=int, default=100, help="seed of the first episode")
    a = p.parse_args(argv)
    if a.episodes < 1 or a.steps < 25:
        p.error("--episodes must be >= 1 and --steps >= 25 (one clip)")
    try:  # every episode's seed, before any is driven
        check_seed(a.seed, a.episodes)
    except ValueError as e:
        p.error(str(e))
    try:
        driver_policy(a.driver, None)
    except (ValueError, OSError, KeyError, CheckpointError) as e:
        p.error(f"--driver: {e}")
    try:  # before the driving: a file there already, or a folder that cannot be made
        prepare_output(a.out, "out")
    except ValueError as e:
        p.error(str(e))
    clips = []
    for k in range(a.episodes):
        played = drive(a.driver, a.steps, a.seed + k)
        clips += clips_of(played)
        print(f"episode {k + 1}/{a.episodes}: level with a car in {level_share(played.frames):.1%} "
              f"of {a.steps:,} steps, game score {played.rewards.sum():+.0f}", flush=True)
    save_demonstrations(a.out, ENV_ID, clips)
    print(f"wrote {len(clips)} clip{'s' if len(clips) != 1 else ''} of {a.driver} to {a.out} "
          f"({a.out.stat().st_size / 2**20:.1f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
