"""Checks that need torch (a checkpoint given on the command line loads), run in a short-lived
child so that the supervising process never imports it."""
from __future__ import annotations

import multiprocessing as mp
from typing import Callable, Sequence

TIMEOUT_S = 300.0  # a child importing torch and loading a checkpoint takes a few seconds


def _run(calls: Sequence[Callable[[], object]], conn) -> None:
    for call in calls:
        try:
            call()
        except Exception as e:  # noqa: BLE001 - each check raises an error with a one-line message
            conn.send(str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__)
            return
    conn.send(None)


def first_error(calls: Sequence[Callable[[], object]]) -> str | None:
    """Run `calls` in order in a spawned child; the first one's error message, or None. Each is
    a picklable call (a `functools.partial` of a torch-free module's function) that imports what it
    needs when it runs."""
    if not calls:
        return None
    ctx = mp.get_context("spawn")
    receive, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_run, args=(list(calls), send), name="preflight")
    proc.start()
    try:
        if not receive.poll(TIMEOUT_S):
            return f"the checks of {_names(calls)} did not finish"
        return receive.recv()
    except EOFError:
        return f"the checks of {_names(calls)} ended without an answer"
    finally:
        proc.join(timeout=30)
        if proc.is_alive():  # stuck (a checkpoint on a hung filesystem): run.py still exits
            proc.kill()
            proc.join(timeout=5)


def _names(calls: Sequence[Callable[[], object]]) -> str:
    return ", ".join(getattr(getattr(c, "func", c), "__qualname__", repr(c)) for c in calls)
