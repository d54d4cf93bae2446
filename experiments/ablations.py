#!/usr/bin/env python3
"""Which paper features matter? MovingDot from synthetic preferences, several seeds per setting.

Each setting changes one thing from the baseline (random queries, 3-member ensemble, 10% noise
model, no adaptive L2, labels as fast as the predictor trains, the perfect oracle). A run stops as
soon as the mean true return of its last 64 episodes reaches 90% of the scripted go-to-centre
policy's (19.6, envs/scores.py), or at --million_timesteps. Reported per setting: how many seeds
reached it, and the median labels, agent steps and wall-clock (from the run's start, so the
initial labelling and pretraining are included) at that moment.

The runs go as one sweep (`experiments.sweep`), each an ordinary run directory
runs/ablations/<setting>-seed<k>, side by side where `--cpus_per_trial` and the machine (or the
Ray cluster of `--address`) allow. Each run's result is kept in runs/ablations/results.json once
it has ended; an interrupted ablation continues where it stopped, its unfinished runs resumed.

    python -m experiments.ablations                  # all settings, seeds 0 1 2
    python -m experiments.ablations --settings baseline sorting "sorting + implied pairs" \
        "sorting + rank loss"                       # pairs against sorting
    python -m experiments.ablations --report_only    # table and plot from what is done
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np


from envs.scores import MOVING_DOT_LEVEL as LEVEL
from experiments.runlog import level_reached
from experiments.sweep import Trial, add_sweep_flags, run_sweep, sweep_options
from runtime.script_args import ScriptParser

ROOT = Path(__file__).resolve().parent.parent

BASE = ["train_policy_with_preferences", "MovingDotNoFrameskip-v0", "--synthetic_prefs",
        "--n_initial_prefs", "200", "--n_initial_epochs", "20",
        "--reward_predictor_learning_rate", "3e-3", "--lr_zero_million_timesteps", "0.3",
        # docs/reproduction.md's ablation table was measured with this baseline: run.py's
        # MovingDot settings less adaptive L2, the limit of 2 pairs per clip and the smaller
        # entropy bonus; the "adaptive L2" row turns L2 back on (the sweep drops the negation).
        "--no_adaptive_l2", "--max_pairs_per_clip", "0", "--ent_coef", "0.01"]
SETTINGS: dict[str, list[str]] = {
    "baseline": [],
    "disagreement queries": ["--query_selection", "disagreement"],
    "entropy queries": ["--query_selection", "entropy"],  # B-Pref's samplers, beyond the paper
    "k-center queries": ["--query_selection", "k_center"],
    "ensemble of 1": ["--ensemble_size", "1"],
    "no noise model": ["--label_noise", "0"],
    "adaptive L2": ["--adaptive_l2"],
    "constant schedule, 1500 labels": ["--label_schedule", "constant", "--max_labels", "1500"],
    "annealed schedule, 1500 labels": ["--label_schedule", "annealed", "--max_labels", "1500",
                                       "--anneal_every_frames", "2e5"],
    "teacher errs 10%": ["--teacher", "mistake:eps=0.1"],
    # rl-teacher-atari's sorting instead of blind pairs, and what its order may add
    "sorting": ["--queries", "sort"],
    "sorting + implied pairs": ["--queries", "sort", "--implied_pairs"],
    "sorting + rank loss": ["--queries", "sort", "--predictor_loss", "both"],
}
OUT = ROOT / "runs" / "ablations"


def trial(name: str, seed: int) -> Trial:
    """A setting's run with one seed, in runs/ablations/<setting>-seed<seed>."""
    return Trial(seed, setting=name, setting_flags=tuple(SETTINGS[name]))


def report(results: list[dict], out_png: Path) -> None:
    print("| setting | seeds reaching 19.6 | median labels | median agent steps | median wall-clock |")
    print("|---|---|---|---|---|")
    rows = []
    for name in SETTINGS:
        rs = [r for r in results if r["setting"] == name]
        if not rs:
            continue
        ok = [r for r in rs if r["reached"]]
        med = (lambda k: float(np.median([r[k] for r in ok]))) if ok else (lambda k: float("nan"))
        rows.append((name, ok, rs))
        print(f"| {name} | {len(ok)}/{len(rs)} | {med('labels'):,.0f} | {med('steps'):,.0f} | "
              f"{med('wall_s') / 60:.1f} min |")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    for i, (name, ok, rs) in enumerate(rows):
        for ax, key, scale in ((axes[0], "labels", 1), (axes[1], "wall_s", 1 / 60)):
            ax.scatter([r[key] * scale for r in ok], [i] * len(ok), color="C0")
            if len(ok) < len(rs):
                ax.scatter([], [])
    for ax, label in ((axes[0], "labels to reach 90% of scripted"),
                      (axes[1], "minutes to reach 90% of scripted")):
        ax.set_yticks(range(len(rows)), [f"{n} ({len(ok)}/{len(rs)})" for n, ok, rs in rows])
        ax.set_xlabel(label)
        ax.grid(axis="x", alpha=0.3)
    axes[0].set_title("MovingDot, synthetic preferences: one dot per seed")
    fig.tight_layout()
    fig.savefig(out_png, dpi=80)
    print(f"wrote {out_png}")


def main(argv: list[str] | None = None) -> int:
    p = ScriptParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="seeds of each setting")
    p.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS),
                   help="the settings to run, by name")
    p.add_argument("--million_timesteps", type=float, default=0.3,
                   help="a run's agent-step budget, in millions, if it never reaches the level")
    p.add_argument("--report_only", action="store_true",
                   help="only print the table and draw the plot from the runs done")
    p.add_argument("--out", default=str(OUT / "ablations.png"),
                   help="where the plot goes (.png; default: beside the runs, "
                        "runs/ablations/ablations.png)")
    add_sweep_flags(p)
    a = p.parse_args(argv)
    OUT.mkdir(parents=True, exist_ok=True)
    results_file = OUT / "results.json"
    results = json.loads(results_file.read_text()) if results_file.is_file() else []
    todo = [trial(name, seed) for seed in a.seeds for name in a.settings
            if not any(r["setting"] == name and r["seed"] == seed for r in results)]
    code = 0
    if todo and not a.report_only:
        code = run_sweep([*BASE, "--million_timesteps", str(a.million_timesteps)], todo,
                         OUT / "sweep", runs_dir=OUT, stop_at=(LEVEL, 64), poll_s=5.0,
                         **sweep_options(a))
        if code == 2:
            return code
        for t in todo:
            r = level_reached(OUT / t.name, LEVEL)
            if r is not None:  # ended: at the level or at its agent steps
                results.append({"setting": t.setting, "seed": t.seed, **r})
                print(json.dumps(results[-1]))
        results_file.write_text(json.dumps(results, indent=1) + "\n")
    report(results, Path(a.out))
    return code


if __name__ == "__main__":
    sys.exit(main())
