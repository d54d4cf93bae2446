"""Who gave each label: stored, shared and paged through, in stores old code still reads and writes."""
from __future__ import annotations

import json
import re
import shutil
import sqlite3
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from clips.clip import Preference
from pref_interface.store import SCHEMA_VERSION, PreferenceStore
from tests.helpers import reward_clip

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
# The store as code wrote it before labels named their labeller: the first version that reads
# today's packed clips (earlier code reads only clips of its own form), and the last.
OLD_STORE_COMMITS = ("10f39b3", "1e90ae1")


def pref(value: int, mu: float = 1.0, labeller: str | None = None, source: str = "human",
         ensemble_p: float | None = None) -> Preference:
    return Preference(reward_clip([float(value)] * 2, value=value), reward_clip([0.0] * 3, value=value + 1),
                      mu, source, labeller=labeller, ensemble_p=ensemble_p)


def columns(path: Path) -> list[str]:
    db = sqlite3.connect(path)
    try:
        return [r[1] for r in db.execute("PRAGMA table_info(labels)")]
    finally:
        db.close()


def user_version(path: Path) -> int:
    db = sqlite3.connect(path)
    try:
        return db.execute("PRAGMA user_version").fetchone()[0]
    finally:
        db.close()


def old_code(commit: str, into: Path) -> Path:
    """The store module of `commit` and the module it takes its label types from (kept as text
    in tests/fixtures/store_code_COMMIT, from `git show`), as a package folder of their own."""
    kept = FIXTURES / f"store_code_{commit}"
    store = (kept / "store.py.txt").read_text()
    types = re.search(r"^from (\w+)\.(\w+) import .*Preference", store, re.M)
    assert types, "the old store imports its label types"
    for package, module, text in (
            ("pref_interface", "store", store),
            (types[1], types[2], (kept / f"{types[1]}_{types[2]}.py.txt").read_text())):
        (into / package).mkdir(parents=True, exist_ok=True)
        (into / package / "__init__.py").write_text("")
        (into / package / f"{module}.py").write_text(text)
    return into


# Runs the old store module on a store: waits for a line on stdin (so that the store can change
# under an open connection), then reads every label, adds one, exports and imports.
_OLD_CODE_RUN = """
import json, sys
sys.path.insert(0, sys.argv[1])
import pref_interface.store as old
assert old.__file__.startswith(sys.argv[1]), old.__file__
from pref_interface.store import PreferenceStore
store = PreferenceStore(sys.argv[2], create=False)
print("open", flush=True)
sys.stdin.readline()
ids = store.all_ids()
got = [store.get(i) for i in ids]
first = got[0]
new_id = store.add(type(first)(first.left, first.right, 0.5, "human"))
store.set_mu(new_id, 0.0)
exported = store.export_npz(sys.argv[3])
print(json.dumps({"ids": ids, "mus": [p.mu for p in got], "latest": len(store.latest(1000)),
                  "new_id": new_id, "exported": exported, "n": len(store),
                  "check": store.integrity_check()}), flush=True)
"""


@pytest.mark.parametrize("commit", OLD_STORE_COMMITS)
def test_an_old_store_takes_named_labels_and_old_code_still_reads_and_writes_it(tmp_path, commit):
    path = tmp_path / "prefs.sqlite"
    shutil.copy(FIXTURES / "run_29d3a96" / "prefs.sqlite", path)  # 21 labels, no labeller column
    with PreferenceStore(path) as store:
        assert set(store.labellers()) == {None} and store.get(1).labeller is None
        store.add(pref(1))  # an unnamed label leaves the schema as it was
        assert "labeller" not in columns(path) and store.labeller_ids("ann") == []
    before = len(columns(path))

    # A run of old code has the store open while today's code names a first labeller.
    child = subprocess.Popen([sys.executable, "-c", _OLD_CODE_RUN, str(old_code(commit, tmp_path / "old")),
                              str(path), str(tmp_path / "old_export.npz")], cwd=tmp_path,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert child.stdout.readline() == "open\n", child.stderr.read()
    with PreferenceStore(path) as store:  # with the ensemble's answer kept beside hers
        named = store.add(pref(2, 0.0, "ann", ensemble_p=0.8))
    assert columns(path)[before:] == ["labeller", "ensemble_p"]
    assert user_version(path) == SCHEMA_VERSION
    out, err = child.communicate("go\n", timeout=60)
    assert child.returncode == 0, err
    seen = json.loads(out)
    assert seen["check"] == "ok" and seen["n"] == seen["latest"] == 24 and named in seen["ids"]
    assert seen["exported"] == 24

    with PreferenceStore(path, create=False) as store:  # today's code reads what old code wrote
        assert store.get(named).labeller == "ann" and store.get(seen["new_id"]).labeller is None
        assert store.get(named).ensemble_p == 0.8 and store.get(seen["new_id"]).ensemble_p is None
        assert store.get(seen["new_id"]).mu == 0.0
        assert store.labellers() == {None: 23, "ann": 1} and store.labeller_ids("ann") == [named]
        assert [p.labeller for p in store.latest(3)] == [None, "ann", None]
        store.add(pref(3, 1.0, "bob"))
    with PreferenceStore(tmp_path / "b.sqlite") as other:  # old code's export imports unnamed
        assert other.import_npz(tmp_path / "old_export.npz") == 24
        assert other.labellers() == {None: 24}


def test_two_stores_naming_a_first_labeller_add_the_column_once(tmp_path):
    path = tmp_path / "prefs.sqlite"
    shutil.copy(FIXTURES / "run_29d3a96" / "prefs.sqlite", path)
    with PreferenceStore(path) as a, PreferenceStore(path) as b:
        assert a.labellers() == b.labellers() == {None: 21}  # both saw no column
        a.add(pref(1, labeller="ann"))
        b.add(pref(2, labeller="bob"))  # looks again under the write lock
        assert b.get(22).labeller == "ann" and a.get(23).labeller == "bob"
        with pytest.raises(ValueError):
            a.add(pref(3, labeller=" "))
        # a saw no ensemble_p column before b added it: it looks again under the write lock
        # instead of adding it a second time (which SQLite refuses, losing the label)
        assert not a._has_column("ensemble_p")
        b.add(pref(4, labeller="bob", ensemble_p=0.3))
        real, asked = a._has_column, []

        def stale_first(column: str) -> bool:
            asked.append(column)
            if column == "ensemble_p" and asked.count(column) == 1:
                return False  # what a knew before b added the column
            return real(column)

        a._has_column = stale_first
        a.add(pref(5, labeller="ann", ensemble_p=0.6))
        assert asked.count("ensemble_p") == 2  # before the lock, then under it
        assert a.get(24).ensemble_p == 0.3 and b.get(25).ensemble_p == 0.6
        with pytest.raises(ValueError):
            a.add(pref(6, labeller="ann", ensemble_p=1.5))
        with pytest.raises(ValueError):  # kept for a named person's label only
            a.add(pref(6, ensemble_p=0.5))
    assert columns(path).count("labeller") == columns(path).count("ensemble_p") == 1


def test_exports_keep_labellers_and_older_exports_import_unnamed(tmp_path):
    with PreferenceStore(tmp_path / "a.sqlite") as a:
        for k, who in enumerate(("ann", None, "bob", "ann")):
            a.add(pref(k, labeller=who, source="synthetic" if who is None else "human"))
        assert a.labellers() == {"ann": 2, None: 1, "bob": 1}
        assert a.export_npz(tmp_path / "all.npz") == 4
        assert a.export_npz(tmp_path / "ann.npz", labeller="ann") == 2
        assert a.export_npz(tmp_path / "nobody.npz", labeller="carl") == 0
    with np.load(tmp_path / "all.npz", allow_pickle=False) as z:
        assert z["labeller"].tolist() == ["ann", "", "bob", "ann"] and int(z["format_version"]) == 2
        assert np.isnan(z["ensemble_p"]).all()  # no ensemble answer kept
    with PreferenceStore(tmp_path / "b.sqlite") as b:
        assert b.import_npz(tmp_path / "ann.npz") == 2 and b.labellers() == {"ann": 2}
        assert [p.left.true_rewards[0] for p in b.latest(2)] == [0.0, 3.0]
        assert b.import_npz(tmp_path / "all.npz") == 2  # only the two it lacked
        assert [p.labeller for p in b.latest(4)] == ["ann", "ann", None, "bob"]
    # An export without names (format 2 before them) adds nothing named labels hold already.
    with zipfile.ZipFile(tmp_path / "all.npz") as src, zipfile.ZipFile(tmp_path / "unnamed.npz", "w") as dst:
        for name in src.namelist():
            if name != "labeller.npy":
                dst.writestr(name, src.read(name))
    with PreferenceStore(tmp_path / "b.sqlite") as b:
        assert b.import_npz(tmp_path / "unnamed.npz") == 0
    with PreferenceStore(tmp_path / "c.sqlite") as c:
        assert c.import_npz(tmp_path / "unnamed.npz") == 4 and c.labellers() == {None: 4}
        assert c.import_npz(FIXTURES / "labels_export_v1.npz") == 3
        assert [p.labeller for p in c.latest(3)] == [None] * 3 and "labeller" not in columns(c.path)


def show_prefs(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "show_prefs.py", *args], cwd=ROOT, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=60)


def test_show_prefs_lists_filters_and_exports_by_labeller(tmp_path):
    from show_prefs import Browser

    store_file = tmp_path / "prefs.sqlite"
    with PreferenceStore(store_file) as store:
        for k, who in enumerate(("ann", "bob", None, "ann")):
            store.add(pref(k, mu=0.5 if who is None else 1.0, labeller=who))
        browser = Browser(store, "terminal", None, "ann")  # type: ignore[arg-type]
        try:
            assert browser.ids == [1, 4]
            head = "\n".join(browser.status(4, store.get(4))[:2])
            assert "by ann" in head and head.startswith("label 1/2")
            assert "no labeller recorded" in browser.status(3, store.get(3))[1]
            assert all(len(line) <= 80 for line in browser.status(3, store.get(3)))
        finally:
            browser.player.close("")

    r = show_prefs(str(tmp_path), "--list")
    assert r.returncode == 0, r
    assert r.stdout.splitlines() == [
        f"4 labels in {store_file}: ann 2, bob 1, 1 naming no labeller",
        "answers: left better 3 (75.0%), equally good 1 (25.0%)"]  # how much the labels say
    r = show_prefs(str(tmp_path), "--table", "--labeller", "ann")  # one line a label, oldest first
    lines = r.stdout.splitlines()
    assert r.returncode == 0 and lines[0].split() == ["id", "when", "(UTC)", "answer", "labeller",
                                                      "source", "split", "demonstration"], r
    assert [line.split()[0] for line in lines[1:]] == ["1", "4"]
    assert all(" ann " in line and line.split()[-2:-1] in (["training"], ["validation"])
               for line in lines[1:])
    r = show_prefs(str(tmp_path), "--labeller", "carl")
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r
    assert "'carl'" in r.stderr and "ann 2, bob 1, 1 naming no labeller" in r.stderr
    r = show_prefs(str(tmp_path), "--labeller", "carl", "--export", str(tmp_path / "out" / "c.npz"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and not (tmp_path / "out").exists(), r
    for other in (["--list"], ["--import", str(tmp_path / "bob.npz"), "--export",
                               str(tmp_path / "again.npz")]):  # nothing written either
        r = show_prefs(str(tmp_path), "--labeller", "bob", *other)
        assert r.returncode == 2 and "--labeller applies to browsing, --table and --export" in r.stderr
    r = show_prefs(str(tmp_path), "--labeller", "bob", "--export", str(tmp_path / "bob.npz"))
    assert r.returncode == 0 and "exported 1 labels by bob" in r.stdout, r
    with np.load(tmp_path / "bob.npz", allow_pickle=False) as z:
        assert z["labeller"].tolist() == ["bob"]


def test_the_ensembles_answer_kept_with_a_label_is_exported_and_imported(tmp_path):
    with PreferenceStore(tmp_path / "a.sqlite") as a:
        a.add(pref(0, labeller="ann", ensemble_p=0.25))
        a.add(pref(1, labeller="bob"))
        a.export_npz(tmp_path / "x.npz")
    with PreferenceStore(tmp_path / "b.sqlite") as b:
        assert b.import_npz(tmp_path / "x.npz") == 2
        assert [(p.labeller, p.ensemble_p) for p in b.latest(2)] == [("ann", 0.25), ("bob", None)]


def test_the_browser_goes_on_when_a_label_is_deleted_elsewhere(tmp_path, capsys):
    """A running run's page (or another show_prefs.py) may delete the label shown: the browser
    says so and shows the labels left, instead of failing."""
    import queue

    from show_prefs import Browser

    class Keys:
        """Each key in turn, after doing what comes with it (a deletion elsewhere)."""

        def __init__(self, steps):
            self.steps = list(steps)

        def get(self, timeout=None):
            if not self.steps:
                raise queue.Empty
            key, meanwhile = self.steps.pop(0)
            if meanwhile is not None:
                meanwhile()
            return key

    with PreferenceStore(tmp_path / "prefs.sqlite") as store:
        for k in range(4):
            store.add(pref(k))
        keys = Keys([("L", lambda: store.delete(2)),  # label 2 shown, deleted as answered
                     ("d", None),  # label 3 shown, asked to delete it...
                     ("d", lambda: store.delete(3)),  # ...which another deleted first
                     ("R", lambda: store.delete(4))])  # label 4, deleted as answered: none left
        browser = Browser(store, "terminal", keys, None)  # type: ignore[arg-type]
        store.delete(1)  # before it is shown
        try:
            browser.run()
        finally:
            browser.player.close("")
        assert browser.ids == [] and len(store) == 0
        assert browser.message == "id 4 was deleted meanwhile"
