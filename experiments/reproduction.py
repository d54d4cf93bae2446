#!/usr/bin/env python3
"""One game's reproduction at a glance: every run's true score against agent steps, the runs
from preferences and from the true reward on the same axes, and a table row per run.

    python -m experiments.reproduction Pong --level 19 --out docs/pong_seeds.png \\
        --prefs ~/runs/pong_prefs_seed1 ~/runs/pong_prefs_seed2 --true ~/runs/pong_true_seed0

A row gives the run's seed, agent steps, labels, hours of training (stops not counted), the
processors it ran on and how often it was resumed (`machines.txt` and `command.txt` of the run
directory), when the mean of `--window` episodes first reached `--level`, its lowest mean of
`--window` episodes after that and the mean of every episode after it (a level held, or touched
and lost), its best mean of `--window` episodes and its final one; a run started with flags
that others of its kind were not (`--lr_zero_million_timesteps 6`, say) is named by them, in the
row and in the legend, and two runs of one command and seed by their names (a run started again
on another machine). A run is given by its directory or by the record of it kept in the repository
(`docs/run_records/NAME.json`, written by `--save_records docs/run_records`: see
`experiments.runrecord`). With `--every STEPS`, a second table gives each run's mean return and
share of episodes lost per STEPS agent steps. The policies themselves are scored by
`experiments.evaluate` (greedy and sampled play of the best and the final checkpoints).
"""
from __future__ import annotations

import collections
import itertools
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np


from experiments.runlog import best_window, first_reached, smooth
from experiments.runrecord import PROGRAMS, RunRecord, as_typed
from launch.rundir import is_run_dir, saved_settings
from launch.settings import flag_fields
from runtime.outputs import prepare_figure
from runtime.script_args import ScriptParser, first_paragraph


KINDS = {"prefs": ("from preferences", "tab:blue"), "true": ("true reward", "tab:orange")}
LINESTYLES = ("-", "--", ":", "-.")
LEVEL_COLUMNS = slice(7, 10)  # reaching the level and after it: none where a game has no level


@dataclass
class RunRow:
    kind: str  # "prefs" or "true"
    record: RunRecord
    seed: int | None
    steps: float
    labels: float | None
    hours: float
    machines: list[str]  # the distinct processors it ran on, in order
    starts: int  # 1 + times resumed (0: not recorded)
    reached: tuple[float, float | None] | None  # (agent steps, labels) when the level was reached
    lowest: tuple[float, float] | None  # (mean of the window, agent steps) lowest after reaching it
    after: float | None  # the mean return of every episode from reaching the level to the end
    best: tuple[float, float] | None  # (mean of the window, agent steps at its end)
    final: float | None
    flags: str = ""  # the start flags that set it apart from the other runs of its kind
    name: str = ""  # the run's name, where kind, flags and seed do not tell it from another
    after_episodes: int = 0  # how many episodes `after` averages

    @property
    def title(self) -> str:
        # a run on a teacher's own score (--teacher_reward) learns from no labels
        kind = ("on the teacher's own score" if self.record.start_flags.get("teacher_reward")
                else KINDS[self.kind][0])
        started = self.record.started_with
        if started is not None and started[0] != PROGRAMS["run.py"]:
            kind = f"{kind}, {started[0].split()[-1]}"  # the learner, where it is not A2C
        return ", ".join(filter(None, (kind, self.flags, self.name)))

    def markdown(self, with_level: bool = True) -> str:
        """The table row; without a milestone level it has no columns for reaching one."""
        return "| " + " | ".join(self.cells(with_level)) + " |"

    def cells(self, with_level: bool = True) -> list[str]:
        """The table row's cells, `table_head`'s columns."""
        cells = [self.title, "-" if self.seed is None else str(self.seed),
                 steps_text(self.steps) + (" so far" if self.record.finished is False else ""),
                 "-" if self.labels is None else f"{self.labels:,.0f}",
                 f"{self.hours:.1f} h" if self.hours >= 1 else f"{self.hours * 60:.1f} min",
                 "; ".join(self.machines) or "not recorded",
                 "-" if self.starts == 0 else str(self.starts - 1),
                 "not yet" if self.reached is None else
                 steps_text(self.reached[0]) + ("" if self.reached[1] is None
                                                else f", {self.reached[1]:,.0f} labels"),
                 "-" if self.lowest is None
                 else f"{self.lowest[0]:+.1f} at {steps_text(self.lowest[1])}",
                 "-" if self.after is None else f"{self.after:+.1f}",
                 "-" if self.best is None else f"{self.best[0]:+.1f} at {steps_text(self.best[1])}",
                 "-" if self.final is None else f"{self.final:+.1f}"]
        if not with_level:
            del cells[LEVEL_COLUMNS]
        return cells


def steps_text(steps: float) -> str:
    """Agent steps as the tables give them: millions to two places (6.00M), or below 0.01M, where
    that would read 0.00M, in full (2,340)."""
    return f"{steps / 1e6:.2f}M" if steps >= 5_000 else f"{steps:,.0f}"


def table_head(window: int, level: float | None) -> str:
    return markdown_head(head_names(window, level))


def markdown_head(names: list[str]) -> str:
    return "| " + " | ".join(names) + " |\n|" + "---|" * len(names)


def head_names(window: int, level: float | None) -> list[str]:
    """`RunRow.cells`' column names."""
    names = ["run", "seed", "agent steps", "labels", "training", "machine", "resumed",
             "mean of {w} first ≥ {level}", "lowest mean of {w} after",
             "mean of every episode after", "best mean of {w}",
             "final mean of {w}"]
    if level is None:
        del names[LEVEL_COLUMNS]
    return [n.format(w=window, level=f"{level:g}" if level is not None else "") for n in names]


def stretch_table(rows: list[RunRow], every: float) -> str:
    """Each run's mean return and share of episodes lost (below 0) per `every` agent steps, the
    runs side by side: how the level was kept, stretch by stretch."""
    ends = np.arange(every, max(row.steps for row in rows) + every, every)
    head = ["run", "seed"] + [f"{(end - every) / 1e6:g}–{end / 1e6:g}M" for end in ends]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        steps, values = row.record.episode_steps, row.record.episode_returns
        cells = []
        for end in ends:
            held = values[(steps > end - every) & (steps <= end)]
            cells.append(f"{held.mean():+.1f}, {(held < 0).mean():.0%} lost" if len(held) else "-")
        lines.append("| " + " | ".join([row.title, "-" if row.seed is None else str(row.seed),
                                         *cells]) + " |")
    return "\n".join(lines)


def setting_table(rows: list[RunRow], with_level: bool = True) -> str:
    """One row per setting (kind and flags), over its seeds: how many reached the level (where
    there is one), and the mean and spread of the final and best means, labels and training time
    (in minutes where every run took less than an hour)."""
    groups: dict[tuple[str, str], list[RunRow]] = {}
    for row in rows:
        groups.setdefault((row.kind, row.flags), []).append(row)

    def spread(values: list[float | None], fmt: str) -> str:
        got = np.array([v for v in values if v is not None], dtype=float)
        if not len(got):
            return "-"
        return f"{got.mean():{fmt}} ± {got.std():{fmt.lstrip('+')}}" if len(got) > 1 \
            else f"{got[0]:{fmt}}"

    in_minutes = all(r.hours < 1 for r in rows)
    head = ["setting", "seeds", *(["reached"] if with_level else []), "final mean", "best mean",
            "labels", "training (min)" if in_minutes else "training (h)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (kind, flags), runs in groups.items():
        title = ", ".join(filter(None, (KINDS[kind][0], flags)))
        reached = f"{sum(r.reached is not None for r in runs)} of {len(runs)}"
        cells = [title, ", ".join(str(r.seed) for r in runs), *([reached] if with_level else []),
                 spread([r.final for r in runs], "+.1f"),
                 spread([r.best and r.best[0] for r in runs], "+.1f"),
                 spread([r.labels for r in runs], ",.0f"),
                 spread([r.hours * 60 if in_minutes else r.hours for r in runs], ".1f")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def sweep_runs(storage: Path) -> list[tuple[str, Path]]:
    """Every trial's run directory of an `experiments.sweep`, as (kind, path): a run on the game's
    reward is "true", any other "prefs"."""
    return [(kind_of(saved_settings(d).get("mode")), d)
            for d in sorted((storage / "runs").iterdir())
            if is_run_dir(d) and not d.name.startswith(".")]  # not one being made


def kind_of(mode: str | None) -> str:
    """A run's kind by its mode: "true" on the game's reward, "prefs" otherwise."""
    return "true" if mode == "train_policy_with_original_rewards" else "prefs"


def read_run(kind: str, path: Path, level: float | None, window: int,
             game: str | None = None) -> RunRow:
    """The row of a run directory or of a saved record; ValueError with a one-line reason if
    `path` is neither, or is a run of another game than `game`."""
    rec = RunRecord.read(path)
    if game and rec.env_id and not rec.env_id.lower().startswith(game.lower()):
        raise ValueError(f"{path} is a run of {rec.env_id}, not {game}")
    steps, values = rec.episode_steps, rec.episode_returns
    hit = first_reached(values, level, window) if level is not None else None
    lowest = after = None
    after_episodes = 0
    if hit is not None:  # the lowest trailing mean from the one that first reached the level on
        means = smooth(values, window)
        low = hit + int(np.argmin(means[hit:]))
        lowest = (float(means[low]), float(steps[low]))
        after_episodes = len(values) - hit - 1
        after = float(values[hit + 1:].mean()) if after_episodes else None
    return RunRow(kind, rec, rec.seed, rec.agent_steps, rec.labels, rec.training_s / 3600,
                  rec.processors, len(rec.commands),
                  None if hit is None else (float(steps[hit]), rec.labels_at(steps[hit])),
                  lowest, after,
                  best_window(steps, values, window),
                  float(values[-window:].mean()) if len(values) >= window else None,
                  after_episodes=after_episodes)


def flag_text(name: str, value: object) -> str:
    """A flag as it is typed: `--name value`, a boolean by its on or off switch."""
    if isinstance(value, bool):
        negation = next(f.metadata["negation"] for f in flag_fields() if f.name == name)
        return f"--{name}" if value or not negation else negation[0]
    if isinstance(value, str):
        value = as_typed(value)
    return f"--{name} {value:g}" if isinstance(value, float) else f"--{name} {value}"


def name_by_flags(rows: list[RunRow], ignore: tuple[str, ...] = ()) -> None:
    """Set each row's `flags`: the start flags (with their values) that not every run of its kind
    has, less those named in `ignore`; and its `name` where another row has the same kind, flags
    and seed."""
    for kind in KINDS:
        runs = [r for r in rows if r.kind == kind]
        given = [{k: v for k, v in r.record.start_flags.items() if k not in ignore}
                 for r in runs]
        shared = set.intersection(*(set(g.items()) for g in given)) if given else set()
        for row, flags in zip(runs, given):  # in the order they were typed
            row.flags = " ".join(flag_text(k, v) for k, v in flags.items() if (k, v) not in shared)
    alike = collections.Counter((r.kind, r.flags, r.seed) for r in rows)
    for row in rows:  # the same command run twice (on another machine, say): named by its run
        if alike[row.kind, row.flags, row.seed] > 1:
            row.name = row.record.name


def draw(ax, rows: list[RunRow], window: int, level: float | None,
         colour_each: bool = False, colour_settings: bool = False) -> None:
    """Each run's curve on `ax`, the mean of `window` episodes against agent steps: runs of a kind
    in its colour, told apart by the line's style, or (`colour_each`) each run from preferences
    in a colour of its own and the true-reward runs dashed in theirs, or (`colour_settings`, a
    sweep) each setting in a colour of its own, its seeds told apart by the line's style; the
    legend below the axes (`legend_below`)."""
    from matplotlib.ticker import EngFormatter

    own = itertools.cycle(("tab:blue", "tab:green", "tab:purple", "tab:brown", "tab:pink",
                           "tab:cyan", "tab:olive", "tab:red", "tab:grey"))
    setting_colours: dict[tuple[str, str], str] = {}
    seeds_drawn: dict[tuple[str, str], int] = {}
    for kind in KINDS:
        for k, row in enumerate(r for r in rows if r.kind == kind):
            rec = row.record
            colour, style, alpha = KINDS[kind][1], LINESTYLES[k % len(LINESTYLES)], 1.0
            if colour_settings:
                key = (row.kind, row.flags)
                colour = setting_colours.setdefault(key, next(own))
                seeds_drawn[key] = seeds_drawn.get(key, -1) + 1
                style = LINESTYLES[seeds_drawn[key] % len(LINESTYLES)]
            elif colour_each:
                colour, style, alpha = ((next(own), "-", 1.0) if kind == "prefs"
                                        else (colour, "--", 0.7))
            ax.plot(rec.episode_steps, smooth(rec.episode_returns, window), color=colour,
                    ls=style, lw=1.3, alpha=alpha, label=f"{row.title}, seed {row.seed}")
    if level is not None:
        ax.axhline(level, color="grey", ls="--", lw=1, label=f"level {level:g}")
    ax.set(xlabel="agent steps", ylabel=f"true episode return (mean of {window})")
    ax.xaxis.set_major_formatter(EngFormatter(sep=""))
    legend_below(ax)


def legend_below(ax) -> None:
    """The legend under the axes (with a few runs any place inside hides some curve), in two
    columns where the names are short."""
    labels = ax.get_legend_handles_labels()[1]
    if labels:
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.15), frameon=False,
                  ncol=2 if max(map(len, labels)) <= 50 else 1)


def plot(rows: list[RunRow], game: str, out: str, window: int, level: float | None,
         colour_settings: bool = False) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.6))
    draw(ax, rows, window, level, colour_settings=colour_settings)
    ax.set_title(game)
    fig.savefig(out, dpi=80, bbox_inches="tight")  # widened to the legend: long names kept whole
    plt.close(fig)
    print(f"wrote {out}")


def main(argv: list[str] | None = None) -> int:
    p = ScriptParser(description=first_paragraph(__doc__))
    p.add_argument("game", help="the game, as its env id starts (e.g. Pong): the figure's title")
    p.add_argument("--prefs", nargs="*", type=Path, default=[],
                   help="runs from preferences (run directories or records)")
    p.add_argument("--true", nargs="*", type=Path, default=[],
                   help="runs on the true reward (run directories or records)")
    p.add_argument("--sweep", type=Path, default=None, metavar="STORAGE",
                   help="every trial of an experiments.sweep, and a table per setting over seeds")
    p.add_argument("--level", type=float, default=None, help="the milestone's level, if any")
    p.add_argument("--window", type=int, default=10, help="episodes averaged (default 10)")
    p.add_argument("--out", default=None, help="the figure (default: no figure)")
    p.add_argument("--every", type=float, default=None, metavar="STEPS",
                   help="also a table of each run's mean return and share of episodes lost "
                        "per STEPS agent steps (e.g. 500000)")
    p.add_argument("--save_records", type=Path, default=None, metavar="DIR",
                   help="write each run directory's record to DIR/NAME.json (for the repository: "
                        "the table and the figure can be made again from the records alone)")
    a = p.parse_args(argv)
    runs = [(kind, path.expanduser()) for kind, paths in (("prefs", a.prefs), ("true", a.true))
            for path in paths]
    if a.sweep:
        if not (a.sweep.expanduser() / "runs").is_dir():
            p.error(f"--sweep: {a.sweep} holds no sweep's runs (no runs/ folder in it)")
        runs += sweep_runs(a.sweep.expanduser())
    if not runs:
        p.error("give run directories with --prefs and/or --true, or a sweep with --sweep")
    try:
        if a.window < 1 or (a.level is not None and not math.isfinite(a.level)):
            raise ValueError("--window must be at least 1 and --level a finite number")
        if a.every is not None and not (math.isfinite(a.every) and a.every >= 1):
            raise ValueError("--every must be a number of agent steps, at least 1")
        if a.out:
            prepare_figure(a.out, "--out")
        if a.save_records and a.save_records.exists() and not a.save_records.is_dir():
            raise ValueError(f"--save_records: {a.save_records} is a file; give a folder")
        rows = [read_run(kind, path, a.level, a.window, a.game) for kind, path in runs]
        name_by_flags(rows)
        names = [row.record.name for (_, path), row in zip(runs, rows) if path.is_dir()]
        if a.save_records and len(set(names)) < len(names):
            raise ValueError("--save_records: two runs have the same folder name, so one record "
                             "would replace the other")
    except ValueError as e:
        print(f"{p.prog}: error: {e}", file=sys.stderr)
        return 2
    if a.save_records:
        for (_, path), row in zip(runs, rows):
            if path.is_dir():
                row.record.save(out := a.save_records / f"{row.record.name}.json")
                print(f"wrote {out}")
    print(table_head(a.window, a.level))
    for row in rows:
        print(row.markdown(with_level=a.level is not None))
    if a.sweep:
        print()
        print(setting_table(rows, with_level=a.level is not None))
    if a.every:
        print()
        print(stretch_table(rows, a.every))
    if a.out:
        plot(rows, a.game, a.out, a.window, a.level, colour_settings=bool(a.sweep))
    return 0


if __name__ == "__main__":
    sys.exit(main())
