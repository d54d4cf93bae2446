#!/usr/bin/env python3
"""Deep RL from Human Preferences (Christiano et al. 2017): the command line.

This file only wires: it parses the command line (launch/cli.py), makes the run directory, opens
what the main process owns (launch/session.py) and runs the mode (launch/phases.py), whose
processes the supervisor starts and stops (launch/supervisor.py).
"""
from __future__ import annotations

import shlex
import sys

from a2c.config import checkpoints
from launch.cli import EXIT_USAGE, TargetReached, UsageError, parse_args
from launch.phases import MODE_RUNNERS
from launch.rundir import POLICY_DIR, PREFS_FILE, Run
from launch.settings import TRAINING_MODES
from launch.session import open_labelling_page, start_run
from launch.stopping import how_it_ended, interrupted_status, stop_main_process_on_signals
from launch.summary import RunReport
from pref_interface.store import PreferenceStore, stored_labels


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # Ctrl-C, SIGTERM and SIGHUP stop the run cleanly (launch/stopping.py).
    stop_main_process_on_signals()
    try:
        run = parse_args(argv)
        page = open_labelling_page(run)
        ctx, session, report = start_run(run, page)
    except UsageError as e:
        print(f"run.py: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except TargetReached as e:
        print(f"run.py: {e}", file=sys.stderr)
        return 0
    except KeyboardInterrupt:  # a stop signal while the run was being set up: nothing to save
        print("run.py: stopped before the run started", file=sys.stderr)
        return interrupted_status()
    if run.unused_flags:
        print(f"run.py: note: --{', --'.join(run.unused_flags)}: not used by "
              f"{run.settings.mode} on {run.settings.env_id}", file=sys.stderr)
    for note in run.idle_flags:
        print(f"run.py: note: {note}", file=sys.stderr)
    code = 1
    try:
        code = MODE_RUNNERS[run.settings.mode](run, ctx, session, report)
    except KeyboardInterrupt:  # between phases or as a child starts: stopped at exit
        code = interrupted_status()
    finally:
        session.close()  # the terminal gets its settings back
        print(end_of_run(run, report, code), file=sys.stderr)
    return code


def end_of_run(run: Run, report: RunReport, code: int) -> str:
    """The summary printed when the run ends, however it ends: with the command that goes on
    where the run's work is left undone, and the next mode's where it is done."""
    s = run.settings
    trains = s.mode in TRAINING_MODES
    labels = s.mode != "train_policy_with_original_rewards" and not s.frozen_reward_predictor
    d = shlex.quote(str(run.dir))
    how, undone, next_cmd = None, code != 0, None
    if s.mode == "gather_initial_prefs":
        stored = stored_labels(run.dir / PREFS_FILE)
        undone = stored < s.n_initial_prefs
        if undone and (code == 0 or code > 128):  # stopped (Ctrl-D, a signal) before the last
            how = (f"{'stopped' if code == 0 else how_it_ended(code)} with {stored:,} of its "
                   f"{s.n_initial_prefs:,} labels")
        elif not undone:
            next_cmd = f"python run.py pretrain_reward_predictor {s.env_id} --load_prefs_dir {d}"
    elif s.mode == "pretrain_reward_predictor" and code == 0:
        with PreferenceStore(str(run.dir / PREFS_FILE), create=False) as store:  # copied at start
            synthetic = " --synthetic_prefs" if store.sources() == {"synthetic"} else ""
        next_cmd = (f"python run.py train_policy_with_preferences {s.env_id} --load_prefs_dir {d} "
                    f"--load_reward_predictor_ckpt_dir {d}{synthetic}")
    saved = bool(checkpoints(run.dir / POLICY_DIR))  # none where a run stopped before its first
    return report.summary(
        code, run.dir / PREFS_FILE if labels else None, trained=trains, how=how,
        watch_cmd=f"python run_checkpoint.py {s.env_id} {d}/policy --watch" if trains and saved else None,
        resume_cmd=f"python run.py --resume {d}" if undone else None, next_cmd=next_cmd)


if __name__ == "__main__":
    sys.exit(main())
