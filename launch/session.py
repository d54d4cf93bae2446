"""What the main process owns for a person who labels: the terminal's key reader, the labelling
page's server and the episode window's check."""
from __future__ import annotations

import argparse
import sys

from launch.cli import UsageError, labels_by_person


def start_key_reader(args: argparse.Namespace, ctx):
    """When a person labels, read the terminal here, in the process that owns it (spawned
    children have stdin on /dev/null), and pass the keys on `args.answers`."""
    args.answers = None
    if not labels_by_person(args):
        return None
    from pref_interface.keys import KeyReader

    args.answers = ctx.Queue()
    args.answers.cancel_join_thread()  # keys nobody read must not hold up the exit
    if args.player_kind == "web" and not sys.stdin.isatty():
        return None  # answers come from the page; the end of piped input must not stop it
    return KeyReader(args.answers).start()


def open_labelling_page(args: argparse.Namespace):
    """With --clip_player web, the labelling page's server, listening already (a port in use is
    a usage error) but not yet serving: `start(answers, page_updates)` it once the channels exist."""
    if getattr(args, "player_kind", None) != "web":
        return None
    from pref_interface.web.server import LabellingPage

    try:
        return LabellingPage(args.web_host, args.web_port)
    except OSError as e:
        raise UsageError(f"--web_host/--web_port: cannot listen on {args.web_host}:"
                         f"{args.web_port} ({e.strerror or e})") from None


def episode_window(args: argparse.Namespace) -> bool:
    """--render_episodes: True when a window can open; otherwise say so and go on without."""
    from pref_interface.player import display_available

    if display_available():
        return True
    print("--render_episodes: no display (DISPLAY unset or Tk cannot open it); "
          "running without the episode window", file=sys.stderr)
    return False


class Session:
    """The main process's own part of a run: the terminal's key reader and the labelling page
    when a person labels, and whether the episode window can open. Sets `args.answers`,
    `args.page_updates` and `args.show_episodes`; `close()` gives the terminal its settings back
    and stops the page."""

    def __init__(self, args: argparse.Namespace, ctx, page=None):
        self.reader = start_key_reader(args, ctx)
        self.page = page
        if page is not None:
            args.page_updates = ctx.Queue()
            page.start(args.answers, args.page_updates)
            print(f"label in your browser: {page.url}", file=sys.stderr)
        args.show_episodes = bool(getattr(args, "render_episodes", False)) and episode_window(args)

    def close(self) -> None:
        if self.reader is not None:
            self.reader.stop()
        if self.page is not None:
            self.page.stop()
