"""What the main process owns: the run directory's lock and, for a person who labels, the
terminal's key reader, the labelling page's server and the episode window's check."""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from launch.cli import UsageError

if TYPE_CHECKING:
    from launch.rundir import Run, RunDirLock


def open_labelling_page(run: Run):
    """With --clip_player web, the labelling page's server, listening already (a port in use is
    a usage error) but not yet serving: `start(answers, page_updates)` it once the channels exist."""
    if run.player_kind != "web":
        return None
    from pref_interface.labellers.team import parse_labellers
    from pref_interface.labellers.web.server import LabellingPage

    s = run.settings
    host, port = s.web_host, s.web_port
    names = parse_labellers(s.labellers) if s.labellers else None
    try:
        return LabellingPage(host, port, labellers=names, timeout_s=s.labeller_timeout)
    except OSError as e:
        raise UsageError(f"--web_host/--web_port: cannot listen on {host}:{port} "
                         f"({e.strerror or e})") from None


def episode_window() -> bool:
    """--render_episodes: True when a window can open; otherwise say so and go on without."""
    from pref_interface.labellers.player import display_available

    if display_available():
        return True
    print("--render_episodes: no display (DISPLAY unset or Tk cannot open it); "
          "running without the episode window", file=sys.stderr)
    return False


class Session:
    """The main process's own part of a run: when a person labels, the terminal's key reader
    (the children have stdin on /dev/null) and the labelling page, with the queues they fill
    (`answers`, `page_updates`); whether the episode window can open (`show_episodes`); and the
    run directory's lock. `close()` gives the terminal its settings back and stops the page; the
    run directory stays held until the process ends (children stopped at exit save first) or
    `release_run_dir()`, once every child has stopped."""

    def __init__(self, run: Run, ctx, page=None, lock: RunDirLock | None = None):
        self.answers = self.page_updates = self.reader = None
        self.labelling_stopped = False  # the person stopped labelling (Ctrl-D) in an earlier phase
        self.page = page
        self.lock = lock
        if run.labels_by_person:
            from pref_interface.labellers.keys import KeyReader

            self.answers = ctx.Queue()
            self.answers.cancel_join_thread()  # keys nobody read must not hold up the exit
            # With the page and piped input, answers come from the page only: the end of the
            # input must not stop labelling.
            if not (run.player_kind == "web" and not sys.stdin.isatty()):
                self.reader = KeyReader(self.answers).start()
        if page is not None:
            self.page_updates = ctx.Queue()
            page.start(self.answers, self.page_updates)
            if page.labellers:
                for name, url in page.urls().items():
                    print(f"{name} labels in their browser: {url}", file=sys.stderr)
            else:
                print(f"label in your browser: {page.url}", file=sys.stderr)
        self.show_episodes = run.settings.render_episodes and episode_window()

    def close(self) -> None:
        if self.reader is not None:
            self.reader.stop()
        if self.page is not None:
            self.page.stop()

    @property
    def run_dir_fd(self) -> int | None:
        """The run directory's lock, for the supervisors: each child holds the directory too."""
        return None if self.lock is None else self.lock.fileno()

    def release_run_dir(self) -> None:
        if self.lock is not None:
            self.lock.release()


def start_run(run: Run, page=None):
    """Make (or take) the run directory, UsageError if it cannot be made or another process
    holds it; open what the main process owns and start the run's report: returns the processes'
    context (`run_context`), the Session and the RunReport."""
    from launch.rundir import RunDirBusy, make_run_dir
    from launch.summary import RunReport

    try:
        lock = make_run_dir(run)
    except RunDirBusy as e:
        raise UsageError(str(e)) from None
    except OSError as e:
        raise UsageError(f"cannot make the run directory {run.dir}: "
                         f"{e.strerror or type(e).__name__}") from None
    print(f"run directory: {run.dir}", file=sys.stderr)
    s = run.settings
    if s.demonstrations and s.mode != "train_policy_with_original_rewards":
        print(f"demonstrations: {s.demonstrations} make up {s.demonstration_share:.0%} of the clips "
              "labelling draws its pairs from (TensorBoard: demonstrations/labels, "
              "demonstrations/preferred)", file=sys.stderr)
    from runtime.process_setup import run_context

    try:  # no child runs yet: a failure here lets the directory go at once
        ctx = run_context()
        session = Session(run, ctx, page, lock)
    except BaseException:
        lock.release()
        raise
    return ctx, session, RunReport(run.dir, run.settings.env_id, page=page)
