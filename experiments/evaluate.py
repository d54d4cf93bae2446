#!/usr/bin/env python3
"""Score policies on fresh episodes over a small grid: greedy and sampled actions, with the
paper's 0-30 no-op starts and without, and print one table.

    python -m experiments.evaluate ~/runs/pong_prefs_seed1 --episodes 10
    python -m experiments.evaluate ~/runs/pong_prefs_seed1_policies --env PongNoFrameskip-v4 \\
        --all_checkpoints --grid greedy:30 --episodes 10      # score against agent steps
    python -m experiments.evaluate models/pong_prefs_run8.pt --env PongNoFrameskip-v4 --videos 2
    python -m experiments.evaluate ~/runs/pong_prefs_seed1 --best_and_final --grid greedy:30 \\
        sampled:30

Each POLICY is a run directory (its newest checkpoint, or the weights a run through examples.ppo
saved; its env from settings.json), a folder of checkpoints (`policy-*.pt`), a checkpoint file or a
weights file (`run_checkpoint.py --save_weights`). With `--all_checkpoints` a run directory or
folder gives every checkpoint in it, so that the score can be drawn against agent steps: whether a
level was held or only touched; with `--best_and_final` a run directory gives its newest checkpoint
and the one that played its best `--best_window` consecutive training episodes (the newest saved
before the last of them). The episodes of one cell are played at once, one per env of a vector env,
on env seeds apart from training's (`--seed`; a game with no randomness of its own, as Pong, plays
one episode over and over in a `greedy:0` cell: it is there to show what the no-op starts change);
an episode still going after `--max_steps` is cut and counted as it stands (the table says how many
were). The figures go to `--out` (a new file; default: eval.json in the run directory when one run
is evaluated, else in the current one; eval-1.json, ... beside an earlier one), to the run's
TensorBoard (`RUN_DIR/tb/eval`, at the policy's agent steps) and, with `--videos K`, the first K
episodes of each cell to GIFs in a folder named after the figures' file (eval_videos/ beside
eval.json, eval-1_videos/ ...). On Enduro each cell also gives the share of its steps in which the
player's car is level with another car (the paper's "keep alongside other cars",
`pref_interface.labellers.alongside`). Each cell names its policy's rarest action and how often it
took it: a policy that has all but stopped using an action cannot learn it back (MovingDot seeds
that never move left, docs/experiments.md).
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from launch.rundir import is_run_dir, playable_policy, saved_settings
from runtime.script_args import ScriptParser, first_paragraph

EXIT_USAGE = 2
DEFAULT_GRID = ("greedy:30", "sampled:30", "greedy:0")
EVAL_SEED = 10_000  # env seeds far from training's (0, 1, 2, ...)
MAX_STEPS = 27_000  # agent steps at most per episode: 108,000 frames, ALE's own limit


@dataclass
class Cell:
    """One policy scored in one grid cell."""

    policy: str
    agent_steps: int
    actions: str  # "greedy" or "sampled"
    noop_max: int
    returns: list[float]
    lengths: list[int]
    cut: int  # episodes stopped at --max_steps, counted as they stood
    alongside: float | None = None  # Enduro: share of steps level with another car
    action_shares: dict[str, float] = field(default_factory=dict)  # action name -> share of steps
    role: str = ""  # with --best_and_final: "best", "final" or "best and final"

    @property
    def mean(self) -> float:
        return float(np.mean(self.returns))

    def rarest_action(self) -> str:
        if not self.action_shares:
            return "-"
        name = min(self.action_shares, key=self.action_shares.__getitem__)
        return f"{name} {self.action_shares[name]:.1%}"

    def row(self, with_alongside: bool = True) -> str:
        """The table's row; `with_alongside`: the Enduro column too."""
        r = np.asarray(self.returns)
        return (f"| {self.policy}{f' ({self.role})' if self.role else ''} | "
                f"{self.agent_steps:,} | {self.actions} | {self.noop_max} | "
                f"{len(r)}{f' ({self.cut} cut)' if self.cut else ''} | "
                f"{r.mean():+.1f} ± {r.std():.1f} | {r.min():+g} | {r.max():+g} | "
                f"{np.mean(self.lengths):,.0f} | {self.rarest_action()} | "
                + (f"{'-' if self.alongside is None else f'{self.alongside:.1%}'} |"
                   if with_alongside else ""))


def parse_grid(cells: list[str]) -> list[tuple[str, int]]:
    """'greedy:30' -> ('greedy', 30); a ValueError names a bad cell."""
    out = []
    for cell in cells:
        actions, _, noops = cell.partition(":")
        if actions not in ("greedy", "sampled") or not noops.isdigit():
            raise ValueError(f"--grid: {cell!r} is not ACTIONS:NOOPS (greedy or sampled, then the "
                             "most no-ops at an episode's start, e.g. greedy:30)")
        out.append((actions, int(noops)))
    return out


def find_policies(path: Path, all_checkpoints: bool, best_window: int | None = None
                  ) -> tuple[list[Path], str | None, Path | None]:
    """The checkpoint files behind one POLICY argument, the env id its run directory names (or
    None) and the run directory (or None); `best_window`: a run directory's best and newest
    checkpoints (see the module doc). ValueError when there is nothing to play."""
    from a2c.config import checkpoints

    run_dir = path if is_run_dir(path) else None
    env_id = saved_settings(path).get("env_id") if run_dir else None
    played = playable_policy(path)
    if played.is_file():  # a checkpoint or weights file, or a run through examples.ppo
        if all_checkpoints or best_window is not None:
            raise ValueError(f"{path}: one saved policy ({played.name}), not a run's checkpoints: "
                             "leave out --all_checkpoints and --best_and_final")
        return [played], env_id, run_dir
    found = checkpoints(played)
    if not found:
        raise ValueError(f"no policy checkpoint in {path}")
    if best_window is None:
        return (found if all_checkpoints else found[-1:]), env_id, run_dir
    if run_dir is None:
        raise ValueError(f"{path}: --best_and_final needs a run directory (its training curve)")
    return _best_and_final(run_dir, found, best_window), env_id, run_dir


def _best_and_final(run_dir: Path, found: list[Path], window: int) -> list[Path]:
    from experiments.runlog import RunLog, best_window

    best = best_window(*RunLog(run_dir).returns(), window)
    if best is None:
        raise ValueError(f"{run_dir}: fewer than {window} episodes to find the best ones in")
    before = [f for f in found if checkpoint_steps(f) <= best[1]]
    if not before:
        raise ValueError(f"{run_dir}: no checkpoint kept from before its best episodes "
                         f"(at {best[1]:,.0f} agent steps)")
    return list(dict.fromkeys([before[-1], found[-1]]))  # one file when the newest is the best


def checkpoint_steps(checkpoint: Path) -> int:
    """The agent steps in a checkpoint's name (policy-<steps>.pt)."""
    return int(checkpoint.stem.rsplit("-", 1)[-1])


@dataclass
class Played:
    """What `play` saw of its episodes."""

    returns: list[float]  # true returns
    lengths: list[int]
    cut: int  # episodes still going at max_steps
    frames: list[list]  # the newest 84x84 frame of each step of the first `record` episodes
    alongside: float | None  # Enduro: the share of all their steps level with another car
    action_shares: dict[str, float]  # action name -> share of all their steps


def play(env_id: str, weights: dict, episodes: int, greedy: bool, noop_max: int, seed: int,
         max_steps: int, record: int = 0) -> Played:
    """`episodes` episodes at once, one per env, each counted until its first end."""
    import torch

    from a2c.policies import make_policy
    from a2c.rollout import sample_actions
    from envs import action_names, env_kind, make_vec_env
    from pref_interface.labellers.alongside import is_alongside, judges

    with torch.random.fork_rng(devices=[]):  # the caller's generator is left as it was
        env = make_vec_env(env_id, episodes, seed=seed, num_threads=1, noop_max=noop_max)
        policy = make_policy(env_kind(env_id), env.num_actions)
        policy.load_state_dict(weights)
        policy.eval()
        torch.manual_seed(seed)  # sampled play is drawn the same way on every evaluation
        obs = env.reset(seed=seed)
        returns, lengths = np.zeros(episodes), np.zeros(episodes, dtype=np.int64)
        done = np.zeros(episodes, dtype=bool)
        frames: list[list] = [[] for _ in range(record)]
        taken = np.zeros(env.num_actions, dtype=np.int64)
        alongside = 0 if judges(env_id) else None
        with torch.no_grad():
            for _ in range(max_steps):
                for i in range(record):
                    if not done[i]:
                        frames[i].append(obs[i, -1].copy())
                if alongside is not None:
                    alongside += sum(is_alongside(obs[i, -1]) for i in np.flatnonzero(~done))
                actions = sample_actions(policy, obs, greedy)
                taken += np.bincount(actions[~done], minlength=env.num_actions)
                result = env.step(actions)
                obs = result.obs
                returns[~done] += result.rewards[~done]
                lengths[~done] += 1
                for ep in result.finished:  # an env's later episodes do not count
                    done[ep.env_index] = True
                if done.all():
                    break
        env.close()
    share = None if alongside is None else alongside / max(1, int(lengths.sum()))
    shares = dict(zip(action_names(env_id), (taken / max(1, taken.sum())).tolist()))
    return Played(returns.tolist(), lengths.tolist(), int((~done).sum()), frames, share, shares)


def evaluate(policies: list[tuple[str, Path, str, str]], grid: list[tuple[str, int]],
             episodes: int, seed: int, max_steps: int, videos: int = 0,
             video_dir: Path | None = None) -> list[Cell]:
    """Score each (name, checkpoint file, env id, role) in each grid cell (on MovingDot, whose
    start is random anyway, one cell per kind of action, at 0 no-ops); print a row per cell, the
    Enduro column only where an Enduro policy is played."""
    import torch

    from a2c.checkpoint import load_policy_weights
    from envs import env_kind
    from pref_interface.labellers.alongside import judges

    torch.set_num_threads(1)
    cells = []
    along = any(judges(env_id) for _, _, env_id, _ in policies)
    head = ["policy", "agent steps", "actions", "no-ops at most", "episodes", "mean ± std", "min",
            "max", "mean length", "rarest action", *(["level with a car"] if along else [])]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head), flush=True)
    for name, path, env_id, role in policies:
        state = load_policy_weights(path)
        # No-op starts are an Atari episode's (App. A.2); MovingDot's start is random anyway.
        cells_here = grid if env_kind(env_id) == "atari" else list(dict.fromkeys(
            (actions, 0) for actions, _ in grid))
        for actions, noops in cells_here:
            played = play(env_id, state["policy"], episodes, actions == "greedy", noops, seed,
                          max_steps, record=videos)
            cell = Cell(name, int(state["timesteps"]), actions, noops, played.returns,
                        played.lengths, played.cut, played.alongside, played.action_shares, role)
            cells.append(cell)
            print(cell.row(with_alongside=along), flush=True)
            if videos and video_dir is not None:
                from runtime.video import write_gif

                video_dir.mkdir(parents=True, exist_ok=True)
                for k, f in enumerate(played.frames):
                    write_gif(f, str(video_dir / f"{Path(name).stem}-{actions}-noop{noops}-"
                                                 f"ep{k}.gif"))
    print("(rarest action: the action the policy took least, and its share of the steps)")
    return cells


def log_to_tensorboard(run_dir: Path, cells: list[Cell], prefix: str) -> None:
    """Each cell's mean, min and max at its policy's agent steps, in RUN_DIR/tb/eval."""
    from runtime.scalars import ScalarWriter

    writer = ScalarWriter(str(run_dir / "tb" / "eval"))
    for c in cells:
        if c.policy.startswith(prefix):
            tag = f"eval/{c.actions}_noop{c.noop_max}"
            writer.add_scalar(f"{tag}/mean_return", c.mean, c.agent_steps)
            writer.add_scalar(f"{tag}/min_return", min(c.returns), c.agent_steps)
            writer.add_scalar(f"{tag}/max_return", max(c.returns), c.agent_steps)
    writer.close()


def build_parser() -> argparse.ArgumentParser:
    p = ScriptParser(description=first_paragraph(__doc__),
                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("policies", nargs="+", metavar="POLICY",
                   help="a run directory, a folder of checkpoints, a checkpoint or weights file")
    p.add_argument("--env", help="the env id (needed unless every POLICY is a run directory)")
    p.add_argument("--episodes", type=int, default=10, help="episodes per policy and cell")
    p.add_argument("--grid", nargs="+", default=list(DEFAULT_GRID),
                   help="cells as ACTIONS:NOOPS: greedy or sampled actions, and an episode's "
                        "start with 0 to NOOPS no-ops (Atari; App. A.2: 30)")
    p.add_argument("--all_checkpoints", action="store_true",
                   help="every checkpoint of a run directory or folder, not only the newest")
    p.add_argument("--best_and_final", action="store_true",
                   help="a run directory's newest checkpoint and the one behind its best "
                        "--best_window training episodes")
    p.add_argument("--best_window", type=int, default=10,
                   help="consecutive training episodes whose mean picks the best checkpoint")
    p.add_argument("--seed", type=int, default=EVAL_SEED, help="env seed of the evaluation")
    p.add_argument("--max_steps", type=int, default=MAX_STEPS,
                   help="agent steps at most per episode (108,000 frames, ALE's own limit)")
    p.add_argument("--videos", type=int, default=0, help="GIFs of the first K episodes per cell")
    p.add_argument("--out", help="the JSON file of every cell's figures")
    return p


def main(argv: list[str] | None = None) -> int:
    p = build_parser()
    a = p.parse_args(argv)
    from a2c.checkpoint import CheckpointError, check_fits, load_policy_weights
    from envs import UnknownEnvError, check_seed, env_kind
    from runtime.outputs import prepare_output, unused_name

    try:
        grid = parse_grid(a.grid)
        if a.episodes <= 0 or a.max_steps <= 0 or a.videos < 0 or a.videos > a.episodes:
            raise ValueError("--episodes and --max_steps must be positive, --videos from 0 to "
                             "--episodes")
        check_seed(a.seed, a.episodes)  # one env an episode
        if a.best_and_final and (a.all_checkpoints or a.best_window <= 0):
            raise ValueError("--best_and_final takes a positive --best_window and no "
                             "--all_checkpoints")
        if a.out:
            prepare_output(a.out, "--out")  # never over an earlier evaluation
        policies, run_dirs = [], []
        for arg in a.policies:
            files, env_id, run_dir = find_policies(
                Path(arg), a.all_checkpoints, a.best_window if a.best_and_final else None)
            env_id = a.env or env_id
            if env_id is None:
                raise ValueError(f"{arg}: give --env (only a run directory names its env)")
            env_kind(env_id)
            if run_dir is not None:
                run_dirs.append(run_dir)
            for f in files:  # a damaged or another env's file is refused before any play
                check_fits(env_id, load_policy_weights(f), f)
                role = "" if not a.best_and_final else " and ".join(
                    r for r, is_it in (("best", f == files[0]), ("final", f == files[-1]))
                    if is_it)
                policies.append((str(f), f, env_id, role))
    except (ValueError, UnknownEnvError, CheckpointError) as e:
        print(f"{p.prog}: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    out = Path(a.out) if a.out else unused_name(  # a run's own figures go with the run
        (run_dirs[0] if run_dirs and len(a.policies) == 1 else Path(".")) / "eval.json")
    cells = evaluate(policies, grid, a.episodes, a.seed, a.max_steps, a.videos,
                     out.with_name(f"{out.stem}_videos"))  # one folder per evaluation
    out.write_text(json.dumps([asdict(c) | {"mean": c.mean} for c in cells], indent=1) + "\n")
    print(f"\nwrote {out}")
    for run_dir in run_dirs:
        log_to_tensorboard(run_dir, cells, str(run_dir))
        print(f"TensorBoard: {run_dir / 'tb' / 'eval'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
