#!/usr/bin/env python3
"""What N labels teach the predictor, without RL: blind pairs against sorted clips.

For each `--queries` mode: gather `max(--labels)` labels from the untrained policy with the
synthetic oracle (`run.py gather_initial_prefs ENV --synthetic_prefs --queries Q`), then for each
N of `--labels` pretrain a predictor on the first N of them (`run.py pretrain_reward_predictor`,
the environment's own predictor settings), and score it on fresh random play as
`experiments.probe_predictor` does: clip agreement (for random pairs of 25-step clips whose true
returns differ, how often r̂ orders them as the game does) and the per-clip correlation. With one
of Enduro's teachers in `--extra` (`--extra "--teacher alongside_near"`), the labels are that
teacher's and r̂ is scored against its score of each step.

    python -m experiments.label_efficiency PongNoFrameskip-v4 --labels 250 500 1000 \\
        --runs_dir ~/runs/label_efficiency

The gathering runs, then the pretraining runs, go as two sweeps (`experiments.sweep`), each run
an ordinary run directory in `--runs_dir` (`pairs_gather-seed0`, `pairs_250-seed0`, ...). Runs
that exist are reused or resumed (the gathered stores, the pretrained predictors and their scores
in `results.json`), so the command continues after a stop. Prints one table, writes
`results.json` in `--runs_dir` and, with `--plot`, a figure of both measures against the labels,
one line per mode.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path


from experiments.sweep import Trial, add_sweep_flags, run_sweep, sweep_options
from launch.rundir import PREDICTOR_FILE, PREFS_FILE, epochs_pretrained
from pref_interface.store import PreferenceStore, stored_labels
from runtime.script_args import ScriptParser, first_paragraph

ROOT = Path(__file__).resolve().parent.parent


def stored_labels_at(run_dir: Path) -> int:
    """The labels in a run directory's store (0 where it has none yet)."""
    return stored_labels(run_dir / PREFS_FILE) if (run_dir / PREFS_FILE).is_file() else 0


def pretrained(run_dir: Path) -> bool:
    """Whether a pretraining run did all its epochs (one stopped part-way has a predictor too,
    and goes on from it when run again)."""
    from launch.cli import UsageError, load_settings

    try:
        epochs = load_settings(run_dir).n_initial_epochs
    except UsageError:  # not started yet
        return False
    return (run_dir / "reward_predictor" / PREDICTOR_FILE).is_file() and \
        epochs_pretrained(run_dir) >= epochs


def predictor_trial(queries: str, n: int, seed: int, out: Path) -> Trial:
    """The run that pretrains a predictor on the first `n` labels gathered with `queries`."""
    return Trial(seed, setting=f"{queries}-{n}",
                 setting_flags=("--load_prefs_dir", str(out / f"{queries}-{n}-labels")))


def first_labels(src: Path, n: int, dst: Path) -> None:
    """A store in `dst` holding the first `n` labels of `src`'s store (the rest deleted)."""
    dst.mkdir(parents=True, exist_ok=True)
    with PreferenceStore(src / PREFS_FILE, create=False) as store:
        store.backup_to(dst / PREFS_FILE)
    with PreferenceStore(dst / PREFS_FILE, create=False) as store:
        for label_id in store.all_ids()[n:]:
            store.delete(label_id)


def agreement(run_dir: Path, steps: int, n_envs: int, seed: int) -> dict:
    """The predictor of `run_dir` on fresh random play: clip agreement and correlation."""
    from experiments.probe_predictor import probe_run

    probe = probe_run(run_dir, "random", steps, n_envs, seed)
    return {"clip_agreement": probe.clip_agreement(), "clip_correlation": probe.clip_correlation(),
            "target": probe.target}


def main(argv: list[str] | None = None) -> int:
    p = ScriptParser(description=first_paragraph(__doc__))
    p.add_argument("env_id", help="the env id")
    p.add_argument("--queries", nargs="+", default=["pairs", "sort"], choices=["pairs", "sort"],
                   help="query modes compared (run.py's --queries)")
    p.add_argument("--labels", type=int, nargs="+", default=[250, 500, 1000],
                   help="label counts a predictor is pretrained on")
    p.add_argument("--epochs", type=int, default=None,
                   help="pretraining epochs (default: the environment's own)")
    p.add_argument("--seed", type=int, default=0, help="seed of the runs and the probe")
    p.add_argument("--probe_steps", type=int, default=1000, help="steps of each probe env")
    p.add_argument("--probe_envs", type=int, default=8, help="envs the probe plays side by side")
    p.add_argument("--runs_dir", type=Path, default=ROOT / "runs" / "label_efficiency",
                   help="where the runs and results.json go")
    p.add_argument("--extra", default="", help="more run.py flags for every run, quoted")
    p.add_argument("--plot", help="a figure of the table (e.g. docs/label_efficiency_pong.png)")
    add_sweep_flags(p)
    a = p.parse_args(argv)
    if min(a.labels) < 2:
        p.error("--labels must be at least 2")
    out = a.runs_dir.expanduser()
    extra = a.extra.split() + (["--n_initial_epochs", str(a.epochs)] if a.epochs else [])
    kept_file = out / "results.json"
    done = json.loads(kept_file.read_text()) if kept_file.is_file() else []
    probe = {"env_id": a.env_id, "epochs": a.epochs, "extra": a.extra,
             "probe_steps": a.probe_steps, "probe_envs": a.probe_envs, "seed": a.seed}
    scored = {(r["queries"], r["labels"]): r for r in done
              if all(r.get(k) == v for k, v in probe.items())}
    todo = [(q, n) for q in a.queries for n in sorted(a.labels) if (q, n) not in scored]
    wanted = max(a.labels)
    pretrain = {}  # the sizes to score whose predictor is not trained yet
    for q, n in todo:
        t = predictor_trial(q, n, a.seed, out)
        if not pretrained(out / t.name):
            pretrain[q, n] = t
    gather = {q: Trial(a.seed, setting=f"{q}-gather",
                       setting_flags=("--queries", q, "--n_initial_prefs", str(wanted)))
              for q in dict.fromkeys(q for q, _ in pretrain)}
    short = [t for t in gather.values() if stored_labels_at(out / t.name) < wanted]
    if short:
        code = run_sweep(["gather_initial_prefs", a.env_id, "--synthetic_prefs", *extra], short,
                         out / "sweep", runs_dir=out, **sweep_options(a))
        if code:
            return code
    if pretrain:
        for q, n in pretrain:
            first_labels(out / gather[q].name, n, out / f"{q}-{n}-labels")
        code = run_sweep(["pretrain_reward_predictor", a.env_id, *extra], list(pretrain.values()),
                         out / "sweep", runs_dir=out, **sweep_options(a))
        if code:
            return code
    rows = []
    for q in a.queries:
        for n in sorted(a.labels):
            if (q, n) not in scored:
                trained = out / predictor_trial(q, n, a.seed, out).name
                scored[q, n] = {"queries": q, "labels": n, **probe,
                                **agreement(trained, a.probe_steps, a.probe_envs, a.seed + 1)}
                print(json.dumps(scored[q, n]), flush=True)
            rows.append(scored[q, n])
    kept = [r for r in done if r not in rows]  # scores of other sizes or settings stay
    (out / "results.json").write_text(json.dumps(kept + rows, indent=1) + "\n")
    print(f"\n{a.env_id}: the predictor after N labels, on fresh random play "
          f"({a.probe_steps} steps x {a.probe_envs} envs), against {target(rows)}")
    print("| queries | labels | clip agreement | per-clip correlation |\n|---|---|---|---|")
    for r in rows:
        print(f"| {r['queries']} | {r['labels']:,} | {r['clip_agreement']:.3f} | "
              f"{r['clip_correlation']:.3f} |")
    if a.plot:
        plot(rows, a.env_id, a.plot)
    return 0


def target(rows: list[dict]) -> str:
    """What the rows' r̂ was scored against (rows kept from before it was recorded: the game)."""
    from experiments.probe_predictor import TRUE_REWARD

    return rows[0].get("target", TRUE_REWARD) if rows else TRUE_REWARD


def plot(rows: list[dict], env_id: str, out: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
    for ax, key, name in zip(axes, ("clip_agreement", "clip_correlation"),
                             (f"clip agreement with {target(rows)}", "per-clip correlation")):
        for queries in dict.fromkeys(r["queries"] for r in rows):
            mine = [r for r in rows if r["queries"] == queries]
            ax.plot([r["labels"] for r in mine], [r[key] for r in mine], "o-",
                    label="sorting" if queries == "sort" else "blind pairs")
        ax.set(xlabel="labels", ylabel=name, title=f"{env_id}: r̂ on fresh random play")
        ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=80)
    print(f"wrote {out}")


if __name__ == "__main__":
    sys.exit(main())
