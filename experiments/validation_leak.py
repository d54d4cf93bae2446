#!/usr/bin/env python3
"""How many validation labels of a run share a clip with a training label?

    python -m experiments.validation_leak RUN_DIR

A validation label whose clips the predictor also trains on measures memory, not generalisation.
Labels made since clips are split on arrival (pref_interface.queries.pairs.ClipBuffer) share none;
stores made before that split labels at random and leak.
"""
from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from clips.clip import Clip, Preference
from runtime.script_args import ScriptParser


def _key(clip: Clip) -> str:
    return clip.key.hex()


def leak(prefs: Sequence[Preference]) -> tuple[int, int, int]:
    """(validation labels, those sharing at least one clip with a training label, those sharing
    both clips)."""
    training = {_key(s) for p in prefs if not p.is_validation for s in (p.left, p.right)}
    val = [(_key(p.left) in training, _key(p.right) in training) for p in prefs if p.is_validation]
    return len(val), sum(a or b for a, b in val), sum(a and b for a, b in val)


def main(argv: list[str] | None = None) -> int:
    p = ScriptParser(description=__doc__.splitlines()[0])
    p.add_argument("run_dir", help="a run directory with a prefs.sqlite")
    args = p.parse_args(argv)
    from pref_interface.store import PreferenceStore

    with PreferenceStore(str(Path(args.run_dir) / "prefs.sqlite"), create=False) as store:
        prefs = store.latest(len(store))
    n, one, both = leak(prefs)
    print(f"{len(prefs)} labels, {n} validation: {one} ({one / max(n, 1):.0%}) share a clip with a "
          f"training label, {both} ({both / max(n, 1):.0%}) share both")
    return 0


if __name__ == "__main__":
    sys.exit(main())
