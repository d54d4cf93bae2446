"""The run's processes: the channels they share, how each child starts, and the supervisor that
shows the status line and stops them all together."""
from __future__ import annotations

import atexit
import functools
import multiprocessing as mp
import os
import queue
import sys
import time
import traceback
from collections import deque
from multiprocessing import reduction
from dataclasses import dataclass, field
from typing import Callable

from launch.stopping import (SAVE_GRACE_S, StopFlag, interrupted_status, signals_held,
                             stop_child_on_signals)
from runtime.process_setup import child_environ, die_with_parent, name_process, spawn_context
from runtime.queues import QueueReader

KILL_JOIN_S = 5.0  # how long a killed child may take to be reaped
EXIT_CRASHED = 1  # what `wait` and `check` return when a child failed
RATE_WINDOW_S = 600.0  # the time left is read at the rate of about the last ten minutes
TRACEBACK_WAIT_S = 2.0  # how long a failed child's traceback is waited for


@dataclass
class Progress:
    """A wait whose end is known: `read()` gives how many of `total` `unit`s are done and a
    short status. On a terminal it is drawn as a progress bar (tqdm), in a log as a line."""

    desc: str
    total: int
    unit: str
    read: Callable[[], tuple[int, str]]
    unit_scale: bool = False  # 12.3k rather than 12345
    _lines: deque = field(default_factory=deque, init=False, repr=False)  # (time, done)

    def line(self) -> str:
        """The log's form: done of total, the rate since the line before, the time left at the
        mean rate of the last RATE_WINDOW_S (a run paused for a while is not slow), the status."""
        done, status = self.read()
        now, rate, lines = time.monotonic(), "", self._lines
        if lines and now > lines[-1][0]:
            per_s = (done - lines[-1][1]) / (now - lines[-1][0])
            rate = f" | {per_s:,.0f}" if per_s >= 10 else f" | {per_s:.2g}"  # 0.25 epochs/s
            rate += f" {self.unit}s/s"
            while len(lines) > 1 and now - lines[1][0] >= RATE_WINDOW_S:
                lines.popleft()
            mean_per_s = (done - lines[0][1]) / (now - lines[0][0])
            if mean_per_s > 0 and done < self.total:
                rate += f" | {duration((self.total - done) / mean_per_s)} left"
        lines.append((now, done))
        return f"{self.desc} {done:,}/{self.total:,}{rate}" + (f" | {status}" if status else "")


class _KeptOpen:
    """A file descriptor a child keeps open for its whole life: the run directory's lock, so
    that the directory stays taken while any process of the run may still save into it (also
    after the main process was killed outright). Pickled for a spawned child as a duplicate of
    the same open file, which shares its lock."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __reduce__(self):
        return _received_fd, (reduction.DupFd(self.fd),)


def _received_fd(dup) -> int:
    fd = dup.detach()
    os.set_inheritable(fd, False)  # a program the child runs does not hold the lock
    return fd


def _child(call: Callable[[], object], errors, stop: StopFlag, signalled, kept_open) -> None:
    """Entry point of every child: a stop signal (Ctrl-C, SIGTERM, SIGHUP, or the supervisor's
    death) sets the run's stop flag, so every child saves and ends, and is noted in `signalled`;
    an exception is sent to the supervisor as text and the child exits non-zero. The child shows
    its name in `ps`; `kept_open` (a descriptor, or None) stays open until it exits."""
    stop_child_on_signals(stop, signalled)
    name_process(mp.current_process().name)
    die_with_parent()
    try:
        call()
    except BaseException:  # noqa: BLE001 - reported, then the child exits non-zero
        errors.put(traceback.format_exc())
        sys.exit(1)


class Supervisor:
    """Starts the run's processes, shows the status line, and stops everything together.
    `held_fd`: the run directory's lock (`launch.rundir.RunDirLock`), which every child holds
    too."""

    def __init__(self, ctx, held_fd: int | None = None):
        self.ctx = ctx
        self._kept_open = None if held_fd is None else _KeptOpen(held_fd)
        self.stop_event = StopFlag(ctx)
        self.child_signal = ctx.RawValue("i", 0)  # the first stop signal a child had; 0: none
        self.errors = ctx.Queue()
        # read in a thread: a child killed part-way through sending its traceback holds up
        # only that thread, never the stop of the others
        self._tracebacks = QueueReader(self.errors, "tracebacks-reader")
        self.procs: dict[str, mp.Process] = {}
        # However the supervising process ends, its children are stopped first (this runs before
        # multiprocessing's own exit hook, which would wait for them forever).
        atexit.register(self._stop_at_exit)

    def start(self, name: str, target: Callable, *args, environ: dict[str, str] | None = None,
              **kwargs) -> None:
        """Start `target(*args, **kwargs)` in a child named `name`. `target` is a function of a
        torch-free module (`launch/loop.py`'s bodies, a part's `entry_points`), which imports
        what it needs when called, in the child: this process never imports torch. `environ`:
        more environment variables for the child (e.g. those its C library reads as it
        starts)."""
        # A child with its own environment must start a fresh interpreter: a forked one has the
        # server's, and its C library read the environment long before.
        ctx = spawn_context() if environ else self.ctx
        proc = ctx.Process(target=_child,
                                args=(functools.partial(target, *args, **kwargs), self.errors,
                                      self.stop_event, self.child_signal, self._kept_open),
                                name=name, daemon=False)
        with child_environ(environ or {}), signals_held():
            proc.start()
            self.procs[name] = proc  # known before a held signal lands, so that it is stopped

    def wait(self, status_line=None, until=None, grace_s: float = SAVE_GRACE_S,
             progress: Progress | None = None) -> int:
        """Block until every process ends (or `until()` is true, then stop them); return an exit
        status: 0, EXIT_CRASHED (1) for a crashed child, 128 + the signal's number for a stop signal
        (launch/stopping.py; 130 for Ctrl-C). Meanwhile `progress` (a bar on a terminal; in a log a
        line every 30 s: done of total, rate, time left), or else `status_line()`, shows how the
        run goes."""
        tty = sys.stderr.isatty()
        last_print = 0.0
        bar = _progress_bar(progress) if tty and progress is not None else None
        if progress is not None and bar is None:  # a log: done of total and the time left
            status_line = progress.line
        deadline = None  # once `until()` holds: when the children still running are terminated
        ended = False  # the wait ended with no failure, no stuck child and no Ctrl-C
        try:
            while any(p.is_alive() for p in self.procs.values()):
                crashed = [n for n, p in self.procs.items()
                           if not p.is_alive() and p.exitcode not in (0, None)]
                if crashed:
                    return self._fail(crashed)
                if deadline is None and until is not None and until():
                    self.stop_event.set()
                    deadline = time.monotonic() + grace_s
                if deadline is not None and time.monotonic() > deadline:
                    # A child stuck past the grace (e.g. reading a clip that A2C, exiting, left
                    # half-written in the queue) must not hold the run open: its work is saved.
                    stuck = [n for n, p in self.procs.items() if p.is_alive()]
                    sys.stderr.write(f"\nstopping {', '.join(stuck)}: not done {grace_s:.0f} s "
                                     "after the stop\n")
                    self._join(0.0)
                    return self.signalled_status()  # terminated by us, not failed
                now = time.monotonic()
                if bar is not None and now - last_print >= 1.0:
                    last_print = now
                    done, status = progress.read()
                    bar.update(min(done, progress.total) - bar.n)
                    bar.set_postfix_str(status)
                elif status_line is not None and now - last_print >= (1.0 if tty else 30.0):
                    last_print = now
                    line = status_line()
                    if line:  # "" while a person labels: the prompt is on screen
                        sys.stderr.write(f"\r\x1b[K{line}" if tty else f"{line}\n")
                        sys.stderr.flush()
                time.sleep(0.2)
            ended = True
        except KeyboardInterrupt:
            sys.stderr.write("\nstopping: saving checkpoints and labels...\n")
            self.stop_event.set()
            self._join(grace_s)
            return interrupted_status()
        finally:
            if bar is not None:  # its last count, not the one of up to a second before the end
                bar.update(max(0, min(progress.read()[0], progress.total) - bar.n))
                bar.close()
            elif tty and status_line is not None:
                sys.stderr.write("\n")
            elif ended and status_line is not None and (line := status_line()):
                sys.stderr.write(f"{line}\n")  # a log ends on where the wait ended
        crashed = [n for n, p in self.procs.items() if p.exitcode not in (0, None)]
        return self._fail(crashed) if crashed else self.signalled_status()

    def signalled_status(self) -> int:
        """128 + the first stop signal a child had (sent to that child alone, e.g. `kill PID` of
        the process `ps` shows as a2c, it stops the run as one sent to run.py does), else 0."""
        return 128 + self.child_signal.value if self.child_signal.value else 0

    def check(self) -> int | None:
        """Without blocking: None while no child has failed; else the failure is printed, the
        others are stopped and EXIT_CRASHED is returned (for callers that cannot block in `wait`)."""
        crashed = [n for n, p in self.procs.items()
                   if not p.is_alive() and p.exitcode not in (0, None)]
        return self._fail(crashed) if crashed else None

    def stop(self, grace_s: float = SAVE_GRACE_S) -> None:
        """Ask every child to stop (they save their work) and end those still running after
        `grace_s`."""
        self.stop_event.set()
        self._join(grace_s)

    def _fail(self, crashed: list[str]) -> int:
        for name in crashed:
            sys.stderr.write(f"\nprocess {name!r} failed (exit {self.procs[name].exitcode})\n")
        # one traceback from each child that raised (a child killed by a signal sends none)
        for _ in range(sum(self.procs[n].exitcode > 0 for n in crashed)):
            try:
                sys.stderr.write(self._tracebacks.get(timeout=TRACEBACK_WAIT_S))
            except queue.Empty:
                break
            except Exception as e:  # noqa: BLE001 - a garbled traceback must not stop the stop
                sys.stderr.write(f"(a traceback that could not be read: {e!r})\n")
                break
        self.stop_event.set()
        self._join(10.0)
        return EXIT_CRASHED

    def _stop_at_exit(self) -> None:
        if any(p.is_alive() for p in self.procs.values()):
            self.stop()

    def _join(self, grace_s: float) -> None:
        deadline = time.monotonic() + grace_s
        for proc in self.procs.values():
            proc.join(max(0.0, deadline - time.monotonic()))
        for proc in self.procs.values():
            if proc.is_alive():  # SIGTERM would only set the stop flag again
                proc.kill()
                proc.join(KILL_JOIN_S)


def _progress_bar(progress: Progress):
    from tqdm import tqdm

    try:  # a terminal that reports no size (a bare pty) gets 80x24: at 0x0 tqdm draws nothing
        sized = os.get_terminal_size(sys.stderr.fileno()).columns > 0
    except OSError:
        sized = False
    # A resumed run's bar starts where it left off, so its rate counts only this start's work.
    return tqdm(total=progress.total, desc=progress.desc, unit=progress.unit, file=sys.stderr,
                initial=min(progress.read()[0], progress.total), unit_scale=progress.unit_scale,
                dynamic_ncols=sized, ncols=None if sized else 80, nrows=None if sized else 24,
                smoothing=0.1)


def duration(seconds: float) -> str:
    """`4 h 05 min`, or `3 min 20 s` under an hour."""
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h} h {m:02d} min" if h else f"{m} min {s:02d} s"


def number(value: float) -> str:
    return "-" if value != value else f"{value:.1f}"  # NaN until the first episode ends


def a2c_status(stats, steps: bool = True) -> str:
    """One short line; without the steps and their rate when a progress bar shows them. Until
    A2C reports (a resumed run's first line, before its checkpoint loads) episodes and rate
    read "-" rather than a 0 that is not so."""
    started = stats.steps_per_sec.value > 0 or stats.recent_return.value == stats.recent_return.value
    episodes = stats.episodes.value if started else "-"
    line = f"ep {episodes} | return {number(stats.recent_return.value)}"
    if stats.dead_since.value >= 0:
        line += " | policy dead"
    elif stats.revivals.value:
        line += f" | revived {stats.revivals.value}×"  # --revive_dead_policy put it back
    if not steps:
        return line
    rate = f"{stats.steps_per_sec.value:,.0f}" if stats.steps_per_sec.value > 0 else "-"
    return f"steps {stats.timesteps.value / 1e3:,.1f}k | {rate}/s | " + line


def preference_status(a2c_stats, labelling_stats=None, trainer_stats=None,
                      steps: bool = True) -> str:
    line = a2c_status(a2c_stats, steps)
    if labelling_stats is not None:
        line += f" | labels {labelling_stats.labels_stored.value}"
        if labelling_stats.clips_dropped.value:
            line += f" ({labelling_stats.clips_dropped.value} clips dropped)"
    if trainer_stats is not None:
        line += f" | {trainer_stats.val_accuracy_text()}"
    return line
