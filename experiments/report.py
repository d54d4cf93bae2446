#!/usr/bin/env python3
"""The reproduction report's tables and figures, made anew from the records in the repository.

    python -m experiments.report              # docs/reproduction.md's tables and its figures
    python -m experiments.report --no_figures # the tables alone (seconds)

Rewrites the text between each `<!-- begin NAME -->` and `<!-- end NAME -->` of
docs/reproduction.md; the prose around them is written by hand. The runs are found by name in
docs/run_records/ (a record added there, such as a new seed's, joins its table and figure on the
next run of this command); the ablations come from docs/ablations.json and
docs/sorting_ablation.json, the query samplers from docs/query_samplers.json, the predictor's
label efficiency from docs/label_efficiency_pong.json.
"""
from __future__ import annotations

import contextlib
import io
import json
import shlex
import sys
import textwrap
from pathlib import Path
from typing import Callable

import numpy as np


from envs.scores import MOVING_DOT_LEVEL
from experiments.reproduction import (RunRow, draw, head_names, legend_below, markdown_head,
                                      name_by_flags, plot, read_run, stretch_table, table_head)
from experiments.runlog import smooth
from experiments.runrecord import RunRecord, as_typed
from runtime.script_args import ScriptParser, first_paragraph

ROOT = Path(__file__).resolve().parent.parent

DOCS = ROOT / "docs"
DOC = DOCS / "reproduction.md"
RECORDS = DOCS / "run_records"
WINDOW = 10  # episodes averaged for the Atari milestones (experiments.milestone)
MOVING_DOT = (MOVING_DOT_LEVEL, 64)  # its level and window there
# Pong's defaults for the settings that changed (launch/env_settings.py), newest first, by the UTC
# time a run started: before 2026-11-29 a constant rate and no revival, as the milestone ran.
PONG_SINCE = (
    ("2026-12-02T16:15", {"lr_warmup_million_timesteps": 0.02, "lr_zero_million_timesteps": 6.0,
                          "revive_dead_policy": True}),
    ("2026-11-29", {"lr_warmup_million_timesteps": None, "lr_zero_million_timesteps": 6.0,
                    "revive_dead_policy": True}),
    ("", {"lr_warmup_million_timesteps": None, "lr_zero_million_timesteps": None,
          "revive_dead_policy": False}))


def started(rec: RunRecord) -> str:
    """The UTC time of the run's first start ("" where not recorded)."""
    return rec.machines[0].split("\t")[0] if rec.machines else ""


class NoRecord(Exception):
    """No record in the repository matches a block's patterns."""


def runs(records: Path, level: float | None, window: int, game: str,
         **patterns: str) -> list[RunRow]:
    """A row per record matching each kind's pattern (`prefs=`, `true=`), each kind's runs in the
    order they started; NoRecord if there is none."""
    rows = []
    for kind, pattern in patterns.items():
        found = [read_run(kind, path, level, window, game) for path in records.glob(pattern)]
        rows += sorted(found, key=lambda r: (started(r.record), r.record.name))
    if not rows:
        raise NoRecord(" or ".join(f"`docs/run_records/{p}`" for p in patterns.values()))
    return rows


def run_table(rows: list[RunRow], level: float | None, window: int = WINDOW) -> str:
    return "\n".join([table_head(window, level),
                      *(row.markdown(with_level=level is not None) for row in rows)])


def commands(rows: list[RunRow]) -> str:
    """Each run's first command, as typed (later starts: `--resume DIR`, some with flags for
    threads and devices)."""
    lines = ["The command that started each run (each later start: `--resume` of its directory, "
             "some with flags for threads and devices):", ""]
    for row in rows:
        started = row.record.started_with
        typed = ("not recorded" if started is None
                 else as_typed(f"{started[0]} {shlex.join(started[1])}"))
        lines.append(f"- {row.title}, seed {row.seed}: `{typed}`")
    return "\n".join(lines)


def pong_setting(rec: RunRecord) -> dict[str, object]:
    """A Pong run's learning-rate warm-up and zero (millions of steps) and revival: its saved
    settings, or for a record without them its start flags, else the defaults of the day it
    started."""
    defaults = next(d for since, d in PONG_SINCE if started(rec) >= since)
    given = rec.settings or {**defaults, **rec.start_flags}
    return {k: given.get(k) for k in defaults}


def name_pong(rows: list[RunRow]) -> None:
    """Name each run by its learning-rate schedule and revival, typed or by default."""
    name_by_flags(rows, ignore=tuple(PONG_SINCE[0][1]))
    for row in rows:
        s = pong_setting(row.record)
        warmup, zero = s["lr_warmup_million_timesteps"], s["lr_zero_million_timesteps"]
        schedule = ", ".join(filter(None, (
            f"lr warm-up {warmup:g}M" if warmup else "",
            "constant lr" if zero is None else f"lr to 0 at {zero:g}M",
            "revives a dead policy" if s["revive_dead_policy"] else "")))
        row.flags = ", ".join(filter(None, (schedule, row.flags)))


def pong_figure(rows: list[RunRow], out: str) -> None:
    """Two panels: the runs at a constant rate (or the paper's, to 0 at 80M) and those whose
    rate reached 0 by 6M; the true-reward runs in both."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def decayed(row: RunRow) -> bool:  # its rate reached 0 within the milestone's 6M steps
        zero = pong_setting(row.record)["lr_zero_million_timesteps"]
        return zero is not None and zero <= 6

    true = [r for r in rows if r.kind == "true"]
    constant = [r for r in rows if r.kind == "prefs" and not decayed(r)]
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8), sharey=True)
    for ax, title, panel in ((axes[0], "A2C's lr constant, or to 0 at 80M as the paper's",
                              constant),
                             (axes[1], "A2C's lr decayed to 0 at 6M",
                              [r for r in rows if r.kind == "prefs" and decayed(r)])):
        draw(ax, panel + true, WINDOW, 19.0, colour_each=True)
        ax.set_title(f"Pong from preferences: {title}", fontsize=10)
    fig.savefig(out, dpi=80, bbox_inches="tight")
    plt.close(fig)
    print(f"wrote {out}")


def moving_dot(records: Path, figures: Path | None) -> str:
    rows = runs(records, *MOVING_DOT, "MovingDot", prefs="moving_dot*.json")
    name_by_flags(rows)
    out = figures / "moving_dot_seeds.png" if figures else None
    if out:
        plot(rows, "MovingDot", str(out), MOVING_DOT[1], MOVING_DOT[0])
    return "\n".join([run_table(rows, *MOVING_DOT), "",
                      "![MovingDot: every seed's true return against agent steps]"
                      "(moving_dot_seeds.png)", "", commands(rows)])


def pong_prefs(records: Path, figures: Path | None) -> str:
    rows = runs(records, 19.0, WINDOW, "Pong", prefs="pong_prefs*.json", true="pong_true*.json")
    name_pong(rows)
    if figures:
        pong_figure(rows, str(figures / "pong_seeds.png"))
    prefs = [r for r in rows if r.kind == "prefs"]
    new = [r for r in prefs if pong_setting(r.record) == PONG_SINCE[0][1]]
    return "\n".join([
        run_table(prefs, 19.0), "",
        *([] if new else [f"No run with today's defaults (since {PONG_SINCE[0][0]}) has a "
                          "committed record yet.", ""]),
        "![Pong from preferences: every run's true return (mean of 10 episodes) against agent "
        "steps, the true-reward runs dashed in both panels](pong_seeds.png)", "",
        "Each run's mean true return and share of episodes lost (below 0) per 0.5M agent "
        "steps, the true-reward runs last:", "",
        stretch_table(rows, 500_000), "", commands(prefs)])


def pong_true(records: Path, figures: Path | None) -> str:
    rows = runs(records, 19.0, WINDOW, "Pong", true="pong_true*.json")
    name_pong(rows)
    if figures:
        plot(rows, "Pong, true reward", str(figures / "pong_true_seeds.png"), WINDOW, 19.0)
    return "\n".join([run_table(rows, 19.0), "",
                      "![Pong on the true reward: true return (mean of 10 episodes) against "
                      "agent steps](pong_true_seeds.png)", "", commands(rows)])


def enduro(records: Path, figures: Path | None) -> str:
    rows = runs(records, None, WINDOW, "Enduro", prefs="enduro_prefs*.json",
                true="enduro_true*.json")
    name_by_flags(rows)
    if figures:
        plot(rows, "Enduro", str(figures / "enduro.png"), WINDOW, None)
    return "\n".join([run_table(rows, None), "",
                      "![Enduro: the true score (mean of 10 episodes) against agent steps, from "
                      "synthetic preferences and on the true reward](enduro.png)", "",
                      commands(rows)])


ALONGSIDE_TARGET = 0.34  # twice random play's share of level steps (17.4%, alongside_teachers)


def share_cells(rec: RunRecord) -> list[str]:
    """The best and the final mean of WINDOW training episodes' share of steps level with a car
    ("-" where the run did not record it)."""
    if rec.alongside_shares is None or len(rec.alongside_shares) < WINDOW:
        return ["-", "-"]
    means = smooth(rec.alongside_shares, WINDOW)[WINDOW - 1:]
    best = int(np.argmax(means))
    return [f"{means[best]:.1%} at {rec.alongside_steps[best + WINDOW - 1] / 1e6:.2f}M",
            f"{means[-1]:.1%}"]


def alongside(records: Path, figures: Path | None) -> str:
    """The runs' table, their share of steps level with a car in place of the game's score (0
    throughout), its figure and the commands."""
    rows = runs(records, None, WINDOW, "Enduro", prefs="enduro_alongside*.json")
    name_by_flags(rows)
    shared = [r for r in rows if r.record.alongside_shares is not None]
    names = head_names(WINDOW, None)[:-2] + [f"level with a car: best mean of {WINDOW}",
                                             f"final mean of {WINDOW}"]
    lines = [markdown_head(names),
             *("| " + " | ".join(r.cells(False)[:-2] + share_cells(r.record)) + " |"
               for r in rows), ""]
    if shared:
        lines += ["![Enduro, stay alongside: each run's share of steps level with another car "
                  f"(mean of {WINDOW} episodes) against agent steps, the target dashed]"
                  "(enduro_alongside_share.png)", ""]
        if figures:
            plot_shares(shared, str(figures / "enduro_alongside_share.png"))
    return "\n".join([*lines, commands(rows)])


def plot_shares(rows: list[RunRow], out: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for row in rows:
        rec = row.record
        steps, means = np.asarray(rec.alongside_steps), smooth(rec.alongside_shares, WINDOW)
        # A learner whose envs end their episodes on one step (PPO's, 3,000 steps each) gives
        # many points at one x: the mean after the last of them stands for that step.
        last = np.append(steps[1:] != steps[:-1], True)
        ax.plot(steps[last], means[last], lw=1.3,
                label=textwrap.fill(f"{row.title}, seed {row.seed}", 90))  # long flag lists
    ax.axhline(ALONGSIDE_TARGET, color="grey", ls="--", lw=1,
               label=f"target {ALONGSIDE_TARGET:.0%} (twice random play's)")
    ax.set(xlabel="agent steps", ylabel=f"share of steps level with a car (mean of {WINDOW})",
           title="Enduro: stay alongside other cars", ylim=(0, 1))
    legend_below(ax)
    fig.savefig(out, dpi=80, bbox_inches="tight")
    plt.close(fig)
    print(f"wrote {out}")


def ablation_table(results: list[dict], settings: dict[str, list[str]], level: float,
                   final: bool = False) -> str:
    """A row per setting: its flags, and each seed's labels when it reached `level`, with the
    medians over the seeds that did (steps and minutes from the command's start). `final`: also
    each seed's return when its run ended (at the level, or at its agent steps)."""
    seeds = sorted({r["seed"] for r in results})
    each = " / ".join(map(str, seeds))
    lines = [f"| setting | flags | seeds reaching {level:g} | labels at {level:g}, seeds {each} | "
             "median labels | median agent steps | median minutes from the command's start |"
             + (f" return at the end, seeds {each} |" if final else ""),
             "|---|---|---|---|---|---|---|" + ("---|" if final else "")]
    for name, flags in settings.items():
        rs = {r["seed"]: r for r in results if r["setting"] == name}
        if not rs:
            continue
        ok = [r for r in rs.values() if r["reached"]]
        med = (lambda k: float(np.median([r[k] for r in ok]))) if ok else lambda k: float("nan")
        per_seed = [("-" if s not in rs else f"{rs[s]['labels']:,.0f}" if rs[s]["reached"]
                     else "not reached") for s in seeds]
        lines.append(f"| {name} | {'`' + ' '.join(flags) + '`' if flags else '-'} | "
                     f"{len(ok)}/{len(rs)} | {' / '.join(per_seed)} | {med('labels'):,.0f} | "
                     f"{med('steps'):,.0f} | {med('wall_s') / 60:.1f} |"
                     + (" " + " / ".join("-" if s not in rs else f"{rs[s]['last_return']:+.1f}"
                                         for s in seeds) + " |" if final else ""))
    return "\n".join(lines)


def ablation_block(source: str, png: str, names: list[str], figures: Path | None,
                   alt: str, final: bool = False) -> str:
    from experiments import ablations

    results = json.loads((DOCS / source).read_text())
    if figures:
        with contextlib.redirect_stdout(io.StringIO()):  # its own table: the one below has seeds
            ablations.report(results, figures / png)
        print(f"wrote {figures / png}")
    settings = {n: ablations.SETTINGS[n] for n in names}
    return "\n".join([ablation_table(results, settings, ablations.LEVEL, final), "",
                      f"![{alt}]({png})"])


def ablations_fig6(records: Path, figures: Path | None) -> str:
    from experiments.ablations import SETTINGS
    names = [n for n in SETTINGS if not n.startswith("sorting")]
    return ablation_block("ablations.json", "ablations.png", names, figures,
                          "MovingDot: labels and minutes to 19.6 per setting, a dot per seed")


def samplers(records: Path, figures: Path | None) -> str:
    return ablation_block("query_samplers.json", "query_samplers.png",
                          ["baseline", "disagreement queries", "entropy queries",
                           "k-center queries"], figures,
                          "MovingDot: labels and minutes to 19.6 per query sampler, a dot per "
                          "seed", final=True)


def sorting(records: Path, figures: Path | None) -> str:
    from experiments import label_efficiency

    text = ablation_block("sorting_ablation.json", "sorting_ablation.png",
                          ["baseline", "sorting", "sorting + implied pairs",
                           "sorting + rank loss"], figures,
                          "MovingDot: labels and minutes to 19.6, blind pairs against sorting, "
                          "a dot per seed")
    rows = json.loads((DOCS / "label_efficiency_pong.json").read_text())
    if figures:
        label_efficiency.plot(rows, rows[0]["env_id"], str(figures / "label_efficiency_pong.png"))
    score = {(r["queries"], r["labels"]): r for r in rows}
    lines = ["| labels | clip agreement, pairs | clip agreement, sorting | per-clip correlation, "
             "pairs | per-clip correlation, sorting |", "|---|---|---|---|---|"]
    for n in sorted({r["labels"] for r in rows}):
        cells = [f"{score[q, n][k]:.3f}" if (q, n) in score else "-"
                 for k in ("clip_agreement", "clip_correlation") for q in ("pairs", "sort")]
        lines.append(f"| {n:,} | " + " | ".join(cells) + " |")
    return "\n".join([text, "", "Pong without RL, one seed (the figure: "
                      "[label_efficiency_pong.png](label_efficiency_pong.png)):", "", *lines])


BLOCKS: dict[str, Callable[[Path, Path | None], str]] = {
    "moving_dot": moving_dot, "pong_prefs": pong_prefs, "pong_true": pong_true,
    "enduro": enduro, "alongside": alongside, "sorting": sorting, "ablations": ablations_fig6,
    "samplers": samplers}


def render(doc: str, records: Path = RECORDS, figures: Path | None = None) -> str:
    """`doc` with the text between each block's markers made anew from the records (and, with
    `figures`, its figures written there)."""
    for name, block in BLOCKS.items():
        begin, end = f"<!-- begin {name} -->\n", f"<!-- end {name} -->"
        if begin not in doc:
            continue
        try:
            text = block(records, figures)
        except NoRecord as e:
            text = f"No run record ({e}) is committed yet, so there is no table or figure here."
        start = doc.index(begin) + len(begin)
        doc = doc[:start] + text + "\n" + doc[doc.index(end, start):]
    return doc


def main(argv: list[str] | None = None) -> int:
    p = ScriptParser(description=first_paragraph(__doc__))
    p.add_argument("--no_figures", action="store_true", help="rewrite the tables only")
    a = p.parse_args(argv)
    DOC.write_text(render(DOC.read_text(), figures=None if a.no_figures else DOCS))
    print(f"wrote {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
