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

The scripts that run many runs (`experiments.milestone`, `experiments.ablations`,
`experiments.label_efficiency`, `experiments.learning_reliability`) call `run_sweep` with their
own trials, each of which may carry a named setting of several flags.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from experiments.sweep_trial import BOOL_WORDS, RUNS_DIR, TUNE_DIR, Trial, device_flags
from runtime.outputs import write_json
from runtime.script_args import ScriptParser, first_paragraph

SWEEP_FILE = "sweep.json"  # the sweep's own command line, for --resume
SAVE_WAIT_S = 300  # after a stop, how long the driver waits for the trials' runs to save


class SweepError(Exception):
    """Bad input to the sweep: printed as one line, status 2."""


def parse_grid(items: list[str]) -> list[tuple[str, list[str]]]:
    """`name=v1,v2` items as (flag name, values), checked against run.py's settings."""
    from launch.settings import flag_fields

    known = {f.name: f for f in flag_fields()}
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
        if known[name].type == "bool" and not set(values.split(",")) <= set(BOOL_WORDS):
            raise SweepError(f"--grid {item!r}: --{name} is a switch: its values are on,off "
                             "(or true,false)")
        if name in (n for n, _ in grid):
            raise SweepError(f"--grid {item!r}: --{name} is in the grid already; give all its "
                             f"values in one item ({name}=V1,V2,...)")
        grid.append((name, values.split(",")))
    return grid


def trials(seeds: list[int], grid: list[tuple[str, list[str]]]) -> list[Trial]:
    """Every combination of the grid's values, each with every seed."""
    combos: list[tuple[tuple[str, str], ...]] = [()]
    for name, values in grid:
        combos = [c + ((name, v),) for c in combos for v in values]
    return [Trial(seed, combo) for combo in combos for seed in seeds]


def check_command(command: list[str], runs_dir: Path, all_trials: list[Trial]) -> None:
    """Each trial's run.py command line (a resume where its run directory holds a run) as run.py
    would check it, before anything starts."""
    from launch.cli import TargetReached, UsageError, parse_args

    if not command:
        raise SweepError("give a run.py command line after `--`")
    for word in ("--seed", "--log_dir", "--run_name", "--resume"):
        if word in command or any(word in t.setting_flags for t in all_trials):
            raise SweepError(f"{word} is set by the sweep for each trial; leave it out of the "
                              "run.py command line")
    names = [t.name for t in all_trials]
    if len(set(names)) < len(names):
        raise SweepError("two trials would share a run directory: give each its own seed, "
                         "setting or grid values")
    for trial in all_trials:
        try:
            parse_args(trial.run_argv(command, runs_dir / trial.name))
        except TargetReached:  # a run at its agent steps already: its trial ends at once
            pass
        except UsageError as e:
            raise SweepError(f"trial {trial.name}: {e}") from None
        except SystemExit:  # argparse has printed its one line
            raise SweepError(f"trial {trial.name}: run.py refused its command line") from None


def run_sweep(command: list[str], all_trials: list[Trial], storage: Path, *,
              runs_dir: Path | None = None, cpus_per_trial: float = 2.0,
              gpus_per_trial: float = 0.0, address: str | None = None, max_failures: int = -1,
              progress_s: float = 60.0, poll_s: float = 20.0,
              stop_at: tuple[float, int] | None = None, restore: bool = False,
              resume_cmd: str | None = None, prog: str = "sweep") -> int:
    """Run the trials as one sweep, each in `runs_dir/<trial name>` (default STORAGE/runs),
    started with `command` or resumed where its run directory holds a run; Tune's state and what
    each run printed go under `storage`. `stop_at` (level, window): a trial's run is stopped, and
    done, once the mean true return of its last `window` episodes reaches `level` (a run there
    already is not started). `restore`: continue the stopped sweep whose Tune state is in
    STORAGE. On a cluster, `storage` and `runs_dir` must be paths every node sees.
    `resume_cmd`: the command that continues the sweep after a stop (default: the same command
    again); `prog`: the script, as its one-line errors name it. Returns 0 when every trial's run
    ended well, 1 when one did not, 130 when the sweep was stopped before every trial ended, 2
    (said in one line) when a trial's command line or the resources asked are refused, before
    anything starts."""
    from launch.stopping import EXIT_INTERRUPTED

    storage = storage.expanduser().resolve()
    runs_dir = (storage / RUNS_DIR if runs_dir is None else runs_dir).expanduser().resolve()
    try:
        check_command(command, runs_dir, all_trials)
        check_resources(cpus_per_trial, gpus_per_trial, address)
    except SweepError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    list_trials(command, all_trials, runs_dir, gpus_per_trial)

    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")  # no Tune tables: ours is the progress line
    # A Ray of this machine alone: Ray's default token auth, set so that Ray prints no notice of
    # it; not once Ray is imported, which has read its mode (its servers would then differ).
    if address is None and "ray" not in sys.modules:
        os.environ.setdefault("RAY_AUTH_MODE", "token")
    import ray

    from experiments.sweep_tune import tuner

    storage.mkdir(parents=True, exist_ok=True)
    # A trial's worker that ends (the trial stopped, Ctrl-C) must not kill its run.py outright:
    # the run gets SIGTERM as its worker goes (sweep_tune), and saves its work.
    ray.init(address=address, include_dashboard=False, configure_logging=False,
             runtime_env={"env_vars": {"RAY_kill_child_processes_on_worker_exit": "0"}})
    try:
        results = tuner(command, all_trials, storage, runs_dir,
                        restore and (storage / TUNE_DIR).is_dir(), progress_s,
                        cpus_per_trial=cpus_per_trial, gpus_per_trial=gpus_per_trial,
                        max_failures=max_failures, poll_s=poll_s, stop_at=stop_at).fit()
    finally:
        ray.shutdown()
        wait_for_saves([runs_dir / t.name for t in all_trials])
    done = [r for r in results if r.error is None and (r.metrics or {}).get("exit_status") == 0]
    # Stopped, or never started: the sweep itself was stopped (Ctrl-C) before their end.
    stopped = [r for r in results if r.error is None and "exit_status" not in (r.metrics or {})]
    print(f"sweep: {len(done)} of {len(results)} trials done"
          + (f", {len(stopped)} not ended; continue them, each from its run directory, with: "
             f"{resume_cmd or 'the same command again'}" if stopped else "")
          + f"; the runs are in {runs_dir} (tensorboard --logdir {runs_dir})")
    if len(done) == len(results):
        return 0
    return EXIT_INTERRUPTED if len(done) + len(stopped) == len(results) else 1


def list_trials(command: list[str], all_trials: list[Trial], runs_dir: Path,
                gpus_per_trial: float) -> None:
    """Each trial's run.py command line, as it runs."""
    print(f"sweep of {len(all_trials)} trial{'s' * (len(all_trials) != 1)} in {runs_dir}:")
    for t in all_trials:
        print("  python run.py " + " ".join(t.run_argv(command, runs_dir / t.name)
                                            + device_flags(gpus_per_trial)), flush=True)


def check_resources(cpus_per_trial: float, gpus_per_trial: float, address: str | None) -> None:
    """A trial must fit: on this machine alone (no `address`), in its CPUs and GPUs; Ray would
    otherwise queue it for ever."""
    if cpus_per_trial <= 0 or gpus_per_trial < 0:
        raise SweepError("--cpus_per_trial must be positive and --gpus_per_trial at least 0")
    if address is not None:
        return
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    if cpus_per_trial > cpus:
        raise SweepError(f"--cpus_per_trial {cpus_per_trial:g}: this machine has {cpus} CPUs "
                         "(a larger trial needs --address of a cluster with larger nodes)")
    if gpus_per_trial > 0:
        import torch

        gpus = torch.cuda.device_count()
        if gpus_per_trial > gpus:
            raise SweepError(f"--gpus_per_trial {gpus_per_trial:g}: this machine has {gpus} "
                             "GPUs torch can use (a trial on GPUs elsewhere needs --address of "
                             "a cluster that has them)")


def wait_for_saves(run_dirs: list[Path], timeout_s: float = SAVE_WAIT_S) -> None:
    """After a stop: wait (at most `timeout_s`) while the trials' runs save their work and end
    (each holds its run directory until then), so that nothing is cut short and a resumed sweep
    finds them ended; a second Ctrl-C stops the wait, not the saving."""
    from launch.rundir import run_dir_holder, wait_released

    held = [d for d in run_dirs if run_dir_holder(d)]
    if not held:
        return
    print(f"sweep: waiting for {len(held)} run{'s' if len(held) > 1 else ''} to save their "
          "work", flush=True)
    try:
        held = wait_released(held, timeout_s)
    except KeyboardInterrupt:
        pass
    for d in held:
        if holder := run_dir_holder(d):
            print(f"sweep: {d} is still held by {holder}; resume it once that process has "
                  "ended", flush=True)


def add_sweep_flags(p: argparse.ArgumentParser) -> list[str]:
    """The flags that say where a script's runs go as a sweep: CPUs and GPUs per run, and the
    Ray cluster; returns their names."""
    flags = [
        p.add_argument("--cpus_per_trial", type=float, default=2.0,
                       help="CPUs Ray gives each trial (default: 2)"),
        p.add_argument("--gpus_per_trial", type=float, default=0.0,
                       help="GPUs Ray gives each trial (a fraction shares one); >0 runs with "
                            "--device cuda (default: 0)"),
        p.add_argument("--address", default=None,
                       help="a Ray cluster's address (auto: the one this node has joined); "
                            "default: a Ray of this machine alone"),
    ]
    p.set_defaults(prog=p.prog)  # the script, as the sweep's errors name it
    return [f.dest for f in flags]


def sweep_options(a: argparse.Namespace) -> dict:
    """`add_sweep_flags`' values, as `run_sweep`'s keyword arguments."""
    return {"cpus_per_trial": a.cpus_per_trial, "gpus_per_trial": a.gpus_per_trial,
            "address": a.address, "prog": a.prog}


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
    p = ScriptParser(description=first_paragraph(__doc__),
                     usage="%(prog)s [options] -- MODE ENV_ID [run.py flags]\n"
                           "       %(prog)s --resume STORAGE")
    p.add_argument("--seeds", type=int, nargs="+", default=[0],
                   help="the seeds each setting runs (default: 0)")
    p.add_argument("--grid", nargs="+", default=[], metavar="NAME=V1,V2",
                   help="run.py flags and their values; every combination runs with every seed")
    p.add_argument("--storage", type=Path, help="the sweep's directory (on a cluster, a path "
                   "every node sees): STORAGE/runs holds one run directory per trial")
    p.add_argument("--resume", type=Path, metavar="STORAGE",
                   help="continue a stopped sweep with its own settings, finished trials kept")
    add_sweep_flags(p)
    p.add_argument("--max_failures", type=int, default=-1,
                   help="times a trial is started again after its run fails (-1: always)")
    p.add_argument("--progress_s", type=float, default=60.0,
                   help="seconds between the sweep's progress lines (default: 60)")
    p.add_argument("--level", type=float, default=None,
                   help="the report's level: when each trial's mean return first reached it")
    p.add_argument("--window", type=int, default=10,
                   help="episodes averaged in the report's returns (default: 10)")
    p.add_argument("--dry_run", action="store_true",
                   help="check and list the trials' command lines, start nothing")
    a = p.parse_args(argv)
    # The flags given, as written (`--window 10` is given even where 10 is the default).
    a.given = {t.split("=")[0].removeprefix("--") for t in argv if t.startswith("--")}
    return a, command


# What --resume takes from the stopped sweep's file, never from its own command line.
KEPT_ON_RESUME = ("seeds", "grid", "storage", "cpus_per_trial", "gpus_per_trial", "max_failures",
                  "level", "window", "progress_s")  # (Tune restores the sweep's progress line)


def spec_from(a: argparse.Namespace, command: list[str]) -> tuple[SweepSpec, Path]:
    """The sweep to run and its storage, from a new command line or a stopped sweep's file."""
    if a.resume is not None:
        storage = a.resume.expanduser().resolve()
        given = [f"--{k}" for k in KEPT_ON_RESUME if k in a.given]
        if command or given:
            raise SweepError("--resume continues a sweep as it was started: leave out "
                             + ", ".join(given + (["the run.py command"] if command else [])))
        if storage.exists() and not storage.is_dir():
            raise SweepError(f"--resume {a.resume}: a file, not a sweep's folder")
        try:
            return SweepSpec(**json.loads((storage / SWEEP_FILE).read_text())), storage
        except FileNotFoundError:
            raise SweepError(f"--resume {a.resume}: no sweep there ({SWEEP_FILE} missing)") \
                from None
        except OSError as e:
            raise SweepError(f"--resume {a.resume}: {SWEEP_FILE} cannot be read "
                             f"({e.strerror or type(e).__name__})") from None
        except (ValueError, TypeError) as e:  # not JSON, or not a sweep's spec
            raise SweepError(f"--resume {a.resume}: {SWEEP_FILE} is damaged "
                             f"({type(e).__name__}: {(str(e).splitlines() or [''])[0]})") from None
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
        for name, least in (("window", 1), ("max_failures", -1), ("progress_s", 1)):
            if getattr(a, name) < least:
                raise SweepError(f"--{name} must be at least {least}, got {getattr(a, name):g}")
        spec, storage = spec_from(a, command)
        all_trials = trials(spec.seeds, parse_grid(spec.grid))
        if a.resume is None:
            check_command(spec.command, storage / RUNS_DIR, all_trials)
        check_resources(spec.cpus_per_trial, spec.gpus_per_trial, a.address)
    except SweepError as e:
        print(f"{a.prog}: error: {e}", file=sys.stderr)
        return 2
    if a.dry_run:
        list_trials(spec.command, all_trials, storage / RUNS_DIR, spec.gpus_per_trial)
        return 0
    try:
        storage.mkdir(parents=True, exist_ok=True)
        write_json(storage / SWEEP_FILE, asdict(spec))
    except OSError as e:  # a file there, or a folder it cannot write
        print(f"{a.prog}: error: --storage {storage}: {e.strerror or e}", file=sys.stderr)
        return 2
    code = run_sweep(spec.command, all_trials, storage, cpus_per_trial=spec.cpus_per_trial,
                     gpus_per_trial=spec.gpus_per_trial, address=a.address, prog=a.prog,
                     max_failures=spec.max_failures, progress_s=a.progress_s,
                     poll_s=spec.poll_s, restore=a.resume is not None,
                     resume_cmd=f"python -m experiments.sweep --resume {storage}")
    if code != 2:
        report(spec, storage)
    return code


def report(spec: SweepSpec, storage: Path) -> None:
    """Every trial's row, a row per setting over seeds, and the figure STORAGE/sweep.png (none
    before a run has started)."""
    from experiments import reproduction

    runs = storage / RUNS_DIR
    if not runs.is_dir() or not any(d.is_dir() for d in runs.iterdir()):
        return

    from launch.cli import build_parser

    env_id = build_parser(with_defaults=False).parse_args(spec.command).env_id
    argv = [env_id, "--sweep", str(storage), "--window", str(spec.window),
            "--out", str(storage / "sweep.png")]
    reproduction.main(argv + (["--level", str(spec.level)] if spec.level is not None else []))


if __name__ == "__main__":
    sys.exit(main())
