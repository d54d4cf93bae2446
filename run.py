#!/usr/bin/env python3
"""Deep RL from Human Preferences (Christiano et al. 2017): the command line.

This file only wires things together: it checks the arguments, makes the run directory, creates
the queues and shared handles, starts the processes and supervises them.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shlex
import signal
import sys
import time
import traceback
from pathlib import Path

MODES = ("gather_initial_prefs", "pretrain_reward_predictor", "train_policy_with_preferences",
         "train_policy_with_original_rewards")
EXIT_USAGE, EXIT_INTERRUPTED = 2, 130


class UsageError(Exception):
    """A mistake on the command line: reported as one line, exit status 2."""


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str):
        raise UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="run.py", description=__doc__.splitlines()[0],
                      formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("mode", help=f"one of: {', '.join(MODES)}")
    p.add_argument("env_id", help="MovingDotNoFrameskip-v0, PongNoFrameskip-v4, "
                                  "EnduroNoFrameskip-v4 or any <Game>NoFrameskip-v4")
    g = p.add_argument_group("run")
    where = g.add_mutually_exclusive_group()
    where.add_argument("--log_dir", help="directory for this run (must not exist yet)")
    where.add_argument("--run_name", help="name of the run directory under runs/")
    g.add_argument("--seed", type=int, default=0, help="random seed")
    g.add_argument("--torch_threads", type=int, default=1,
                   help="torch threads in the A2C process")
    g.add_argument("--env_threads", type=int, default=1, help="ale-py env threads")
    g = p.add_argument_group("A2C (defaults: the paper's, App. A.2)")
    g.add_argument("--n_envs", type=int, default=16, help="parallel environments")
    g.add_argument("--million_timesteps", type=float, default=10.0,
                   help="agent steps to train for, in millions (summed over envs)")
    g.add_argument("--ent_coef", type=float, default=0.01, help="entropy bonus coefficient")
    g.add_argument("--lr", type=float, default=7e-4, help="RMSProp learning rate")
    g.add_argument("--lr_zero_million_timesteps", type=float, default=None,
                   help="decay the lr linearly to zero at this many million steps "
                        "(the paper: 80); default: constant lr")
    g.add_argument("--load_policy_ckpt_dir", help="start from the newest policy checkpoint here")
    g.add_argument("--policy_ckpt_interval", type=int, default=1000,
                   help="updates between policy checkpoints")
    g.add_argument("--render_episodes", action="store_true",
                   help="show the agent's latest full episode in a second window")
    return p


def check_args(args: argparse.Namespace) -> None:
    """Every mistake becomes a UsageError before anything is written."""
    from envs import UnknownEnvError, env_kind

    if args.mode not in MODES:
        raise UsageError(f"unknown mode {args.mode!r}; choose one of: {', '.join(MODES)}")
    try:
        args.env_kind = env_kind(args.env_id)
    except UnknownEnvError as e:
        raise UsageError(str(e)) from None
    for name in ("million_timesteps", "n_envs", "policy_ckpt_interval", "lr", "torch_threads"):
        if getattr(args, name) <= 0:
            raise UsageError(f"--{name} must be positive, got {getattr(args, name)}")
    if args.lr_zero_million_timesteps is not None and args.lr_zero_million_timesteps <= 0:
        raise UsageError("--lr_zero_million_timesteps must be positive")
    if args.ent_coef < 0 or args.env_threads < 0:
        raise UsageError("--ent_coef and --env_threads must not be negative")
    if args.load_policy_ckpt_dir:
        from a2c.checkpoint import CheckpointError, load_policy
        try:
            load_policy(args.load_policy_ckpt_dir)
        except CheckpointError as e:
            raise UsageError(str(e)) from None
    run_dir = Path(args.log_dir) if args.log_dir else Path("runs") / (
        args.run_name or f"{time.strftime('%Y%m%d-%H%M%S')}_{args.mode}_{args.env_id}")
    if run_dir.exists():
        raise UsageError(f"run directory {run_dir} already exists; choose another "
                         "--log_dir/--run_name")
    args.run_dir = run_dir


def make_run_dir(args: argparse.Namespace) -> Path:
    """Create the run directory and record the exact command and settings."""
    run_dir: Path = args.run_dir
    run_dir.mkdir(parents=True)
    (run_dir / "command.txt").write_text(shlex.join([sys.executable] + sys.argv) + "\n")
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    (run_dir / "settings.json").write_text(json.dumps(settings, indent=2) + "\n")
    return run_dir


# ---------------------------------------------------------------- processes and supervision


def _child(target, args: tuple, errors) -> None:
    """Entry point of every child: Ctrl-C is the supervisor's to handle (it sets the stop event);
    an exception is sent to the supervisor as text and the child exits non-zero."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        target(*args)
    except BaseException:  # noqa: BLE001 - reported, then the child exits non-zero
        errors.put(traceback.format_exc())
        sys.exit(1)


class Supervisor:
    """Starts the run's processes, shows the status line, and stops everything together."""

    def __init__(self, ctx, stop_event):
        self.ctx = ctx
        self.stop_event = stop_event
        self.errors = ctx.Queue()
        self.procs: dict[str, mp.Process] = {}

    def start(self, name: str, target, *args) -> None:
        proc = self.ctx.Process(target=_child, args=(target, args, self.errors), name=name,
                                daemon=False)
        proc.start()
        self.procs[name] = proc

    def wait(self, status_line=None, until=None, grace_s: float = 60.0) -> int:
        """Block until every process ends (or `until()` is true, then stop them); return an exit
        status: 0, 1 for a crashed child, 130 for Ctrl-C."""
        tty = sys.stderr.isatty()
        last_print = 0.0
        try:
            while any(p.is_alive() for p in self.procs.values()):
                crashed = [n for n, p in self.procs.items()
                           if not p.is_alive() and p.exitcode not in (0, None)]
                if crashed:
                    return self._fail(crashed)
                if until is not None and until():
                    self.stop_event.set()
                now = time.monotonic()
                if status_line is not None and now - last_print >= (1.0 if tty else 30.0):
                    last_print = now
                    line = status_line()
                    sys.stderr.write(f"\r\x1b[K{line}" if tty else f"{line}\n")
                    sys.stderr.flush()
                time.sleep(0.2)
        except KeyboardInterrupt:
            sys.stderr.write("\nstopping: saving checkpoints and labels...\n")
            self.stop_event.set()
            self._join(grace_s)
            return EXIT_INTERRUPTED
        finally:
            if tty and status_line is not None:
                sys.stderr.write("\n")
        crashed = [n for n, p in self.procs.items() if p.exitcode not in (0, None)]
        return self._fail(crashed) if crashed else 0

    def _fail(self, crashed: list[str]) -> int:
        for name in crashed:
            sys.stderr.write(f"\nprocess {name!r} failed (exit {self.procs[name].exitcode})\n")
        while not self.errors.empty():
            sys.stderr.write(self.errors.get())
        self.stop_event.set()
        self._join(10.0)
        return 1

    def _join(self, grace_s: float) -> None:
        deadline = time.monotonic() + grace_s
        for proc in self.procs.values():
            proc.join(max(0.0, deadline - time.monotonic()))
        for proc in self.procs.values():
            if proc.is_alive():
                proc.terminate()
                proc.join(5.0)
            if proc.is_alive():
                proc.kill()


# ------------------------------------------------------------------------------ modes


def a2c_config(args: argparse.Namespace, run_dir: Path):
    from a2c.a2c import A2CConfig
    from a2c.train import A2CRunConfig

    million = 1_000_000
    return A2CRunConfig(
        env_id=args.env_id, total_timesteps=int(args.million_timesteps * million),
        a2c=A2CConfig(n_envs=args.n_envs, ent_coef=args.ent_coef, lr=args.lr,
                      lr_zero_timesteps=(args.lr_zero_million_timesteps * million
                                         if args.lr_zero_million_timesteps else None)),
        seed=args.seed, ckpt_dir=str(run_dir / "policy"), ckpt_interval=args.policy_ckpt_interval,
        load_ckpt_dir=args.load_policy_ckpt_dir, torch_threads=args.torch_threads,
        env_threads=args.env_threads)


def a2c_status(stats) -> str:
    return (f"steps {stats.timesteps.value:,} | {stats.steps_per_sec.value:,.0f} steps/s | "
            f"episodes {stats.episodes.value} | recent return {stats.recent_return.value:.1f}")


def train_policy_with_original_rewards(args, run_dir: Path, ctx, sup: Supervisor) -> int:
    from a2c.train import A2CStats, train_a2c

    stats = A2CStats(ctx)
    sup.start("a2c", train_a2c, a2c_config(args, run_dir), str(run_dir / "tb"), stats, None,
              None, sup.stop_event)
    return sup.wait(lambda: a2c_status(stats))


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        check_args(args)
    except UsageError as e:
        print(f"run.py: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    run_dir = make_run_dir(args)
    print(f"run directory: {run_dir}", file=sys.stderr)
    ctx = mp.get_context("spawn")
    sup = Supervisor(ctx, ctx.Event())
    mode = {"train_policy_with_original_rewards": train_policy_with_original_rewards}[args.mode]
    return mode(args, run_dir, ctx, sup)


if __name__ == "__main__":
    sys.exit(main())
