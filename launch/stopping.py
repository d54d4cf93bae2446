"""How a run stops: the stop flag its processes share, and what the stop signals do.

Ctrl-C (SIGINT), SIGTERM (what `timeout`, Slurm, systemd and container runtimes send) and SIGHUP
stop a run the same way, whether they reach the main process alone or the whole process group:
the main process turns the first one into KeyboardInterrupt (the supervisor then sets the flag
and waits for every child to save its work), and a child that gets one sets the flag itself.
The exit status is 128 + the signal's number (130 for Ctrl-C, 143 for SIGTERM, 129 for SIGHUP),
also where the signal reached one child alone.
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from typing import Any, Iterator

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
EXIT_INTERRUPTED = 128 + signal.SIGINT  # Ctrl-C; a stop by another signal gives 128 + its number
WAIT_POLL_S = 0.02  # how often `SharedFlag.wait` looks at the flag
SAVE_GRACE_S = 60.0  # how long a stopped run's processes may take to save before they are ended
# A child that had a stop signal ends itself this long after it, should nobody end it: its
# supervisor, which would have after SAVE_GRACE_S, may be gone (killed outright).
ORPHAN_EXIT_S = SAVE_GRACE_S + 30.0

_received: list[int] = []  # the stop signals this process has had, in order
_held = 0  # how deep in `signals_held` the main thread is
_deferred = False  # a first stop signal came while held: raised as the hold ends
_exit_on_signal = False  # SIGTERM and SIGHUP raise SystemExit(128 + signal) (`exit_on_stop_signals`)


class SharedFlag:
    """A flag between processes: one byte of shared memory, read by polling. Unlike
    `multiprocessing.Event` it has no lock or condition inside, so a process killed at any
    instant (even while waiting on it) cannot leave `set()` blocked for the others. Made before
    the children start and passed to them; once set it stays set (`SwitchFlag` can be cleared)."""

    def __init__(self, ctx: Any, value: bool = False) -> None:
        self._flag = ctx.RawValue("b", int(value))

    def set(self) -> None:
        self._flag.value = 1

    def is_set(self) -> bool:
        return bool(self._flag.value)

    def wait(self, timeout: float | None = None) -> bool:
        """Until the flag is set or `timeout` seconds have passed; returns whether it is set."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.is_set():
            left = WAIT_POLL_S if deadline is None else deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(left, WAIT_POLL_S))
        return True


class SwitchFlag(SharedFlag):
    """A shared flag that is set and cleared again (the agent's "clips wanted")."""

    def clear(self) -> None:
        self._flag.value = 0


class StopFlag(SharedFlag):
    """The run's stop request between processes, set once."""


def _wanted(sig: int) -> bool:
    # A SIGHUP that the user asked to ignore (`nohup`) stays ignored; SIGINT and SIGTERM are
    # always taken, also where a shell started the run in the background with SIGINT ignored.
    return sig != signal.SIGHUP or signal.getsignal(sig) is not signal.SIG_IGN


def _interrupt(signum: int, frame: Any) -> None:
    global _deferred
    first = not _received
    _received.append(signum)
    if first and _held:  # another thread took the signal while the main thread held it
        _deferred = True
    elif first and _exit_on_signal and signum != signal.SIGINT:
        raise SystemExit(128 + signum)
    elif first:
        raise KeyboardInterrupt
    else:
        sys.stderr.write(f"\n{signal.Signals(signum).name}: already stopping, saving work\n")


def stop_main_process_on_signals(only_default: bool = False) -> None:
    """In the process that supervises a run: the first stop signal raises KeyboardInterrupt
    (as Ctrl-C does), later ones are noted but let the saving finish. `only_default`: leave alone
    a signal whose handler the program has set itself (the gymnasium wrapper in a user's script)."""
    for sig in STOP_SIGNALS:
        handler = signal.getsignal(sig)
        if only_default and handler not in (signal.SIG_DFL, signal.default_int_handler):
            continue
        if _wanted(sig):
            signal.signal(sig, _interrupt)


def exit_on_stop_signals(on: bool = True) -> None:
    """While on, SIGTERM and SIGHUP end this process as a run stopped by them ends: SystemExit
    with status 128 + the signal, no traceback (Ctrl-C stays KeyboardInterrupt). For a script
    whose own loop drives the run (the gymnasium wrapper), where nothing of ours catches the
    KeyboardInterrupt that run.py's phases turn into that status."""
    global _exit_on_signal
    _exit_on_signal = on


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Hold the stop signals back (they wait, pending) while a child is started: the child
    inherits the held set, so a signal sent while it starts reaches it only once
    `stop_child_on_signals` is in place, instead of killing it before it can save. In the main
    process the stop is raised only as the hold ends, also when another of its threads (a queue's
    feeder, the labelling page's server) took the signal meanwhile."""
    global _held, _deferred
    old = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    _held += 1
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
        _held -= 1
        if _deferred and not _held:  # also over an error of the body: the stop came first
            _deferred = False
            raise KeyboardInterrupt


def stop_child_on_signals(stop: StopFlag, signalled: Any = None) -> None:
    """In a child of the run: a stop signal sets the run's stop flag, so the child (and its
    siblings) end their loops and save, as when the supervisor stops them, and the first such
    signal is noted in `signalled` (a shared int), so that a run whose child alone was signalled
    ends as stopped by that signal, not as finished. The kernel sends this process SIGTERM when
    the supervisor dies (runtime/process_setup.py): a clean stop too, after which the child ends
    itself if still running ORPHAN_EXIT_S later (a live supervisor would have ended it sooner).
    Then the signals held since the child started (`signals_held`) are let through."""
    ending: list[threading.Timer] = []

    def on_signal(signum: int, frame: Any) -> None:
        if signalled is not None and not signalled.value:
            signalled.value = signum
        if not ending:  # the first signal this child has
            ending.append(threading.Timer(ORPHAN_EXIT_S, os._exit, (128 + signum,)))
            ending[0].daemon = True
            ending[0].start()
        stop.set()

    for sig in STOP_SIGNALS:
        if _wanted(sig):
            signal.signal(sig, on_signal)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


def forget_signals() -> None:
    """Count stop signals afresh: a run started after an earlier one in the same process (a
    script that makes a second `PreferenceVecEnv`) is not stopped, nor summarised as stopped,
    by the earlier run's signal."""
    global _deferred
    _received.clear()
    _deferred = False


def signal_received() -> bool:
    """Whether this process has had a stop signal (since `stop_main_process_on_signals`)."""
    return bool(_received)


def interrupted_status() -> int:
    """The exit status of a run stopped by a signal or Ctrl-C: 128 + the first signal's number."""
    return 128 + _received[0] if _received else EXIT_INTERRUPTED


def how_it_ended(exit_status: int) -> str:
    """The summary's first words for an exit status."""
    if exit_status == 0:
        return "finished"
    if exit_status == 1:
        return "stopped: a process failed"
    if exit_status == EXIT_INTERRUPTED:
        return "stopped by Ctrl-C"
    if exit_status > 128:
        try:
            return f"stopped by {signal.Signals(exit_status - 128).name}"
        except ValueError:
            pass
    return f"ended with status {exit_status}"
