#!/usr/bin/env python3
"""PPO through PreferenceVecEnv against our A2C: MovingDot from synthetic preferences.

For each seed, runs (a) `run.py train_policy_with_preferences MovingDotNoFrameskip-v0
--synthetic_prefs` (our A2C, the environment's own settings) and (b) `examples/ppo.py`
(stable-baselines3's PPO through the wrapper, same preference settings), one after the other.
Each stops once the mean true return of its last 64 episodes reaches 90% of the scripted policy's
(19.6), or at its step budget. Prints the labels, agent steps and wall-clock (from the command's
start: gathering and pretraining included) at that moment.

    python -m benchmarks.bench_ppo_wrapper --seeds 0 --out_dir ~/runs/ppo_vs_a2c
"""
from __future__ import annotations

import json
import platform
import sys
from pathlib import Path


from experiments.time_to_level import run_until_level
from envs.scores import MOVING_DOT_LEVEL
from runtime.script_args import ScriptParser

ROOT = Path(__file__).resolve().parent.parent


def commands(seed: int, out: Path, ppo_million: float) -> dict[str, tuple[list[str], Path]]:
    a2c, ppo = out / f"a2c-seed{seed}", out / f"ppo-seed{seed}"
    return {
        "our A2C (run.py)": (["run.py", "train_policy_with_preferences", "MovingDotNoFrameskip-v0",
                              "--synthetic_prefs", "--seed", str(seed), "--log_dir", str(a2c)], a2c),
        "SB3 PPO through PreferenceVecEnv": (
            ["-m", "examples.ppo", "--synthetic_prefs", "--stop_at_level", "--seed", str(seed),
             "--million_timesteps", str(ppo_million), "--log_dir", str(ppo)], ppo),
    }


def main(argv: list[str] | None = None) -> int:
    p = ScriptParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0],
                   help="seeds, each run with our A2C and with PPO")
    p.add_argument("--out_dir", default=str(ROOT / "runs" / "ppo_vs_a2c"),
                   help="where the runs' directories go")
    p.add_argument("--ppo_million_timesteps", type=float, default=1.0,
                   help="PPO's agent-step budget, in millions")
    a = p.parse_args(argv)
    out = Path(a.out_dir).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    print(f"machine: {platform.processor() or platform.machine()}; level {MOVING_DOT_LEVEL}",
          flush=True)
    rows = []
    for seed in a.seeds:
        for name, (cmd, run_dir) in commands(seed, out, a.ppo_million_timesteps).items():
            r = {"agent": name, "seed": seed, **run_until_level(cmd, run_dir, MOVING_DOT_LEVEL)}
            print(json.dumps(r), flush=True)
            rows.append(r)
    print("| agent | seed | reached 19.6 | labels | agent steps | wall-clock |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        if r["reached"]:
            print(f"| {r['agent']} | {r['seed']} | yes | {r['labels']:,.0f} | {r['steps']:,.0f} | "
                  f"{r['wall_s'] / 60:.1f} min |")
        else:
            print(f"| {r['agent']} | {r['seed']} | no: {r['last_return']:+.1f} (last 64 "
                  f"episodes) at {r['last_steps']:,.0f} steps | - | - | "
                  f"{r['total_wall_s'] / 60:.1f} min in all |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
