"""The command line of every script beside run.py (the experiments, benchmarks, run_checkpoint.py,
show_prefs.py, demonstrate.py): argparse, with run.py's two rules for its input."""
from __future__ import annotations

import argparse
import sys


class _Store(argparse.Action):
    """argparse's default action, but a list flag given twice takes both lists (`--seeds 0 1
    --seeds 2`: 0 1 2), where argparse would keep the last; the first replaces the default."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        if self.option_strings and self.nargs in ("+", "*"):
            so_far = getattr(namespace, self.dest, None)
            taken = [] if so_far is None or so_far is self.default else list(so_far)
            values = taken + list(values)
        setattr(namespace, self.dest, values)


class ScriptParser(argparse.ArgumentParser):
    """No flag is taken from a shortened one (`--seed` is not `--seeds`), a list flag given twice
    takes both lists, and a usage mistake is one line on stderr, `PROG: error: ...`, with
    status 2. Made in a module of a package (`experiments.milestone`), PROG is the command that
    runs it: `python -m experiments.milestone`."""

    def __init__(self, **kwargs) -> None:
        spec = sys._getframe(1).f_globals.get("__spec__")  # the module making the parser
        if "prog" not in kwargs and spec is not None and "." in spec.name:
            kwargs["prog"] = f"python -m {spec.name}"
        super().__init__(allow_abbrev=False, **kwargs)
        self.register("action", None, _Store)  # the default action, argument groups' too

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")


def first_paragraph(doc: str) -> str:
    """A module docstring's first paragraph on one line: a script's --help description."""
    return " ".join(doc.strip().split("\n\n")[0].split())

