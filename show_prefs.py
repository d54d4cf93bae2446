#!/usr/bin/env python3
"""Page through stored preference labels; change or delete a mistaken one.

    python show_prefs.py RUN_DIR_OR_STORE [--clip_player auto|window|terminal] [--labeller NAME]
    python show_prefs.py RUN_DIR_OR_STORE --list
    python show_prefs.py RUN_DIR_OR_STORE --table [--labeller NAME]


Each label's pair plays with the labelling players (a window, or the terminal). Keys:
n next, p previous, L / R / E change the answer (left better, right better, equally good),
D delete (press D twice), Enter replay, q or Ctrl-D quit. Every change is committed at once.
--labeller NAME pages through (or, with --export or --table, exports or prints) only that
person's labels; --list prints how many labels each labeller gave, --table one line per label.
A running trainer keeps the labels it already holds: edits count from the next time the store
is loaded (pretraining, --load_prefs_dir, --resume).
"""
from __future__ import annotations

import os
import queue
import sys
from pathlib import Path

from launch.rundir import run_dir_holder
from pref_interface.labellers.human import describe_token
from pref_interface.labellers.keys import ANSWER_KEYS, ENTER, EOF, KeyReader
from pref_interface.labellers.player import Playback, make_player, resolve_player
from pref_interface.store import PreferenceStore, StoreError
from runtime.outputs import prepare_output
from runtime.script_args import ScriptParser

EXIT_USAGE, EXIT_INTERRUPTED = 2, 130
KEYS_HELP = "n next, p previous, L/R/E change, D delete, Enter replay, q quit"
ANSWER_NAMES = {1.0: "left better", 0.0: "right better", 0.5: "equally good"}
PREFS_FILE = "prefs.sqlite"


def store_path(arg: str) -> Path:
    """A run directory means its prefs.sqlite; anything else is the store file itself."""
    path = Path(arg)
    return path / PREFS_FILE if path.is_dir() else path


def describe_mu(mu: float) -> str:
    return f"{ANSWER_NAMES.get(mu, 'left preferred with p')} (mu {mu:g})"


def describe_labeller(name: str | None) -> str:
    return f"by {name}" if name is not None else "no labeller recorded"


def labeller_counts(counts: dict[str | None, int]) -> str:
    """"ann 12, bob 3, 40 naming no labeller": the labels of each labeller, on one line (labels
    that name nobody, such as synthetic ones, are no labeller's to pick with --labeller)."""
    return ", ".join(f"{name} {n}" if name is not None else f"{n} naming no labeller"
                     for name, n in counts.items())


def print_table(rows: list[tuple]) -> None:
    """One line per label (`PreferenceStore.label_rows`), under a header."""
    from datetime import datetime, timezone

    print(f"{'id':>6}  {'when (UTC)':19}  {'answer':12}  {'labeller':10}  {'source':9}  "
          f"{'split':10}  demonstration")
    for label_id, created, source, is_validation, mu, _, _, labeller, _p, demonstration, *_ in rows:
        when = datetime.fromtimestamp(created, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
        answer = ANSWER_NAMES.get(mu, f"left p={mu:g}")
        print(f"{label_id:>6}  {when}  {answer:12}  {labeller or '-':10}  {source:9}  "
              f"{'validation' if is_validation else 'training':10}  {demonstration or '-'}")


def unknown_labeller(store: PreferenceStore, name: str | None) -> str | None:
    """The one-line complaint when `name` gave no label in the store, else None."""
    if name is None or store.labeller_ids(name):
        return None
    counts = store.labellers()
    return (f"--labeller: no labels by {name!r} in {store.path} (labellers: "
            f"{labeller_counts(counts) or 'none, the store is empty'})")


class Browser:
    """The paging state: which label is shown, and what the prompt says."""

    def __init__(self, store: PreferenceStore, player_kind: str, keys: queue.Queue,
                 labeller: str | None = None) -> None:
        self.store, self.keys, self.labeller = store, keys, labeller
        title = "Stored labels" if labeller is None else f"Stored labels by {labeller}"
        self.player = make_player(player_kind, title=title, footer="keys in the terminal: " + KEYS_HELP)
        self.ids = self.label_ids()
        self.pos = 0
        self.message = ""
        self.confirm_delete = False
        self.shown_mu = 0.0

    def label_ids(self) -> list[int]:
        """The labels paged through: every label, or those of one labeller."""
        return self.store.all_ids() if self.labeller is None else self.store.labeller_ids(self.labeller)

    def run(self) -> None:
        """Show labels until q / Ctrl-D, or until none is left."""
        while self.ids:
            label_id = self.ids[self.pos]
            try:
                pref = self.store.get(label_id)
            except KeyError:
                self._gone(label_id)
                continue
            self.shown_mu = pref.mu
            playback = Playback(self.player, pref.left.step_frames(),
                                pref.right.step_frames())
            while True:
                token = playback.next_token(self.keys, lambda: self.status(label_id, pref))
                key = token if token in (ENTER, EOF) else token.strip()
                if key in (EOF, "q", "Q"):
                    return
                if self.confirm_delete and key not in ("d", "D"):
                    self.confirm_delete, self.message = False, "not deleted"
                    continue
                if key == ENTER:
                    playback.restart()
                    self.message = "replaying from the start"
                elif key in ("n", "N", "p", "P"):
                    if self.move(+1 if key in ("n", "N") else -1):
                        break
                elif key.upper() in ANSWER_KEYS:
                    mu = ANSWER_KEYS[key.upper()]
                    try:
                        self.store.set_mu(label_id, mu)
                    except KeyError:
                        self._gone(label_id)
                        break
                    self.shown_mu = mu
                    self.message = f"id {label_id} changed to {describe_mu(mu)}"
                elif key in ("d", "D"):
                    if not self.confirm_delete:
                        self.confirm_delete = True
                        self.message = f"press D again to delete this label (id {label_id})"
                        continue
                    try:
                        self.store.delete(label_id)
                    except KeyError:
                        self._gone(label_id)
                        break
                    self.confirm_delete, self.message = False, f"id {label_id} deleted"
                    self._refresh()
                    break
                else:  # the keys are on the line above
                    self.message = f"{describe_token(token)} means nothing here"

    def _refresh(self) -> None:
        """The labels paged through, read again; the place kept where it can be."""
        self.ids = self.label_ids()
        self.pos = max(0, min(self.pos, len(self.ids) - 1))

    def _gone(self, label_id: int) -> None:
        """The label shown was deleted elsewhere (the run's page, another show_prefs.py)."""
        self.confirm_delete, self.message = False, f"id {label_id} was deleted meanwhile"
        self._refresh()

    def move(self, step: int) -> bool:
        """Go to the next/previous label (labels added meanwhile are included)."""
        current = self.ids[self.pos]
        self.ids = self.label_ids()
        pos = self.ids.index(current) if current in self.ids else self.pos
        if not 0 <= pos + step < len(self.ids):
            self.message = "that was the last label" if step > 0 else "this is the first label"
            return False
        self.pos, self.message = pos + step, ""
        return True

    def status(self, label_id: int, pref) -> list[str]:
        """The label's place and answer, then where it came from (two lines: each fits 80
        columns), the keys, and the last message."""
        split = "validation" if pref.is_validation else "training"
        demo = f", demonstration: {pref.demonstration}" if pref.demonstration else ""
        head = f"label {self.pos + 1}/{len(self.ids)} (id {label_id}): {describe_mu(self.shown_mu)}"
        origin = f"{pref.source}, {split}, {describe_labeller(pref.labeller)}{demo}"
        return [head, origin, KEYS_HELP, "> " + self.message]

    def close(self) -> None:
        self.player.close(f"{len(self.ids)} labels in {self.store.path}")


def export_or_import(path: Path, export: str | None, import_file: str | None,
                     labeller: str | None = None) -> int:
    """Share a label set (or one labeller's labels) as a plain .npz (nothing pickled), or add
    one to a store."""
    try:
        if import_file and not os.path.isfile(import_file):
            raise StoreError(f"{import_file} does not exist")
        if import_file and (holder := run_dir_holder(path.parent)):
            # an import writes in one transaction, which would hold up the run's labelling
            raise ValueError(f"{path.parent} is in use by {holder}: import once the run has "
                             "stopped (it goes on with the labels after --resume)")
        if export and labeller is not None:
            with PreferenceStore(path, create=False) as store:  # before the export's folder is made
                if problem := unknown_labeller(store, labeller):
                    raise ValueError(problem)
        if export:
            prepare_output(export, "--export")  # never over a file; its folder made
        with PreferenceStore(path, create=bool(import_file)) as store:
            if import_file:
                n = store.import_npz(import_file)
                print(f"imported {n} labels into {path} (now {len(store)})")
            if export:
                if problem := unknown_labeller(store, labeller):
                    raise ValueError(problem)
                n = store.export_npz(export, labeller)
                whose = "" if labeller is None else f" by {labeller}"
                print(f"exported {n} labels{whose} to {export}")
    except (StoreError, ValueError, OSError) as e:
        print(f"show_prefs.py: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = ScriptParser(prog="show_prefs.py",
                          description=__doc__.splitlines()[0])
    parser.add_argument("store", metavar="RUN_DIR_OR_STORE",
                        help="a run directory (its prefs.sqlite) or a preference store file")
    parser.add_argument("--clip_player", choices=("auto", "window", "terminal"), default="auto",
                        help="where the clips play; auto: a window when a display is available")
    parser.add_argument("--labeller", metavar="NAME",
                        help="page through (or --export, --table) only the labels this person "
                             "gave")
    parser.add_argument("--list", action="store_true",
                        help="print how many labels each labeller gave, then exit")
    parser.add_argument("--table", action="store_true",
                        help="print one line per label (id, when, answer, labeller, source, "
                             "split, which clip is a demonstration), oldest first, then exit")
    parser.add_argument("--export", metavar="FILE.npz",
                        help="write every label (only NAME's with --labeller) to a plain .npz file "
                             "for sharing, then exit")
    parser.add_argument("--import", dest="import_file", metavar="FILE.npz",
                        help="add the labels of an exported .npz to the store (created if "
                             "missing), then exit")
    args = parser.parse_args(argv)
    if args.labeller is not None and (args.list or args.import_file):
        parser.error("--labeller applies to browsing, --table and --export, not to --list (which "
                     "counts every labeller's labels) or --import")
    if sum(map(bool, (args.list, args.table, args.export or args.import_file))) > 1:
        parser.error("--list, --table and --export/--import are one at a time")
    path = store_path(args.store)
    if args.export or args.import_file:
        return export_or_import(path, args.export, args.import_file, args.labeller)
    store = None
    try:
        kind = "" if args.list or args.table else resolve_player(args.clip_player)
        store = PreferenceStore(path, create=False)
        counts = store.labellers()  # a damaged file can open fine and fail on first read
        if args.list:
            total = sum(counts.values())
            print(f"{total} labels in {path}: {labeller_counts(counts) or 'none'}")
            if total:  # mostly ties: the labels say little (a game whose clips mostly score 0)
                print("answers: " + ", ".join(
                    f"{ANSWER_NAMES.get(mu, f'mu {mu:g}')} {n} ({n / total:.1%})"
                    for mu, n in store.answer_counts().items()))
                if n_demo := sum(row[9] is not None for row in store.label_rows()):
                    print(f"{n_demo} labels ({n_demo / total:.1%}) compare a demonstration "
                          f"(--demonstrations)")
            store.close()
            return 0
        if problem := unknown_labeller(store, args.labeller):
            raise ValueError(problem)
        if args.table:
            try:
                print_table(store.label_rows(args.labeller))
            except BrokenPipeError:  # `| head` has read enough
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            store.close()
            return 0
    except (StoreError, ValueError) as e:
        print(f"show_prefs.py: error: {e}", file=sys.stderr)
        if store is not None:
            store.close()
        return EXIT_USAGE
    if len(store) == 0:
        print(f"{path} holds no labels")
        store.close()
        return 0
    keys: queue.Queue = queue.Queue()
    reader = KeyReader(keys).start()
    browser = Browser(store, kind, keys, args.labeller)
    try:
        browser.run()
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except StoreError as e:
        print(f"\nshow_prefs.py: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        browser.close()
        reader.stop()
        store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
