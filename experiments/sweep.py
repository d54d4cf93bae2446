#!/usr/bin/env python3
"""Many runs as one sweep on Ray Tune: seeds times a grid of flag values, on one machine or a
cluster, each trial an ordinary run directory that survives its machine.

    python -m experiments.sweep --seeds 0 1 2 --grid predictor_pace_unit=member,ensemble \\
        --storage ~/sweeps/pace -- train_policy_with_preferences PongNoFrameskip-v4 --synthetic_prefs
    python -m experiments.sweep --resume ~/sweeps/pace      # after a stop, a crash or Ctrl-C

The words after `--` are a `run.py` command line. Each trial runs it with `--seed K`, its grid
values and `--log_dir STORAGE/runs/<trial>`, so `run_checkpoint.py`, `experiments.evaluate`,
`experiments.summarise_run` and `run.py --resume` work on a trial as on any run, and
`tensorboard --logdir STORAGE/runs` shows them all. A trial whose processes die (its node lost,
killed, out of memory) is started again by Tune, on any node, with `run.py --resume` from its own
newest checkpoints: its labels are all kept, and its agent steps go back at most to the newest
policy checkpoint. `--resume STORAGE` continues a stopped sweep, finished trials kept.

On a cluster (`ray start --head`, then `ray start --address HEAD:6379` on each node, or inside a
Slurm allocation) pass `--address auto`; STORAGE must then be a path every node sees (a shared
filesystem), and the project must be at the same path on every node.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

SWEEP_FILE = "sweep.json"  # the sweep's own command line, for --resume
TUNE_DIR = "tune"  # Tune's experiment state, under the storage
RUNS_DIR = "runs"  # the trials' run directories, under the storage
CONSOLE_DIR = "console"  # what each trial's run.py printed, one file per trial


class SweepError(Exception):
    """Bad input to the sweep: printed as one line, status 2."""


@dataclass(frozen=True)
class Trial:
    """One run of the sweep: a seed and one value of each grid flag."""

    seed: int
    flags: tuple[tuple[str, str], ...]  # (flag name, value), in the grid's order

    @property
    def name(self) -> str:
        """The run directory's name: `seed3`, or `predictor_pace_unit=member-seed3`."""
        parts = [f"{k}={v}".replace("/", "_") for k, v in self.flags] + [f"seed{self.seed}"]
        return "-".join(parts)

    def argv(self, command: list[str], run_dir: Path) -> list[str]:
        """The run.py command line that starts this trial."""
        out = [*command, "--seed", str(self.seed)]
        for name, value in self.flags:
            out += bool_flag(name, value) if value in BOOL_WORDS else [f"--{name}", value]
        return [*out, "--log_dir", str(run_dir)]


BOOL_WORDS = {"on": True, "off": False, "true": True, "false": False}


def bool_flag(name: str, value: str) -> list[str]:
    """`--name` for on, its off switch (`--no_name`) for off."""
    return [f"--{name}"] if BOOL_WORDS[value] else [f"--no_{name}"]


def parse_grid(items: list[str]) -> list[tuple[str, list[str]]]:
    """`name=v1,v2` items as (flag name, values), checked against run.py's settings."""
    from launch.settings import flag_fields

    known = {f.name for f in flag_fields()}
    grid = []
    for item in items:
        name, sep, values = item.partition("=")
        name = name.removeprefix("--")
        if not sep or not values or "" in values.split(","):
            raise SweepError(f"--grid {item!r}: write NAME=VALUE,VALUE,...")
        if name not in known:
            raise SweepError(f"--grid {item!r}: run.py has no flag --{name}")
        if name in ("seed", "log_dir", "run_name", "resume"):
            raise SweepError(f"--grid {item!r}: the sweep sets --{name} itself")
        grid.append((name, values.split(",")))
    return grid


def trials(seeds: list[int], grid: list[tuple[str, list[str]]]) -> list[Trial]:
    """Every combination of the grid's values, each with every seed."""
    combos: list[tuple[tuple[str, str], ...]] = [()]
    for name, values in grid:
        combos = [c + ((name, v),) for c in combos for v in values]
    return [Trial(seed, combo) for combo in combos for seed in seeds]


def check_command(command: list[str], storage: Path, all_trials: list[Trial]) -> None:
    """Each trial's run.py command line as run.py would check it, before anything starts."""
    from launch.cli import UsageError, parse_args

    if not command:
        raise SweepError("give a run.py command line after `--`")
    for word in ("--seed", "--log_dir", "--run_name", "--resume"):
        if word in command:
            raise SweepError(f"{word} is set by the sweep for each trial; leave it out after `--`")
    for trial in all_trials:
        try:
            parse_args(trial.argv(command, storage / RUNS_DIR / trial.name))
        except UsageError as e:
            raise SweepError(f"trial {trial.name}: {e}") from None
        except SystemExit:  # argparse has printed its one line
            raise SweepError(f"trial {trial.name}: run.py refused its command line") from None


@dataclass
class SweepSpec:
    """What `sweep.json` keeps: enough to run the same sweep again after a stop."""

    command: list[str]
    seeds: list[int]
    grid: list[str]
    cpus_per_trial: float
    gpus_per_trial: float
    max_failures: int
    level: float | None = None  # the level the report checks each trial against
    window: int = 10  # episodes averaged for the report's returns
    poll_s: float = 20.0  # seconds between a trial's reports of its run's progress


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    command: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, command = argv[:i], argv[i + 1:]
    p = argparse.ArgumentParser(prog="python -m experiments.sweep",
                                description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0], help="the seeds each setting runs")
    p.add_argument("--grid", nargs="+", default=[], metavar="NAME=V1,V2",
                   help="run.py flags and their values; every combination runs with every seed")
    p.add_argument("--storage", type=Path, help="the sweep's directory (on a cluster, a path "
                   "every node sees): STORAGE/runs holds one run directory per trial")
    p.add_argument("--resume", type=Path, metavar="STORAGE",
                   help="continue a stopped sweep with its own settings, finished trials kept")
    p.add_argument("--cpus_per_trial", type=float, default=2.0, help="CPUs Ray gives each trial")
    p.add_argument("--gpus_per_trial", type=float, default=0.0,
                   help="GPUs Ray gives each trial (a fraction shares one); >0 runs with "
                        "--device cuda")
    p.add_argument("--address", default=None,
                   help="a Ray cluster's address (auto: the one this node has joined); default: "
                        "a Ray of this machine alone")
    p.add_argument("--max_failures", type=int, default=-1,
                   help="times a trial is started again after its run fails (-1: always)")
    p.add_argument("--progress_s", type=float, default=60.0,
                   help="seconds between the sweep's progress lines")
    p.add_argument("--level", type=float, default=None,
                   help="the report's level: when each trial's mean return first reached it")
    p.add_argument("--window", type=int, default=10,
                   help="episodes averaged in the report's returns")
    p.add_argument("--dry_run", action="store_true",
                   help="check and list the trials' command lines, start nothing")
    return p.parse_args(argv), command


def spec_from(a: argparse.Namespace, command: list[str]) -> tuple[SweepSpec, Path]:
    """The sweep to run and its storage, from a new command line or a stopped sweep's file."""
    if a.resume is not None:
        storage = a.resume.expanduser().resolve()
        if command or a.storage or a.grid or a.seeds != [0]:
            raise SweepError("--resume continues a sweep as it was started: give no other "
                             "seeds, grid, storage or command")
        try:
            return SweepSpec(**json.loads((storage / SWEEP_FILE).read_text())), storage
        except FileNotFoundError:
            raise SweepError(f"--resume {a.resume}: no sweep there ({SWEEP_FILE} missing)") \
                from None
    if a.storage is None:
        raise SweepError("give --storage DIR (or --resume DIR)")
    storage = a.storage.expanduser().resolve()
    if (storage / SWEEP_FILE).exists():
        raise SweepError(f"{storage} holds a sweep already: continue it with --resume {storage}")
    spec = SweepSpec(command, a.seeds, a.grid, a.cpus_per_trial, a.gpus_per_trial,
                     a.max_failures, a.level, a.window)
    return spec, storage


def main(argv: list[str] | None = None) -> int:
    a, command = parse(sys.argv[1:] if argv is None else argv)
    try:
        spec, storage = spec_from(a, command)
        all_trials = trials(spec.seeds, parse_grid(spec.grid))
        if a.resume is None:
            check_command(spec.command, storage, all_trials)
    except SweepError as e:
        print(f"experiments.sweep: error: {e}", file=sys.stderr)
        return 2
    print(f"sweep of {len(all_trials)} trials in {storage / RUNS_DIR}:")
    for t in all_trials:
        print("  python run.py " + " ".join(t.argv(spec.command, storage / RUNS_DIR / t.name)))
    if a.dry_run:
        return 0
    storage.mkdir(parents=True, exist_ok=True)
    (storage / SWEEP_FILE).write_text(json.dumps(asdict(spec), indent=1))

    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")  # no Tune tables: ours is the progress line
    import ray

    from experiments.sweep_tune import tuner

    ray.init(address=a.address, include_dashboard=False, configure_logging=False)
    restore = a.resume is not None and (storage / TUNE_DIR).is_dir()
    results = tuner(spec, storage, restore, a.progress_s).fit()
    failed = [r for r in results
              if r.error is not None or (r.metrics or {}).get("exit_status", 0) != 0]
    print(f"sweep: {len(results) - len(failed)} of {len(results)} trials done; "
          f"the runs are in {storage / RUNS_DIR} (tensorboard --logdir {storage / RUNS_DIR})")
    report(spec, storage)
    return 1 if failed else 0


def report(spec: SweepSpec, storage: Path) -> None:
    """Every trial's row, a row per setting over seeds, and the figure STORAGE/sweep.png."""
    from experiments import reproduction

    env_id = next(w for w in spec.command[1:] if not w.startswith("-"))
    argv = [env_id, "--sweep", str(storage), "--window", str(spec.window),
            "--out", str(storage / "sweep.png")]
    reproduction.main(argv + (["--level", str(spec.level)] if spec.level is not None else []))


if __name__ == "__main__":
    sys.exit(main())
