#!/usr/bin/env python3
"""Deep RL from Human Preferences (Christiano et al. 2017): the command line.

This file only wires: it parses the command line (launch/cli.py), makes the run directory, opens
what the main process owns (launch/session.py) and runs the mode (launch/phases.py), whose
processes the supervisor starts and stops (launch/supervisor.py).
"""
from __future__ import annotations

import multiprocessing as mp
import signal
import sys

from launch.cli import EXIT_USAGE, UsageError, make_run_dir, parse_args
from launch.phases import MODE_RUNNERS
from launch.session import Session, open_labelling_page
from launch.supervisor import EXIT_INTERRUPTED


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # Ctrl-C and `kill -INT/-TERM` stop the run cleanly even when it was started in the
    # background of a script, where the shell leaves SIGINT ignored.
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        args = parse_args(argv)
        page = open_labelling_page(args)
    except UsageError as e:
        print(f"run.py: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    run_dir = make_run_dir(args)
    print(f"run directory: {run_dir}", file=sys.stderr)
    ctx = mp.get_context("spawn")
    session = Session(args, ctx, page)
    try:
        return MODE_RUNNERS[args.mode](args, run_dir, ctx)
    except KeyboardInterrupt:  # between phases: nothing is running
        return EXIT_INTERRUPTED
    finally:
        session.close()  # the terminal gets its settings back


if __name__ == "__main__":
    sys.exit(main())
