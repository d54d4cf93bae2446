"""Files a command writes at its end: their folder made up front, so that a mistake in the path
is a one-line error before the work, not a traceback after it."""
from __future__ import annotations

from pathlib import Path


def prepare_output(path: str | Path, flag: str) -> Path:
    """Make the folder that `path` goes into; ValueError naming `flag` when `path` is a folder or
    its folder cannot be made."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{flag}: {path} is a folder; give a file name")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ValueError(f"{flag}: cannot make the folder {path.parent} "
                         f"({e.strerror or type(e).__name__})") from None
    return path
