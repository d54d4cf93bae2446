#!/usr/bin/env python3
"""Whether a Pong run holds its milestone's level: each condition measured and judged.

    python -m experiments.held ~/runs/pong_prefs_seed3
    python -m experiments.held ~/runs/pong_prefs_seed3 --episodes 20

The milestone comes from the run's mode and env (`experiments.milestone`: `pong_prefs`, or
`pong_true` for a run on the game's reward). The conditions, with L its level (+19) and
HELD_MARGIN (2):
- reached: the mean of 10 training episodes first at L within the milestone's agent steps (6M)
  and, from preferences, its labels (3,300);
- held in training: the mean of every training episode after that at least L - 2;
- the final policy (the newest checkpoint) over `--episodes` episodes, each started with 0-30
  no-ops (App. A.2), on env seeds apart from training's: greedy play's mean at least L, sampled
  play's at least L - 2 (`experiments.evaluate` plays them);
- alive: no kept checkpoint has a layer with no unit firing on random play's screens
  (`experiments.probe_policy`); a run that kept only its newest checkpoints is judged on those,
  and says how many it kept.
It prints one row per condition and the verdict (for a run still going, where its newest checkpoint
stands: its policy is judged as the final one). Exit status: 0 held, 1 not held (or not yet
reached), 2 for a bad argument, a run with no checkpoint yet or a checkpoint it cannot read.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from a2c.config import checkpoint_steps
from envs.atari import NOOP_MAX
from experiments.evaluate import EVAL_SEED, EXIT_USAGE, MAX_STEPS
from experiments.milestones import HELD_MARGIN, MILESTONES, Milestone
from launch.rundir import POLICY_DIR, saved_settings
from runtime.script_args import ScriptParser


@dataclass
class Condition:
    name: str
    needed: str
    measured: str
    met: bool

    def row(self) -> str:
        return f"| {self.name} | {self.needed} | {self.measured} | {'yes' if self.met else 'NO'} |"


def milestone_of(run_dir: Path) -> tuple[str, Milestone]:
    """The held milestone of the run's mode and env; ValueError (one line) where none is."""
    settings = saved_settings(run_dir)
    mode, env_id = settings.get("mode"), settings.get("env_id")
    for name, m in MILESTONES.items():
        if m.budget is not None and (m.mode, m.env_id) == (mode, env_id):
            return name, m
    held = ", ".join(n for n, m in MILESTONES.items() if m.budget is not None)
    raise ValueError(f"{run_dir} is a {mode} run of {env_id}: a held level is defined only for "
                     f"the milestones {held}")


def training_conditions(run_dir: Path, m: Milestone) -> tuple[bool, list[Condition]]:
    """Whether the level was reached at all, and the conditions on the training curve: reached
    within the budget, and held through the training episodes after it (`reproduction.read_run`
    measures both)."""
    from experiments.reproduction import kind_of, read_run

    row = read_run(kind_of(m.mode), run_dir, m.level, m.window)
    budget_steps, budget_labels = m.budget
    name = f"reached {m.level:+g} (mean of {m.window})"
    needed = f"within {budget_steps / 1e6:g}M agent steps" + (
        f" and {budget_labels:,} labels" if budget_labels is not None else "")
    if row.reached is None:
        return False, [Condition(name, needed, f"not yet, at {row.steps / 1e6:.2f}M steps", False)]
    steps, labels = row.reached
    within = steps <= budget_steps and (
        budget_labels is None or (labels is not None and labels <= budget_labels))
    shown = f"at {steps / 1e6:.2f}M" + (
        "" if budget_labels is None else ", labels unknown" if labels is None
        else f", {labels:,.0f} labels")
    n, floor = row.after_episodes, m.level - HELD_MARGIN
    held = Condition("held in training", f"every episode after: mean ≥ {floor:+g}",
                     f"{row.after:+.1f} over {n:,} episode{'s' * (n != 1)}, "
                     f"to {row.steps / 1e6:.2f}M" if n else "no episode after",
                     n > 0 and row.after >= floor)
    return True, [Condition(name, needed, shown, within), held]


def policy_conditions(run_dir: Path, m: Milestone, episodes: int,
                      max_steps: int) -> Iterator[Condition]:
    """The final policy's greedy play, then its sampled play."""
    from a2c.checkpoint import load_policy_weights
    from experiments.evaluate import play

    state = load_policy_weights(run_dir / POLICY_DIR)
    for actions, floor in (("greedy", m.level), ("sampled", m.level - HELD_MARGIN)):
        played = play(m.env_id, state["policy"], episodes, actions == "greedy", NOOP_MAX,
                      EVAL_SEED, max_steps)
        mean = sum(played.returns) / len(played.returns)
        cut = f", {played.cut} cut at {max_steps:,} steps" if played.cut else ""
        yield Condition(f"final policy ({state['timesteps'] / 1e6:.2f}M), {actions}",
                        f"mean of {episodes} ≥ {floor:+g}, 0–{NOOP_MAX} no-ops",
                        f"{mean:+.1f} (min {min(played.returns):+g}{cut})", mean >= floor)


def alive_condition(run_dir: Path, m: Milestone) -> Condition:
    """No kept checkpoint dead on random play's screens."""
    from a2c.checkpoint import load_policy_weights
    from a2c.config import checkpoints
    from a2c.revive import random_play
    from experiments.probe_policy import probe_checkpoint

    kept = checkpoints(run_dir / POLICY_DIR)
    obs = random_play(m.env_id)
    dead = []
    for path in kept:
        state = load_policy_weights(path)
        if probe_checkpoint(m.env_id, state, path, obs).dead:
            dead.append(state["timesteps"])
    measured = (f"{len(kept) - len(dead)} of {len(kept)} alive" +
                (f"; dead at {', '.join(f'{s / 1e6:.2f}M' for s in dead[:5])}"
                 + (" ..." if len(dead) > 5 else "") if dead else ""))
    return Condition("policy network alive", "at every kept checkpoint", measured,
                     bool(kept) and not dead)


def main(argv: list[str] | None = None) -> int:
    p = ScriptParser(description=__doc__.splitlines()[0],
                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("run_dir", type=Path, help="a Pong run's directory")
    p.add_argument("--episodes", type=int, default=10,
                   help="evaluation episodes of the final policy, greedy and sampled")
    p.add_argument("--max_steps", type=int, default=MAX_STEPS,
                   help="agent steps at most per evaluation episode (108,000 frames)")
    a = p.parse_args(argv)
    import torch

    from a2c.checkpoint import CheckpointError, latest_checkpoint

    torch.set_num_threads(1)  # beside a training run, as evaluate and probe_policy play
    run_dir = a.run_dir.expanduser()
    try:
        if a.episodes <= 0 or a.max_steps <= 0:
            raise ValueError("--episodes and --max_steps must be positive")
        name, m = milestone_of(run_dir)
        newest = latest_checkpoint(run_dir / POLICY_DIR)  # none yet: refused here
        reached, conditions = training_conditions(run_dir, m)
        print(f"{run_dir.name}: {m.env_id}, milestone {name} ({m.note})")
        print("| condition | needed | measured | met |\n|---|---|---|---|")
        for c in conditions:
            print(c.row(), flush=True)
        # a policy below the level could play all of --max_steps: it is played once reached
        for c in policy_conditions(run_dir, m, a.episodes, a.max_steps) if reached else ():
            conditions.append(c)
            print(c.row(), flush=True)
        conditions.append(alive_condition(run_dir, m))
        print(conditions[-1].row())
    except (ValueError, CheckpointError, OSError) as e:  # a checkpoint damaged or of another game
        print(f"{p.prog}: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    if not reached:
        print("(the final policy is played once the level is reached)")
    budget = m.budget[0]  # agent steps
    if checkpoint_steps(newest) < budget:  # a run still going: its newest policy stands in
        print(f"(so far: the newest checkpoint is at {checkpoint_steps(newest) / 1e6:.2f}M of the "
              f"milestone's {budget / 1e6:g}M agent steps)")
    failed = [c.name for c in conditions if not c.met]
    print("held" if not failed else f"not held: {'; '.join(failed)}")
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
