#!/usr/bin/env python3
"""A run's progress as a table, one row per window of agent steps, read from its TensorBoard logs.

    python -m experiments.summarise_run RUN_DIR                 # windows of 250k steps
    python -m experiments.summarise_run RUN_DIR --every 100000
    python -m experiments.summarise_run RUN_DIR --levels 0 19   # and when 10 episodes' mean
                                                                # first reached 0 and +19

Each row gives, over the window, what tells a preference run's health at a glance: the means of the
true episode return and length (in Enduro also the share of steps level with another car,
`alongside`) and of the policy's entropy, the largest gradient norm before clipping (`grad_max`: a
blow that can kill the network's units shows as a spike, a non-finite one as nan), the share of
each torso layer's units alive at the window's last check (`alive %`, layer by layer; a 0 is a dead
layer, after which the policy can no longer learn), the spread of the reward A2C trains on
(`--reward_std` is its target), how much the policy's logits and value vary across its screens at
that check (`logit_sd`, `value_sd`; both near 0: it ignores what it sees, even with no layer dead;
the logits start near 0 anyway, the value does not), A2C's speed and the share of time it waited
for the predictor (over the window's time, long waits included), labels in the store, their share
of ties (`ties`: near 100%, r̂ has next to nothing to learn an order from) and the predictor's
validation accuracy at the window's end (with `--demonstrations`, also how often the latest labels
that set one beside the agent's clip preferred it: `demo_pref`), how well the reward A2C was given
ordered the policy's own episodes (`rhat_corr`: the correlation of each episode's summed r̂ with
its true return; `rhat_step_corr`: the same for r̂ per step, which episode length does not sway:
once a Pong policy wins, its best episodes are its shortest), and the mean of the members' L2
weights (adaptive L2, App. A). A column whose curve the run did not log shows "-" (older runs log
none of `grad_max`, `alive %`, `logit_sd`, `value_sd` and `ties`).
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np


from a2c.config import (ALIVE_TAG, ALONGSIDE_SHARE_TAG, GRAD_NORM_MAX_TAG, LOGIT_SPREAD_TAG,
                        VALUE_SPREAD_TAG)
from experiments.runlog import RunLog, best_window
from runtime.script_args import ScriptParser


# (heading, tag, process, how a window is reduced, format)
LENGTH_TAG = "charts/episodic_length"
COLUMNS = [
    ("episodes", "charts/episodic_return", "", "count", "{:.0f}"),
    ("return", "charts/episodic_return", "", "mean", "{:+.1f}"),
    ("length", LENGTH_TAG, "", "mean", "{:.0f}"),
    ("alongside", ALONGSIDE_SHARE_TAG, "", "mean", "{:.1%}"),  # Enduro: steps level with a car
    ("entropy", "losses/entropy", "", "mean", "{:.2f}"),
    ("grad_max", GRAD_NORM_MAX_TAG, "", "max", "{:.2f}"),
    ("r_std", "charts/reward_std", "", "mean", "{:.3f}"),
    ("logit_sd", LOGIT_SPREAD_TAG, "", "last", "{:.3f}"),
    ("value_sd", VALUE_SPREAD_TAG, "", "last", "{:.3f}"),
    ("steps/s", "charts/SPS", "", "timed", "{:.0f}"),  # steps over time, waits included
    ("waiting", "charts/waiting_for_predictor", "", "timed", "{:.0%}"),
    ("labels", "labels/total", "labels", "last", "{:.0f}"),
    ("ties", "labels/tie_share", "labels", "last", "{:.0%}"),  # of the stored labels
    ("val_acc", "reward_predictor/val_accuracy", "reward_predictor", "last", "{:.0%}"),
    ("demo_pref", "demonstrations/preferred", "labels", "last", "{:.0%}"),  # --demonstrations
]
L2_TAG = "reward_predictor/l2_member{}"
PREDICTED_TAG = "charts/predicted_return"


def percent(share: float) -> str:
    """A share as whole percent, but never 0 unless nothing: 1 unit of 512 alive is not dead."""
    return "0" if share == 0 else "<1" if share < 0.005 else f"{share:.0%}".rstrip("%")


def correlation(a: np.ndarray, b: np.ndarray) -> float | None:
    """Pearson's correlation; None with fewer than 3 points or no spread in either."""
    if len(a) < 3 or a.std() == 0 or b.std() == 0:
        return None
    return float(np.corrcoef(a, b)[0, 1])


def windows(log: RunLog, every: int) -> list[dict[str, str]]:
    """One dict of formatted cells per window of `every` agent steps that holds any A2C point."""
    curves = {heading: log.timed(tag) if how == "timed" else (*log.curve(tag, process), None)
              for heading, tag, process, how, _ in COLUMNS}
    curves["labels"] = (*log.labels(), None)  # with the store's own count at the end
    true_steps, true_returns = log.returns()
    _, predicted = log.curve(PREDICTED_TAG)  # logged beside each true return, episode by episode
    _, lengths = log.curve(LENGTH_TAG)
    l2 = [log.curve(L2_TAG.format(i), "reward_predictor") for i in range(16)]
    l2 = [c for c in l2 if len(c[0])]
    alive = [log.curve(f"{ALIVE_TAG}{k}") for k in range(1, 9)]
    alive = [c for c in alive if len(c[0])]
    sps_steps = curves["steps/s"][0]
    if len(sps_steps) == 0:
        return []
    rows = []
    last = int(sps_steps.max())
    for start in range(0, max(last, 1), every):
        # the last window ends where the run stands, its last point included
        end = start + every if start + every < last else last + 1
        shown = min(start + every, last)
        row = {"steps": f"{start / 1e6:.2f}-{shown / 1e6:.2f}M" if every >= 10_000
               else f"{start / 1e3:g}-{shown / 1e3:g}k"}  # windows finer than 0.01M in thousands
        for heading, _, _, how, fmt in COLUMNS:
            steps, values, weights = curves[heading]
            window = (steps >= start) & (steps < end)
            inside = values[window]
            if how == "count":
                row[heading] = fmt.format(len(inside))
            elif len(inside) == 0 or (how != "max" and np.isnan(inside).all()):
                row[heading] = "-"
            elif how == "timed" and weights[window].sum() > 0:
                row[heading] = fmt.format(np.average(inside, weights=weights[window]))
            else:
                # a NaN largest gradient (a blow-up, runtime.scalars) stays in its window's max
                reduce = {"last": lambda v: v[-1], "max": np.max}.get(how, np.nanmean)
                row[heading] = fmt.format(reduce(inside))
        in_window = (true_steps >= start) & (true_steps < end)
        corr = (correlation(predicted[in_window], true_returns[in_window])
                if len(predicted) == len(true_returns) else None)
        row["rhat_corr"] = "-" if corr is None else f"{corr:+.2f}"
        per_step = (correlation(predicted[in_window] / lengths[in_window],
                                true_returns[in_window])
                    if len(predicted) == len(true_returns) == len(lengths) else None)
        row["rhat_step_corr"] = "-" if per_step is None else f"{per_step:+.2f}"
        last_l2 = [v[(s >= start) & (s < end)][-1:] for s, v in l2]
        last_l2 = [float(v[0]) for v in last_l2 if len(v)]
        row["log10_l2"] = f"{math.log10(np.mean(last_l2)):.1f}" if last_l2 else "-"
        last_alive = [v[(s >= start) & (s < end)][-1:] for s, v in alive]
        row["alive %"] = "/".join(percent(float(v[0])) for v in last_alive if len(v)) or "-"
        rows.append(row)
    return rows


def levels_reached(log: RunLog, levels: list[float], window: int) -> str:
    """Where the mean true return of `window` episodes stands (best and last), and when it first
    reached each of `levels`: agent steps, labels in the store then, time of training."""
    steps, values = log.returns()
    if len(values) < window:
        return f"fewer than {window} episodes so far"
    best, best_at = best_window(steps, values, window)
    lines = [f"mean of {window} episodes: best {best:+.1f} at {best_at / 1e6:.2f}M "
             f"steps, last {values[-window:].mean():+.1f} at {steps[-1] / 1e6:.2f}M"]
    for level in levels:
        hit = log.first_time_at(level, window)
        if hit is None:
            lines.append(f"{level:+g}: not reached")
            continue
        labels = log.labels_at(hit[0])
        seconds = hit[1]
        took = f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.1f} min"
        lines.append(f"{level:+g}: first at {hit[0] / 1e6:.2f}M steps"
                     + ("" if labels is None else f", {labels:,.0f} labels")
                     + f", {took} of training")
    return "\n".join(lines)


def table(rows: list[dict[str, str]]) -> str:
    if not rows:
        return "no A2C points logged yet"
    heads = list(rows[0])
    widths = [max(len(h), *(len(r[h]) for r in rows)) for h in heads]
    line = lambda cells: "  ".join(c.rjust(w) for c, w in zip(cells, widths))  # noqa: E731
    return "\n".join([line(heads)] + [line([r[h] for h in heads]) for r in rows])


def main(argv: list[str] | None = None) -> int:
    p = ScriptParser(description=__doc__,  # the columns explained
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", help="a run directory (with a tb/ folder)")
    p.add_argument("--every", type=int, default=250_000, help="agent steps per row")
    p.add_argument("--levels", type=float, nargs="+", default=[],
                   help="also say when the mean of --window episodes first reached each level")
    p.add_argument("--window", type=int, default=10,
                   help="episodes averaged for --levels (10: the Pong milestone's)")
    a = p.parse_args(argv)
    if not Path(a.run_dir).exists():
        p.error(f"{a.run_dir} does not exist")
    if not (Path(a.run_dir) / "tb").is_dir():
        p.error(f"{a.run_dir} has no tb/ folder: not a run directory")
    if a.every <= 0:
        p.error("--every must be positive")
    if a.window <= 0:
        p.error("--window must be positive")
    if not all(map(math.isfinite, a.levels)):
        p.error("--levels must be finite numbers")
    log = RunLog(a.run_dir)
    print(table(windows(log, a.every)))
    if a.levels:
        print(levels_reached(log, a.levels, a.window))
    return 0


if __name__ == "__main__":
    sys.exit(main())
