#!/usr/bin/env python3
"""How reliably does MovingDot learn from synthetic preferences? The check of
tests/test_learning.py, run for many seeds as one sweep.

A run passes once the mean true return of its last 64 training episodes reaches LEARNED_LEVEL
(10 above random play's -2.5; the mean of 64 random episodes has a standard error of about 1.2,
so a loop that learns nothing never gets there), within the milestone's 0.3M agent steps. It
checks that learning happens, not where a run ends: a run that learns can drift away later
(docs/experiments.md, "MovingDot's entropy bonus and fall-back").

The seeds' runs go as one sweep (`experiments.sweep`), each stopped once it passes, each an
ordinary run directory OUT_DIR/seed<k>; a run there already is resumed, or counted as it is if it
has ended.

    python -m experiments.learning_reliability --seeds 0 1 2 ... --out_dir ~/runs/reliability
"""
from __future__ import annotations

import json
import sys
from pathlib import Path


from experiments.time_to_level import run_until_level
from envs.scores import MOVING_DOT_RANDOM
from experiments.runlog import level_reached
from experiments.sweep import Trial, add_sweep_flags, run_sweep, sweep_options
from runtime.script_args import ScriptParser, first_paragraph

ROOT = Path(__file__).resolve().parent.parent

LEARNED_LEVEL = MOVING_DOT_RANDOM + 10
COMMAND = ["train_policy_with_preferences", "MovingDotNoFrameskip-v0", "--synthetic_prefs"]


def moving_dot_learns(seed: int, run_dir: Path) -> dict:
    """The README's first command with this seed, stopped once it reaches LEARNED_LEVEL."""
    cmd = ["run.py", *COMMAND, "--seed", str(seed), "--log_dir", str(run_dir)]
    return {"seed": seed, **run_until_level(cmd, run_dir, LEARNED_LEVEL, poll_s=2.0)}


def main(argv: list[str] | None = None) -> int:
    p = ScriptParser(description=first_paragraph(__doc__))
    p.add_argument("--seeds", type=int, nargs="+", default=list(range(20)), help="seeds to run")
    p.add_argument("--out_dir", default=str(ROOT / "runs" / "reliability"),
                   help="where the runs' directories go")
    add_sweep_flags(p)
    a = p.parse_args(argv)
    out = Path(a.out_dir).expanduser()
    code = run_sweep(COMMAND, [Trial(seed) for seed in a.seeds], out / "sweep", runs_dir=out,
                     stop_at=(LEARNED_LEVEL, 64), poll_s=2.0, **sweep_options(a))
    if code == 2:
        return code
    results = []
    for seed in a.seeds:
        r = level_reached(out / f"seed{seed}", LEARNED_LEVEL)
        if r is not None:  # ended: at the level or at its agent steps
            results.append({"seed": seed, **r})
            print(json.dumps(results[-1]), flush=True)
    ok = [r for r in results if r["reached"]]
    print(f"{len(ok)} of {len(results)} runs reached {LEARNED_LEVEL:+.1f}"
          + (f"; agent steps to it: {min(r['steps'] for r in ok):,.0f} to "
             f"{max(r['steps'] for r in ok):,.0f}; wall-clock {min(r['wall_s'] for r in ok):.0f} "
             f"to {max(r['wall_s'] for r in ok):.0f} s" if ok else "")
          + (f" ({len(a.seeds) - len(results)} not ended)" if len(results) < len(a.seeds) else ""))
    return code


if __name__ == "__main__":
    sys.exit(main())
