#!/usr/bin/env python3
"""Reproduce a milestone with one command: run (or resume) its seeds, then report and plot.

    python -m experiments.milestone moving_dot          # 3 seeds, synthetic preferences
    python -m experiments.milestone pong_prefs          # Pong from synthetic preferences
    python -m experiments.milestone pong_true           # the true-reward baseline beside it

The seeds go as one sweep (`experiments.sweep`): side by side where `--cpus_per_trial` and the
machine (or the Ray cluster of `--address`) allow, one after another on a 2-core machine with the
default 2 CPUs per run. Runs live in runs/milestones/<name>-seed<k>, or under `--runs_dir` (a long
run belongs outside the checkout, e.g. `--runs_dir ~/runs`); each run's output goes to
<runs_dir>/<name>-sweep/console/. A run that exists is resumed (`run.py --resume`, with
`--extra`'s flags), so the same command continues a long reproduction after a stop, a crash or a
reboot. The report gives, per seed, the agent steps, labels and wall-clock at which the mean true
return of the last episodes first reached the milestone's level, and where the run stands now
(the mean of the last episodes), and plots every seed's curve into <runs_dir>/<name>.png, beside
the runs (`--out` elsewhere; the report's committed figures come from `experiments.report`). For
Pong it then judges each seed as `experiments.held` does: the final policy played once the level
is reached, every kept checkpoint probed.
"""
from __future__ import annotations

import sys
from pathlib import Path


from a2c.config import checkpoint_steps, checkpoints
from experiments.milestones import MILESTONES, Milestone
from experiments.plot_runs import plot
from experiments.runlog import RunLog
from experiments.runrecord import run_finished
from experiments.sweep import Trial, add_sweep_flags, run_sweep, sweep_options
from launch.rundir import POLICY_DIR
from runtime.outputs import prepare_figure
from runtime.script_args import ScriptParser

ROOT = Path(__file__).resolve().parent.parent


RUNS_DIR = ROOT / "runs" / "milestones"


def run_dir(name: str, seed: int, runs_dir: Path = RUNS_DIR) -> Path:
    return runs_dir / f"{name}-seed{seed}"


def report(m: Milestone, name: str, seeds: list[int], runs_dir: Path = RUNS_DIR,
           out: Path | None = None) -> list[str]:
    """Print each seed's row and plot the seeds' curves into `out` (<runs_dir>/<name>.png); the run
    directories found."""
    dirs, found = [], []
    for seed in seeds:
        d = run_dir(name, seed, runs_dir)
        if not (d / "tb").is_dir():
            continue
        if not dirs:  # the table's head, once a run is there to fill it
            print(f"\n{name}: {m.env_id}, " + (f"level {m.level:g}" if m.level is not None
                                              else "no level") + f" ({m.note})")
            print(f"| seed | reached | agent steps | labels | wall-clock | last {m.window} "
                  "episodes |")
            print("|---|---|---|---|---|---|")
        dirs.append(str(d))
        found.append(seed)
        log = RunLog(d)
        _, values = log.returns()
        # Where the run stands now: a level reached once need not be held.
        last = f"{values[-m.window:].mean():+.1f}" if len(values) else "-"
        hit = log.first_time_at(m.level, m.window) if m.level is not None else None

        def labels(steps: float) -> str:
            n = log.labels_at(steps)
            return "-" if n is None else f"{n:,.0f}"

        if hit is None:
            kept = checkpoints(d / POLICY_DIR)
            total = checkpoint_steps(kept[-1]) if kept else 0
            so_far = "" if run_finished(d) else " so far"
            reached = "not yet" if m.level is not None else "-"
            print(f"| {seed} | {reached} | {total:,.0f}{so_far} | {labels(total)} | "
                  f"{log.wall_clock_s() / 60:.1f} min{so_far} | {last} |")
            continue
        at_steps, at_s = hit
        print(f"| {seed} | yes | {at_steps:,.0f} | {labels(at_steps)} | {at_s / 60:.1f} min "
              f"| {last} |")
    if dirs:
        out = out or runs_dir / f"{name}.png"
        plot(dirs, [f"seed {s}" for s in found], str(out),
             f"{name} ({m.env_id})", max(8, m.window // 2), m.level)
    if m.budget is not None:  # whether each seed holds the level (experiments.held)
        from experiments.held import main as held

        for d in dirs:
            if checkpoints(Path(d) / POLICY_DIR):
                print()
                held([d])
    return dirs


def main(argv: list[str] | None = None) -> int:
    p = ScriptParser(description=__doc__.splitlines()[0])
    p.add_argument("name", choices=sorted(MILESTONES), help="the milestone")
    p.add_argument("--seeds", type=int, nargs="+", default=None,
                   help="seeds to run (default: 0 1 2 for moving_dot, 0 for the others)")
    p.add_argument("--report_only", action="store_true", help="only report and plot")
    p.add_argument("--extra", default="", help="more run.py flags, quoted (e.g. threads)")
    p.add_argument("--runs_dir", type=Path, default=RUNS_DIR,
                   help="where the runs live (<runs_dir>/<name>-seed<k>; default: "
                        "runs/milestones in the checkout)")
    p.add_argument("--out", type=Path, default=None,
                   help="the figure's path (default: <runs_dir>/<name>.png)")
    sweep_flags = add_sweep_flags(p)
    a = p.parse_args(argv)
    m = MILESTONES[a.name]
    seeds = a.seeds if a.seeds is not None else ([0, 1, 2] if a.name == "moving_dot" else [0])
    if min(seeds) < 0:
        p.error(f"--seeds must be 0 or more, got {min(seeds)}")
    runs_dir = a.runs_dir.expanduser()
    running = [f for f in ("extra", *sweep_flags) if getattr(a, f) != p.get_default(f)]
    if a.report_only and running:
        p.error(f"--report_only runs nothing: --{', --'.join(running)} would be ignored")
    if a.report_only and not runs_dir.is_dir():
        p.error(f"--runs_dir: {runs_dir} is not a folder of runs (the committed records' "
                f"tables and figures: python -m experiments.report)")
    if a.out:
        try:
            prepare_figure(a.out.expanduser(), "--out")
        except ValueError as e:
            p.error(str(e))
    code = 0
    if not a.report_only:
        # --extra goes with each seed's own flags, so that a resumed run takes it too.
        trials = [Trial(seed, setting=a.name, setting_flags=tuple(a.extra.split()))
                  for seed in seeds]
        code = run_sweep([m.mode, m.env_id, *m.flags], trials, runs_dir / f"{a.name}-sweep",
                         runs_dir=runs_dir, **sweep_options(a))
        if code == 2:
            return code
    if not report(m, a.name, seeds, runs_dir, a.out and a.out.expanduser()):
        print(f"{p.prog}: no run of {a.name} for seeds {' '.join(map(str, seeds))} in {runs_dir}",
              file=sys.stderr)
        return code or 1
    return code


if __name__ == "__main__":
    sys.exit(main())
