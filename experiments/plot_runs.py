#!/usr/bin/env python3
"""Turn run directories into a figure: true return against agent steps for each run, and, for
preference runs, labels used and predictor validation accuracy on the same axis.

    python -m experiments.plot_runs runs/pong_prefs runs/pong_true --labels prefs true \\
        --out docs/pong.png --title "Pong"
"""
from __future__ import annotations

import sys
from pathlib import Path


from experiments.runlog import RunLog, smooth
from runtime.outputs import prepare_figure
from runtime.script_args import ScriptParser, first_paragraph



def plot(run_dirs: list[str], names: list[str], out: str, title: str, window: int,
         reference: float | None = None) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import EngFormatter

    logs = [RunLog(d) for d in run_dirs]
    has_prefs = any(len(log.labels()[1]) for log in logs)
    fig, axes = plt.subplots(1, 3 if has_prefs else 1, figsize=(15 if has_prefs else 6, 4),
                             squeeze=False)
    ax = axes[0, 0]
    # Each run keeps its colour in every panel (a run without labels draws nothing in two of
    # them), and one legend below the panels names the runs, however long their names.
    for i, (log, name) in enumerate(zip(logs, names)):
        steps, values = log.returns()
        ax.plot(steps, smooth(values, window), label=name, color=f"C{i}")
    if reference is not None:
        ax.axhline(reference, color="grey", ls="--", lw=1, label=f"reference {reference:g}")
    ax.set(xlabel="agent steps", ylabel=f"true episode return (mean of {window})", title=title)
    if has_prefs:
        for i, log in enumerate(logs):
            s, n = log.labels()
            if len(n):
                axes[0, 1].plot(s, n, color=f"C{i}")
            s, a = log.predictor_accuracy()
            if len(a):
                axes[0, 2].plot(s, smooth(a, 5), color=f"C{i}")
        axes[0, 1].set(xlabel="agent steps", ylabel="labels", title="labels used")
        axes[0, 2].set(xlabel="agent steps", ylabel="validation accuracy",
                       title="reward predictor accuracy", ylim=(0.4, 1.0))
    for a in axes[0]:
        a.xaxis.set_major_formatter(EngFormatter(sep=""))  # 150k, 1.5M: no overlapping digits
    fig.tight_layout()
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0),
               ncol=min(len(labels), 3 if has_prefs else 1), frameon=False)
    fig.savefig(out, dpi=80, bbox_inches="tight")
    print(f"wrote {out}")


def main(argv: list[str] | None = None) -> int:
    p = ScriptParser(description=first_paragraph(__doc__))
    p.add_argument("run_dirs", nargs="+", help="run directories (each with a tb/ folder)")
    p.add_argument("--labels", nargs="*", help="legend names, one per run (default: dir names)")
    p.add_argument("--out", default="runs.png", help="output image (.png)")
    p.add_argument("--title", default="", help="figure title")
    p.add_argument("--window", type=int, default=32, help="episodes averaged per point")
    p.add_argument("--reference", type=float, help="draw a horizontal line at this return")
    a = p.parse_args(argv)
    missing = [d for d in a.run_dirs if not (Path(d) / "tb").is_dir()]
    if missing:
        p.error(f"no tb/ folder in {missing[0]}")
    names = a.labels or [Path(d).name for d in a.run_dirs]
    if len(names) != len(a.run_dirs):
        p.error("give one --labels name per run directory")
    if a.window < 1:
        p.error(f"--window must be at least 1, got {a.window}")
    try:
        prepare_figure(a.out, "--out")
    except ValueError as e:
        p.error(str(e))
    plot(a.run_dirs, names, a.out, a.title, a.window, a.reference)
    return 0


if __name__ == "__main__":
    sys.exit(main())
