"""Files the project writes: a command's outputs, their folder made up front so that a mistake
in the path is a one-line error before the work, not a traceback after it; and checkpoints and
run files put in place whole (`written_whole`, `write_json`)."""
from __future__ import annotations

import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator


def prepare_output(path: str | Path, flag: str, overwrite: bool = False) -> Path:
    """Make the folder that `path` goes into; ValueError naming `flag` when `path` is a folder,
    exists already (unless `overwrite`), or its folder cannot be made or written into."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{flag}: {path} is a folder; give a file name")
    if path.exists() and not overwrite:
        raise ValueError(f"{flag}: {path} exists already (nothing is overwritten: choose another "
                         "name)")
    blocking = next((p for p in path.parents if p.exists() and not p.is_dir()), None)
    if blocking is not None:
        raise ValueError(f"{flag}: {blocking} is a file, not a folder")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ValueError(f"{flag}: cannot make the folder {path.parent} "
                         f"({e.strerror or type(e).__name__})") from None
    try:  # a file made and removed again: the work is not done for a file that cannot be kept
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".write-test-"):
            pass
    except OSError as e:
        raise ValueError(f"{flag}: cannot write into {path.parent} "
                         f"({e.strerror or type(e).__name__})") from None
    return path


def replace_durably(tmp: str | Path, path: str | Path) -> None:
    """Rename a file written whole at `tmp` over `path` once its bytes are on the disk, so that a
    stop, a crash or a power cut at any instant leaves the old file or the new one (a rename
    alone may reach the disk before the data, leaving an empty file)."""
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


@contextmanager
def written_whole(path: str | Path, suffix: str = ".tmp") -> Iterator[Path]:
    """Where to write a file that must appear at `path` whole or not at all: a path beside it
    (`path` + `suffix`), put over `path` (`replace_durably`) once the block ends, and removed
    if the block fails or is stopped."""
    tmp = Path(f"{path}{suffix}")
    try:
        yield tmp
        replace_durably(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_json(path: Path, value: Any) -> None:
    """`value` as JSON at `path`, whole or not at all (`written_whole`)."""
    text = json.dumps(value, indent=2) + "\n"
    with written_whole(path) as tmp:
        tmp.write_text(text)


FIGURE_SUFFIXES = (".png", ".svg", ".pdf")  # what matplotlib writes that we offer


def prepare_figure(path: str | Path, flag: str, overwrite: bool = True) -> Path:
    """`prepare_output` for a figure: also ValueError when matplotlib cannot write its kind. A
    figure is made again each time by default."""
    if Path(path).suffix.lower() not in FIGURE_SUFFIXES:
        raise ValueError(f"{flag}: {path} is not a {', '.join(FIGURE_SUFFIXES[:-1])} or "
                         f"{FIGURE_SUFFIXES[-1]} file")
    return prepare_output(path, flag, overwrite=overwrite)


def unused_name(path: Path) -> Path:
    """`path`, or where it exists already the first free NAME-1.EXT, NAME-2.EXT, ..."""
    k, free = 0, path
    while free.exists():
        k += 1
        free = path.with_name(f"{path.stem}-{k}{path.suffix}")
    return free
