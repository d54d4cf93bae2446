"""Durable storage of preference labels: one SQLite file, every label committed as it is made.

Human labels are the expensive resource of the method, so none may be lost to a crash: the store
runs SQLite in WAL mode with `synchronous=FULL` and commits each label in its own transaction, so a
process killed at any instant (SIGKILL included) leaves a file that opens with every label whose
`add()` had returned. Clips are kept as `.npz` blobs of their packed frames and per-step arrays,
read back with `allow_pickle=False`; nothing in this module unpickles.

Each label may name its labeller (the person who gave it) and keep the predictor ensemble's
P[left better] when that person answered (with several people labelling, to measure how often
each agrees with it), and which of its clips are someone else's play (`--demonstrations`). Stores
of every version stay readable and writable by code of every version: each is a nullable column
(`labeller`, `ensemble_p`, `demonstration`), added to a store only when the
first label that has it is stored, and the schema version does not change (see `_add_column`).
"""
from __future__ import annotations

import io
import math
import os
import sqlite3
import time
import zipfile
from contextlib import contextmanager
from functools import wraps
from pathlib import Path
from typing import Callable, Collection, Iterator, TypeVar

import numpy as np

from clips.clip import FRAME_SHAPE, STACK, Clip, Preference
from clips.demonstrations import DEMONSTRATION_SIDES
from runtime.outputs import written_whole

SCHEMA_VERSION = 1  # PRAGMA user_version of stores written by this code
EXPORT_FORMAT_VERSION = 2  # 1: the same arrays, `clip_*` named `seg_*` (still imported)
SOURCES = ("synthetic", "human")

_SCHEMA = """
CREATE TABLE labels (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    created       REAL    NOT NULL,  -- Unix time the label was made
    source        TEXT    NOT NULL CHECK (source IN ('synthetic', 'human')),
    is_validation INTEGER NOT NULL CHECK (is_validation IN (0, 1)),
    mu            REAL    NOT NULL CHECK (mu >= 0.0 AND mu <= 1.0),  -- P(left preferred)
    left_steps    INTEGER NOT NULL,  -- clip lengths, so exports can be sized without decoding
    right_steps   INTEGER NOT NULL,
    left_seg      BLOB    NOT NULL,  -- np.savez(frames_z, actions, true_rewards[, dones])
    right_seg     BLOB    NOT NULL
);
"""
# The clip columns keep the store's first names (`seg`, for segment, is a clip): stores of every
# version of the code, and runs of older code still writing to theirs, read the same.
_COLUMNS = "id, source, is_validation, mu, left_seg, right_seg"
# Added by `ALTER TABLE` to a store when a label first has it (SCHEMA_VERSION stays 1): the
# person who gave it, the ensemble's mean P[left better] when they answered, which clips are
# demonstrations ("left", "right" or "both") and whether the person saw the pair swapped (1).
_OPTIONAL_COLUMNS = {"labeller": "TEXT", "ensemble_p": "REAL", "demonstration": "TEXT",
                     "shown_swapped": "INTEGER"}


class StoreError(Exception):
    """The store file is missing, corrupt or not a preference store."""


_F = TypeVar("_F", bound=Callable)


def _db_errors_as_store_errors(method: _F) -> _F:
    """A damaged file can open fine and fail only when its pages are read: report that as a
    StoreError that names the file."""
    @wraps(method)
    def wrapper(self: "PreferenceStore", *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except sqlite3.DatabaseError as e:
            raise StoreError(f"preference store {self.path}: {e}") from None
    return wrapper  # type: ignore[return-value]


def encode_clip(clip: Clip) -> bytes:
    """A clip as a self-describing `.npz` blob of its packed frames as they are (not packed
    again) and its per-step arrays (`dones` only when the clip has them)."""
    buf = io.BytesIO()
    arrays = {"frames_z": np.frombuffer(clip.frames_z, np.uint8), "actions": clip.actions,
              "true_rewards": clip.true_rewards}
    if clip.dones is not None:
        arrays["dones"] = clip.dones
    np.savez(buf, **arrays)
    return buf.getvalue()


def decode_clip(blob: bytes) -> Clip:
    """Inverse of `encode_clip`; never unpickles. Blobs of older stores hold the frames
    themselves (`frames`, deflated by the archive; packed now), and those written before clips
    had `dones` decode with `dones=None`."""
    with np.load(io.BytesIO(blob), allow_pickle=False) as z:
        dones = z["dones"] if "dones" in z.files else None
        if "frames_z" not in z.files:
            return Clip.pack(z["frames"], z["actions"], z["true_rewards"], dones)
        return Clip(z["frames_z"].tobytes(), z["actions"], z["true_rewards"], dones)


class PreferenceStore:
    """All preference labels of a run, in one SQLite file.

    Args:
        path: the database file (its `-wal` / `-shm` companions live beside it).
        create: make the file (and its folder) if missing; with False a missing file is an error.
    """

    def __init__(self, path: str | os.PathLike, create: bool = True) -> None:
        self.path = Path(path)
        self._columns: set[str] = set()  # optional columns seen in the table; never removed
        if not self.path.exists():
            if not create:
                raise StoreError(f"preference store {self.path} does not exist")
            self.path.parent.mkdir(parents=True, exist_ok=True)
        elif not self.path.is_file():
            raise StoreError(f"preference store {self.path} is not a file")
        try:
            # isolation_level=None: no implicit transactions; each statement commits on its own
            # unless wrapped in `_transaction()`.
            self._db = sqlite3.connect(self.path, isolation_level=None, timeout=30.0)
        except sqlite3.Error as e:
            raise StoreError(f"cannot open preference store {self.path}: {e}") from None
        try:
            self._open(create)
        except StoreError:
            self._db.close()
            raise
        except sqlite3.Error as e:
            self._db.close()
            raise StoreError(f"{self.path} is not a readable preference store: {e}") from None

    def _open(self, create: bool) -> None:
        mode = self._db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if mode.lower() != "wal":
            raise StoreError(f"preference store {self.path}: cannot use WAL journal (got {mode})")
        self._db.execute("PRAGMA synchronous=FULL")  # fsync the WAL at every commit
        with self._transaction(immediate=True):
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
            tables = {r[0] for r in self._db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if version == 0 and not tables - {"sqlite_sequence"}:
                if not create:
                    raise StoreError(f"{self.path} is an empty database, not a preference store")
                self._db.execute(_SCHEMA)
                self._db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            elif version > SCHEMA_VERSION:
                raise StoreError(f"preference store {self.path} has schema version {version}; "
                                 f"this code reads up to {SCHEMA_VERSION}")
            elif version != SCHEMA_VERSION or "labels" not in tables:
                raise StoreError(f"{self.path} is an SQLite database but not a preference store")

    @contextmanager
    def _transaction(self, immediate: bool = False) -> Iterator[None]:
        self._db.execute("BEGIN IMMEDIATE" if immediate else "BEGIN")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            self._columns = set()  # a column added in this transaction is gone: look again
            raise
        self._db.execute("COMMIT")

    # ---- labels -------------------------------------------------------------------------------

    @_db_errors_as_store_errors
    def add(self, pref: Preference, created: float | None = None) -> int:
        """Store a label and commit it before returning; returns its id."""
        created = time.time() if created is None else created
        if not all(self._has_column(c) for c in _optional_values(pref)):
            with self._transaction(immediate=True):  # the new column and its first label, together
                return self._insert(pref, created)
        return self._insert(pref, created)

    def _insert(self, pref: Preference, created: float) -> int:
        """One INSERT; a label with an optional value must come inside a write transaction if
        the store may lack its column. The columns are named, as code of every version names
        them."""
        _check_label(pref.mu, pref.source, pref.labeller, pref.ensemble_p, pref.demonstration)
        columns = ["created", "source", "is_validation", "mu", "left_steps", "right_steps",
                   "left_seg", "right_seg"]
        values = [created, pref.source, int(pref.is_validation), float(pref.mu), len(pref.left),
                  len(pref.right), encode_clip(pref.left), encode_clip(pref.right)]
        for column, value in _optional_values(pref).items():  # a None leaves the schema as it is
            self._add_column(column)
            columns.append(column)
            values.append(value)
        cur = self._db.execute(f"INSERT INTO labels ({', '.join(columns)}) "
                               f"VALUES ({', '.join('?' * len(values))})", values)
        return int(cur.lastrowid)

    def _has_column(self, column: str) -> bool:
        """Whether the table has this optional column now (another process may have added it)."""
        if column not in self._columns:
            self._columns |= {r[1] for r in self._db.execute("PRAGMA table_info(labels)")
                              if r[1] in _OPTIONAL_COLUMNS}
        return column in self._columns

    def _add_column(self, column: str) -> None:
        """Add a nullable optional column unless present; called inside a write transaction.

        Added when the first label with its value is stored, not on open: a store that only ever
        gets labels without it (synthetic ones, older code's) keeps the schema it was made with,
        and tools that only read never write to the file. Older code reads and writes a store
        with the column unchanged: it names its columns in every SELECT and INSERT (its labels
        get NULL), and the schema version stays 1. The check runs under the write lock, so two
        processes adding a first such label at once add the column once.
        """
        if column in self._columns:
            return
        assert self._db.in_transaction, "an optional column is added inside a write transaction"
        if not self._has_column(column):
            self._db.execute(f"ALTER TABLE labels ADD COLUMN {column} {_OPTIONAL_COLUMNS[column]}")
            self._columns.add(column)

    def _selected(self, columns: str = _COLUMNS) -> str:
        """`columns` and then the optional ones, as `_to_pref` reads them: NULL for an optional
        one the store does not have."""
        return ", ".join([columns, *(c if self._has_column(c) else "NULL"
                                     for c in _OPTIONAL_COLUMNS)])

    @_db_errors_as_store_errors
    def __len__(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM labels").fetchone()[0])

    @_db_errors_as_store_errors
    def ever_stored(self) -> int:
        """How many labels were ever added, deleted ones included: the highest id given."""
        row = self._db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'labels'").fetchone()
        return int(row[0]) if row else 0

    @_db_errors_as_store_errors
    def all_ids(self) -> list[int]:
        """Ids of every stored label, oldest first."""
        return [r[0] for r in self._db.execute("SELECT id FROM labels ORDER BY id")]

    @_db_errors_as_store_errors
    def labeller_ids(self, labeller: str) -> list[int]:
        """Ids of the labels this person gave, oldest first."""
        if not self._has_column("labeller"):
            return []
        return [r[0] for r in self._db.execute(
            "SELECT id FROM labels WHERE labeller = ? ORDER BY id", (labeller,))]

    @_db_errors_as_store_errors
    def labellers(self) -> dict[str | None, int]:
        """How many labels each labeller gave (None: labels that name nobody), in the order
        each first labelled; empty for an empty store."""
        if not self._has_column("labeller"):
            n = len(self)
            return {None: n} if n else {}
        return {name: int(n) for name, n, _ in self._db.execute(
            "SELECT labeller, COUNT(*), MIN(id) AS first FROM labels GROUP BY labeller ORDER BY first")}

    @_db_errors_as_store_errors
    def answer_counts(self) -> dict[float, int]:
        """How many labels gave each answer (mu), most common first."""
        return {float(mu): int(n) for mu, n in self._db.execute(
            "SELECT mu, COUNT(*) AS n FROM labels GROUP BY mu ORDER BY n DESC, mu DESC")}

    def ties_and_total(self) -> tuple[int, int]:
        """How many labels are ties ("equally good", mu 0.5), which teach r̂ no order, and how
        many labels there are."""
        counts = self.answer_counts()
        return counts.get(0.5, 0), sum(counts.values())

    def tie_share(self) -> float | None:
        """The share of the labels that are ties; None with no label."""
        ties, n = self.ties_and_total()
        return ties / n if n else None

    @_db_errors_as_store_errors
    def sources(self) -> set[str]:
        """Where the labels came from: 'synthetic', 'human', both, or neither in an empty store."""
        return {src for (src,) in self._db.execute("SELECT DISTINCT source FROM labels")}

    @_db_errors_as_store_errors
    def get(self, label_id: int) -> Preference:
        """The label with this id; KeyError if there is none."""
        row = self._db.execute(f"SELECT {self._selected()} FROM labels WHERE id = ?",
                               (label_id,)).fetchone()
        if row is None:
            raise KeyError(label_id)
        return self._to_pref(row)

    def latest(self, n: int) -> list[Preference]:
        """The newest `n` labels, oldest first (App. A: the trainer keeps only the last 3,000)."""
        return list(self.iter_latest(n))

    @_db_errors_as_store_errors
    def iter_latest(self, n: int, leave_out: Collection[str] = ()) -> Iterator[Preference]:
        """`latest(n)`, decoded one label at a time: the rows are read now (compressed), so a
        consumer that packs each label never holds 3,000 labels' clips as arrays (1.2 GB).
        `leave_out`: labellers whose labels are passed over (the newest `n` of the others)."""
        where, names = "", tuple(leave_out)
        if names and self._has_column("labeller"):
            where = f"WHERE labeller IS NULL OR labeller NOT IN ({','.join('?' * len(names))})"
        else:
            names = ()
        rows = self._db.execute(
            f"SELECT {self._selected()} FROM labels {where} ORDER BY id DESC LIMIT ?",
            (*names, n)).fetchall() if n > 0 else []
        return (self._to_pref(row) for row in reversed(rows))

    @_db_errors_as_store_errors
    def recent_answers(self, n: int) -> list[tuple[int, float]]:
        """(id, mu) of the newest `n` labels, newest first (the labelling page's list)."""
        return [(int(i), float(mu)) for i, mu in self._db.execute(
            "SELECT id, mu FROM labels ORDER BY id DESC LIMIT ?", (n,))]

    @_db_errors_as_store_errors
    def shown_swapped(self, ids: Collection[int]) -> set[int]:
        """Of these labels, those whose pair a person saw right clip first."""
        ids = [int(i) for i in ids]
        if not ids or not self._has_column("shown_swapped"):
            return set()
        return {int(i) for (i,) in self._db.execute(
            f"SELECT id FROM labels WHERE shown_swapped = 1 AND id IN ({','.join('?' * len(ids))})",
            ids)}

    @_db_errors_as_store_errors
    def set_mu(self, label_id: int, mu: float) -> None:
        """Change a label's answer (label editing); KeyError if there is none."""
        _check_mu(mu)
        if self._db.execute("UPDATE labels SET mu = ? WHERE id = ?", (float(mu), label_id)).rowcount == 0:
            raise KeyError(label_id)

    @_db_errors_as_store_errors
    def delete(self, label_id: int) -> None:
        """Remove a label (label editing); KeyError if there is none."""
        if self._db.execute("DELETE FROM labels WHERE id = ?", (label_id,)).rowcount == 0:
            raise KeyError(label_id)

    @_db_errors_as_store_errors
    def backup_to(self, path: str | os.PathLike) -> None:
        """Copy every committed label into a new store file at `path` (SQLite's online backup)."""
        dest = sqlite3.connect(path)
        try:
            self._db.backup(dest)
        finally:
            dest.close()

    @_db_errors_as_store_errors
    def integrity_check(self) -> str:
        """SQLite's `PRAGMA integrity_check` verdict: "ok" for a healthy file (StoreError when the
        file is too damaged to check)."""
        return "; ".join(r[0] for r in self._db.execute("PRAGMA integrity_check"))

    def _to_pref(self, row: tuple) -> Preference:
        label_id, source, is_val, mu, left, right, *optional = row
        values = dict(zip(_OPTIONAL_COLUMNS, optional))
        values["shown_swapped"] = True if values["shown_swapped"] else None
        try:
            return Preference(decode_clip(left), decode_clip(right), float(mu), source,
                              bool(is_val), int(label_id), **values)
        except (ValueError, OSError, KeyError, AssertionError, zipfile.BadZipFile) as e:
            raise StoreError(f"preference store {self.path}: undecodable clip ({e})") from None

    # ---- sharing label sets -------------------------------------------------------------------

    @_db_errors_as_store_errors
    def export_npz(self, path: str | os.PathLike, labeller: str | None = None) -> int:
        """Write every label (or only those `labeller` gave) to a plain `.npz` (no pickled
        objects); returns the number written.

        Arrays: `mu` (N,), `is_validation` (N,), `source` (N,) str, `created` (N,), `ids` (N,),
        `labeller` (N,) str ('' for a label that names nobody; older exports lack it),
        `ensemble_p` (N,) float (the ensemble's P[left better] when a person answered, NaN where
        it was not kept; older exports lack it), `demonstration` (N,) str (`left`, `right` or
        `both`: which clips are demonstrations, '' where none is; older exports lack it),
        `shown_swapped` (N,) bool (a person saw the pair right clip first; older exports lack it),
        `clip_steps` (N, 2) int, and the clips left0, right0, left1, ... concatenated:
        `frames` uint8 (sum(T + 3), 84, 84), `actions` int64 (sum T), `true_rewards` float32 (sum T),
        `dones` bool (sum T) with `clip_has_dones` (N, 2) bool saying which clips have them
        (older exports lack both: their clips import with `dones=None`).
        Frames are streamed into the archive one clip at a time, so memory stays small.
        """
        # a failed export leaves no half-written file at `path`
        with written_whole(path, ".partial") as partial:
            with self._transaction():  # one consistent snapshot even if a writer is busy meanwhile
                n = self._export(partial, labeller)
        return n

    @_db_errors_as_store_errors
    def label_rows(self, labeller: str | None = None) -> list[tuple]:
        """Every label (or `labeller`'s) without its clips, oldest first: (id, created, source,
        is_validation, mu, left_steps, right_steps, labeller, ensemble_p, demonstration,
        shown_swapped), None where an older store has no such column."""
        named = self._has_column("labeller")
        columns = "id, created, source, is_validation, mu, left_steps, right_steps"
        query = f"SELECT {self._selected(columns)} FROM labels"
        if labeller is None:
            return self._db.execute(f"{query} ORDER BY id").fetchall()
        return self._db.execute(f"{query} WHERE labeller = ? ORDER BY id",
                                (labeller,)).fetchall() if named else []

    def _export(self, path: Path, labeller: str | None) -> int:
        meta = self.label_rows(labeller)
        n = len(meta)
        ids = np.array([m[0] for m in meta], dtype=np.int64)
        steps = np.array([m[5:7] for m in meta], dtype=np.int64).reshape(n, 2)
        small = {
            "format_version": np.array(EXPORT_FORMAT_VERSION, dtype=np.int64),
            "ids": ids,
            "created": np.array([m[1] for m in meta], dtype=np.float64),
            "source": np.array([m[2] for m in meta], dtype="<U9"),
            "is_validation": np.array([m[3] for m in meta], dtype=bool),
            "mu": np.array([m[4] for m in meta], dtype=np.float64),
            "clip_steps": steps,
            # An optional array, so the format stays 2: code that predates it imports the file.
            "labeller": np.array([m[7] or "" for m in meta], dtype=str),
            "ensemble_p": np.array([np.nan if m[8] is None else m[8] for m in meta], np.float64),
            "demonstration": np.array([m[9] or "" for m in meta], dtype=str),
            "shown_swapped": np.array([bool(m[10]) for m in meta], dtype=bool),
        }
        n_steps = int(steps.sum())
        actions = np.empty(n_steps, np.int64)
        rewards = np.empty(n_steps, np.float32)
        dones = np.zeros(n_steps, bool)
        has_dones = np.zeros((n, 2), bool)
        frames_header = {"descr": np.lib.format.dtype_to_descr(np.dtype(np.uint8)), "fortran_order": False,
                         "shape": (n_steps + 2 * n * (STACK - 1), *FRAME_SHAPE)}
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, allowZip64=True) as zf:
            with zf.open("frames.npy", "w", force_zip64=True) as f:
                np.lib.format.write_array_header_1_0(f, frames_header)
                pos = 0
                for k, label_id in enumerate(ids):
                    left, right = self._db.execute(
                        "SELECT left_seg, right_seg FROM labels WHERE id = ?", (int(label_id),)).fetchone()
                    for side, blob in enumerate((left, right)):
                        clip = decode_clip(blob)
                        f.write(clip.frames().tobytes())
                        actions[pos:pos + len(clip)] = clip.actions
                        rewards[pos:pos + len(clip)] = clip.true_rewards
                        if clip.dones is not None:
                            dones[pos:pos + len(clip)] = clip.dones
                            has_dones[k, side] = True
                        pos += len(clip)
            small["actions"], small["true_rewards"] = actions, rewards
            small["dones"], small["clip_has_dones"] = dones, has_dones
            for name, arr in small.items():
                with zf.open(f"{name}.npy", "w", force_zip64=True) as f:
                    np.lib.format.write_array(f, arr, allow_pickle=False)
        return n

    @_db_errors_as_store_errors
    def import_npz(self, path: str | os.PathLike) -> int:
        """Add every label of a file written by `export_npz` (new ids, original times); returns the
        number added. A label the store holds already (the same time, source and clip
        lengths, whatever its answer: the file was imported before, or taken before an
        answer was changed) is not added again. All or nothing: a bad file raises StoreError
        and adds no label. Labellers come from the file's `labeller` array, the ensemble's
        answers from `ensemble_p` and the demonstration clips from `demonstration`; files
        without them (format 1, older format 2) give labels that name nobody, keep no
        ensemble answer, or mark no demonstration.
        """
        try:
            z = np.load(path, allow_pickle=False)
            if not hasattr(z, "files"):  # an .npy: one array, not an archive
                raise ValueError
        except (OSError, ValueError, EOFError, zipfile.BadZipFile):
            raise StoreError(f"{path} is not a label export (an .npz of --export)") from None
        try:
            with z:
                version = int(z["format_version"])
                if version not in (1, EXPORT_FORMAT_VERSION):
                    raise StoreError(f"{path}: label export format {version}, "
                                     f"expected at most {EXPORT_FORMAT_VERSION}")
                clip = "seg" if version == 1 else "clip"  # format 1 named a clip a segment
                small = {k: z[k] for k in ("created", "source", "is_validation", "mu", "actions",
                                           "true_rewards")}
                small["clip_steps"] = z[f"{clip}_steps"]
                has_dones = "dones" in z.files
                if has_dones:
                    small["dones"], small["clip_has_dones"] = z["dones"], z[f"{clip}_has_dones"]
                labellers = z["labeller"] if "labeller" in z.files else None
                ensemble_p = z["ensemble_p"] if "ensemble_p" in z.files else None
                demos = z["demonstration"] if "demonstration" in z.files else None
                swapped = z["shown_swapped"] if "shown_swapped" in z.files else None
            n = len(small["mu"])
            if labellers is not None and (labellers.dtype.kind != "U" or labellers.shape != (n,)):
                raise ValueError("labeller must be strings, one per label")
            if ensemble_p is not None and (ensemble_p.dtype.kind != "f" or ensemble_p.shape != (n,)):
                raise ValueError("ensemble_p must be floats, one per label")
            if demos is not None and (demos.dtype.kind != "U" or demos.shape != (n,)):
                raise ValueError("demonstration must be strings, one per label")
            if swapped is not None and (swapped.dtype != bool or swapped.shape != (n,)):
                raise ValueError("shown_swapped must be booleans, one per label")
            if small["clip_steps"].dtype.kind not in "iu":
                raise ValueError("clip_steps must be integers")
            steps = small["clip_steps"].astype(np.int64).reshape(n, 2)
            if any(len(small[k]) != n for k in ("created", "source", "is_validation")):
                raise ValueError("per-label arrays differ in length")
            if (steps.size and steps.min() < 1) or len(small["actions"]) != steps.sum():
                raise ValueError("clip lengths do not match the actions")
            if has_dones:
                if small["dones"].dtype != bool or len(small["dones"]) != steps.sum():
                    raise ValueError("dones must be booleans, one per step")
                clip_has_dones = small["clip_has_dones"].astype(bool).reshape(n, 2)
            with zipfile.ZipFile(path) as zf, zf.open("frames.npy") as f, self._transaction(immediate=True):
                shape = _read_npy_header(f)
                if shape != (int(steps.sum()) + 2 * n * (STACK - 1), *FRAME_SHAPE):
                    raise ValueError(f"frames have shape {shape}")
                frame_bytes = FRAME_SHAPE[0] * FRAME_SHAPE[1]
                held = set(self._db.execute(
                    "SELECT created, source, left_steps, right_steps FROM labels"))
                pos, added = 0, 0
                for k in range(n):
                    clips = []
                    for side, t in enumerate(steps[k]):
                        frames = np.frombuffer(_read_exact(f, (t + STACK - 1) * frame_bytes), np.uint8)
                        dones = small["dones"][pos:pos + t] if has_dones and clip_has_dones[k, side] else None
                        clips.append(Clip.pack(frames.reshape(-1, *FRAME_SHAPE),
                                               small["actions"][pos:pos + t],
                                            small["true_rewards"][pos:pos + t], dones))
                        pos += t
                    name = str(labellers[k]) if labellers is not None else ""
                    p_left = float(ensemble_p[k]) if ensemble_p is not None else math.nan
                    pref = Preference(clips[0], clips[1], float(small["mu"][k]),
                                      str(small["source"][k]), bool(small["is_validation"][k]),
                                      labeller=name or None,
                                      ensemble_p=None if math.isnan(p_left) or not name else p_left,
                                      demonstration=(str(demos[k]) or None) if demos is not None else None,
                                      shown_swapped=True if swapped is not None and swapped[k] else None)
                    # No labeller and no answer in the key: a label's creation time alone tells
                    # labels apart, so an export of older code (no names) of labels held here
                    # named, or one taken before an answer was changed, adds nothing.
                    key = (float(small["created"][k]), pref.source, *map(int, steps[k]))
                    if key not in held:
                        self._insert(pref, key[0])
                        added += 1
        except StoreError:
            raise
        except (OSError, KeyError, IndexError, TypeError, ValueError, AssertionError, EOFError,
                zipfile.BadZipFile) as e:
            raise StoreError(f"{path} is not a readable label export: {e}") from None
        return added

    # ---- lifetime -----------------------------------------------------------------------------

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> "PreferenceStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _check_mu(mu: float) -> None:
    if not 0.0 <= float(mu) <= 1.0:
        raise ValueError(f"mu must be a probability, got {mu}")


def _check_label(mu: float, source: str, labeller: str | None = None,
                 ensemble_p: float | None = None, demonstration: str | None = None) -> None:
    _check_mu(mu)
    if source not in SOURCES:
        raise ValueError(f"source must be one of {SOURCES}, got {source!r}")
    if labeller is not None and (not isinstance(labeller, str) or not labeller.strip()):
        raise ValueError(f"a labeller is a person's name (or None), got {labeller!r}")
    if ensemble_p is not None and (labeller is None or not 0.0 <= ensemble_p <= 1.0):
        raise ValueError(f"the ensemble's P[left better] is kept for a named person's label, "
                         f"in [0, 1]; got {ensemble_p!r} for labeller {labeller!r}")
    if demonstration is not None and demonstration not in DEMONSTRATION_SIDES:
        raise ValueError(f"demonstration must be one of {DEMONSTRATION_SIDES} (or None), "
                         f"got {demonstration!r}")


def _optional_values(pref: Preference) -> dict[str, object]:
    """The optional columns a label has values for (`_OPTIONAL_COLUMNS`, named as its fields;
    `shown_swapped` only where it is true)."""
    values = {c: getattr(pref, c) for c in _OPTIONAL_COLUMNS}
    values["shown_swapped"] = 1 if values["shown_swapped"] else None
    return {c: float(v) if c == "ensemble_p" else v for c, v in values.items() if v is not None}


def _read_npy_header(f: io.BufferedIOBase) -> tuple[int, ...]:
    """Parse a uint8, C-ordered `.npy` header from a stream; returns the shape."""
    major, _ = np.lib.format.read_magic(f)
    read = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
    shape, fortran, dtype = read(f)
    if dtype != np.uint8 or fortran:
        raise ValueError(f"frames must be C-ordered uint8, got {dtype} fortran={fortran}")
    return tuple(shape)


def _read_exact(f: io.BufferedIOBase, n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = f.read(left)
        if not chunk:
            raise EOFError(f"archive ended {left} bytes early")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def stored_labels(path: str | Path) -> int:
    """How many labels the store at `path` holds (0 when there is none yet)."""
    if not Path(path).is_file():
        return 0
    with PreferenceStore(str(path), create=False) as store:
        return len(store)
