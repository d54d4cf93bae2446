"""The preference store: no label is lost, whatever happens to the process that made it."""
from __future__ import annotations

import io
import signal
import sqlite3
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

from clips.clip import Clip, Preference
from pref_interface.store import (
    SCHEMA_VERSION,
    PreferenceStore,
    StoreError,
    decode_clip,
    encode_clip,
)
from tests.helpers import clip_from_stacks, random_clip, reward_clip

REPO = Path(__file__).resolve().parents[1]


def six_action_clip(rng: np.random.Generator, steps: int = 3) -> Clip:
    return random_clip(rng, steps, n_actions=6)


def random_pref(rng: np.random.Generator, steps: int = 3) -> Preference:
    left, right = six_action_clip(rng, steps), six_action_clip(rng, steps + 1)
    mu, source = float(rng.choice([0.0, 0.5, 1.0])), str(rng.choice(["synthetic", "human"]))
    return Preference(left, right, mu, source, bool(rng.random() < 0.5),
                      labeller="ann" if source == "human" else None)


def assert_same_pref(a: Preference, b: Preference) -> None:
    assert (a.mu, a.source, a.is_validation, a.labeller) == (b.mu, b.source, b.is_validation, b.labeller)
    for x, y in ((a.left, b.left), (a.right, b.right)):
        for got, want in ((x.frames(), y.frames()), (x.actions, y.actions),
                          (x.true_rewards, y.true_rewards)):
            assert got.dtype == want.dtype and np.array_equal(got, want)


def test_store_round_trip_keeps_every_label_exactly(tmp_path):
    rng = np.random.default_rng(0)
    prefs = [random_pref(rng, steps) for steps in (1, 3, 25, 2)]
    path = tmp_path / "run" / "prefs.sqlite"  # the folder is made too
    with PreferenceStore(path) as store:
        ids = [store.add(p) for p in prefs]
        assert ids == sorted(ids) and store.all_ids() == ids and len(store) == 4
        for i, p in zip(ids, prefs):
            assert_same_pref(store.get(i), p)
        for got, want in zip(store.latest(2), prefs[2:]):  # the newest two, oldest first
            assert_same_pref(got, want)
        assert len(store.latest(100)) == 4 and store.latest(0) == []

        store.set_mu(ids[0], 0.5)
        assert store.ever_stored() == 4
        store.delete(ids[1])
        assert store.ever_stored() == 4 and len(store) == 3  # a deleted label still counts
        with pytest.raises(KeyError):
            store.get(ids[1])
        with pytest.raises(KeyError):
            store.delete(ids[1])
        with pytest.raises(KeyError):
            store.set_mu(12345, 1.0)
        with pytest.raises(ValueError):
            store.set_mu(ids[0], 1.5)
        with pytest.raises(ValueError):
            store.add(Preference(prefs[0].left, prefs[0].right, 0.0, source="crowd"))

    with PreferenceStore(path, create=False) as store:  # persisted
        assert store.all_ids() == [ids[0], ids[2], ids[3]]
        assert store.get(ids[0]).mu == 0.5
        assert store.integrity_check() == "ok"
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    db.close()


# Runs in a child process: adds labels as fast as it can and reports each id once add() returned.
_WRITER = """
import sys
import numpy as np
from clips.clip import Preference, Clip
from pref_interface.store import PreferenceStore
import io
import math
import zipfile
import numpy as np
import pytest
import torch
from torch import nn
from clips.cutter import ClipCutter
from pref_interface.queries.pairs import OVERSAMPLE, ClipBuffer, select_pairs
from pref_interface.queries.schedule import LabelSchedule
from clips.clip import Preference, Clip
from pref_interface.queries.selection import disagreement_score, make_pair_scorer
from pref_interface.store import PreferenceStore, decode_clip, encode_clip
from tests.helpers import clip_from_stacks, reward_clip
from pref_interface.labellers.teachers import (BoltzmannTeacher, EqualTeacher, Labeller, MistakeTeacher,
                                     MyopicTeacher, OracleTeacher, SkipTeacher, make_teacher,
                                     teacher_return)
from reward_predictor import MovingDotRewardNet, RewardPredictorEnsemble, RewardPredictorTrainer
from reward_predictor.regularisation import INITIAL_ADAPTIVE_L2, MIN_L2, adapt_l2
rng = np.random.default_rng(int(sys.argv[2]))
store = PreferenceStore(sys.argv[1])
while True:
    steps = int(rng.integers(1, 26))
    clips = [Clip.pack(rng.integers(0, 256, (steps + 3, 84, 84), dtype=np.uint8), np.zeros(steps, np.int64),
                    np.zeros(steps, np.float32)) for _ in range(2)]
    print(store.add(Preference(clips[0], clips[1], 1.0)), flush=True)
"""


def test_store_keeps_every_label_committed_before_a_kill(tmp_path):
    path = tmp_path / "prefs.sqlite"
    rng = np.random.default_rng()
    acknowledged: list[int] = []
    for round_ in range(3):  # killed three times over, each time at a random instant
        child = subprocess.Popen([sys.executable, "-c", _WRITER, str(path), str(round_)], cwd=REPO,
                                 stdout=subprocess.PIPE, text=True)
        first = child.stdout.readline()  # the store is open and writing
        time.sleep(rng.uniform(0.0, 0.25))
        child.send_signal(signal.SIGKILL)
        rest = child.stdout.read()
        child.wait()
        assert child.returncode == -signal.SIGKILL
        acknowledged += [int(line) for line in (first + rest).split()]
        with PreferenceStore(path, create=False) as store:
            assert store.integrity_check() == "ok"
            stored = set(store.all_ids())
            assert set(acknowledged) <= stored, sorted(set(acknowledged) - stored)
            assert len(stored) <= len(acknowledged) + round_ + 1  # at most one unacknowledged per kill
            last = store.get(acknowledged[-1])
            assert last.mu == 1.0 and last.left.frames().shape[1:] == (84, 84)
    assert len(acknowledged) > 3


def test_exported_labels_import_into_another_store_unchanged(tmp_path):
    rng = np.random.default_rng(1)
    prefs = [random_pref(rng, steps) for steps in (1, 5, 25)]
    with PreferenceStore(tmp_path / "a.sqlite") as a:
        for p in prefs:
            a.add(p)
        assert a.export_npz(tmp_path / "labels.npz") == 3
    with np.load(tmp_path / "labels.npz", allow_pickle=False) as z:  # a plain npz, no pickles
        assert z["frames"].shape == (sum(len(s) + 3 for p in prefs for s in (p.left, p.right)), 84, 84)
        assert list(z["mu"]) == [p.mu for p in prefs]
    with PreferenceStore(tmp_path / "b.sqlite") as b:
        b.add(prefs[0])
        assert b.import_npz(tmp_path / "labels.npz") == 3
        got = b.latest(3)
        assert len(b) == 4
    for g, p in zip(got, prefs):
        assert_same_pref(g, p)
    with PreferenceStore(tmp_path / "empty.sqlite") as e:  # an empty set round-trips too
        assert e.export_npz(tmp_path / "none.npz") == 0
        assert e.import_npz(tmp_path / "none.npz") == 0


def test_a_pair_a_person_saw_swapped_is_kept_so_through_the_store_and_a_shared_set(tmp_path):
    """Sorting shows the clip it places on either side; the store keeps the label's order and
    whether the person saw it swapped, so that their edits read as they saw the pair."""
    rng = np.random.default_rng(2)
    plain, seen_swapped = random_pref(rng, 3), random_pref(rng, 3)
    with PreferenceStore(tmp_path / "a.sqlite") as a:
        first = a.add(plain)
        assert a.shown_swapped([first]) == set()  # a store that never saw one: no column yet
        second = a.add(Preference(seen_swapped.left, seen_swapped.right, 1.0, "human",
                                  shown_swapped=True))
        assert a.shown_swapped([first, second, 99]) == {second}
        assert a.get(second).shown_swapped is True and a.get(first).shown_swapped is None
        a.set_mu(second, 0.0)  # an edit keeps it
        assert a.shown_swapped([second]) == {second}
        assert a.export_npz(tmp_path / "labels.npz") == 2
    with PreferenceStore(tmp_path / "b.sqlite") as b:
        assert b.import_npz(tmp_path / "labels.npz") == 2
        assert [p.shown_swapped for p in b.latest(2)] == [None, True]


def test_an_export_taken_before_an_answer_changed_adds_nothing_back(tmp_path):
    rng = np.random.default_rng(3)
    with PreferenceStore(tmp_path / "a.sqlite") as a:
        ids = [a.add(random_pref(rng, 5)) for _ in range(3)]
        a.export_npz(tmp_path / "before.npz")
        mu = a.get(ids[0]).mu
        a.set_mu(ids[0], 1.0 - mu if mu != 0.5 else 1.0)
        changed = a.get(ids[0]).mu
        assert a.import_npz(tmp_path / "before.npz") == 0  # the same labels: none contradicts
        assert len(a) == 3 and a.get(ids[0]).mu == changed


def test_bad_export_file_adds_no_label(tmp_path):
    rng = np.random.default_rng(2)
    with PreferenceStore(tmp_path / "a.sqlite") as a:
        for _ in range(3):
            a.add(random_pref(rng, 25))
        a.export_npz(tmp_path / "labels.npz")
    data = (tmp_path / "labels.npz").read_bytes()
    (tmp_path / "cut.npz").write_bytes(data[: len(data) // 2])
    np.savez(tmp_path / "pickled.npz", format_version=np.array(1), mu=np.array([print], dtype=object))
    (tmp_path / "text.npz").write_text("not an archive")
    with PreferenceStore(tmp_path / "b.sqlite") as b:
        for bad in ("cut.npz", "pickled.npz", "text.npz"):  # an npz's objects are never unpickled
            with pytest.raises(StoreError, match=bad):
                b.import_npz(tmp_path / bad)
        assert len(b) == 0
        with pytest.raises(StoreError, match="not a label export"):
            b.import_npz(tmp_path / "text.npz")
        # The same file imported twice: its labels once.
        assert b.import_npz(tmp_path / "labels.npz") == 3
        assert b.import_npz(tmp_path / "labels.npz") == 0 and len(b) == 3


def test_missing_or_corrupt_store_raises_store_error_naming_the_file(tmp_path):
    missing = tmp_path / "nope.sqlite"
    with pytest.raises(StoreError, match="nope.sqlite") as err:
        PreferenceStore(missing, create=False)
    assert "\n" not in str(err.value) and not missing.exists()

    garbage = tmp_path / "garbage.sqlite"
    garbage.write_bytes(np.random.default_rng(0).integers(0, 256, 10_000, dtype=np.uint8).tobytes())
    with pytest.raises(StoreError, match="garbage.sqlite") as err:
        PreferenceStore(garbage)
    assert "\n" not in str(err.value)

    other = tmp_path / "other.sqlite"  # an SQLite file of something else
    db = sqlite3.connect(other)
    db.execute("CREATE TABLE t (x)")
    db.commit()
    db.close()
    with pytest.raises(StoreError, match="other.sqlite"):
        PreferenceStore(other)

    with PreferenceStore(tmp_path / "cut.sqlite") as store:  # a store truncated mid-file
        for _ in range(5):
            store.add(random_pref(np.random.default_rng(3), 25))
    data = (tmp_path / "cut.sqlite").read_bytes()
    for size in (4096 * 3, len(data) // 2):
        (tmp_path / "cut.sqlite").write_bytes(data[:size])
        with pytest.raises(StoreError, match="cut.sqlite"):
            store = PreferenceStore(tmp_path / "cut.sqlite", create=False)
            store.latest(5)  # a truncated file may only show when its pages are read


def test_atari_clips_compress_to_a_few_kilobytes():
    """The earlier reproduction kept ~700 KB per clip in memory; a stored 25-step Pong clip
    (28 distinct 84x84 frames, 197,568 bytes raw) takes a few KB."""
    from ale_py.vector_env import AtariVectorEnv

    env = AtariVectorEnv("pong", 1, num_threads=1, reward_clipping=False)
    obs, _ = env.reset(seed=0)
    stacks = []
    for _ in range(125):
        stacks.append(obs[0].copy())
        obs, *_ = env.step(np.random.default_rng(0).integers(0, 6, size=1))
    env.close()
    clip = clip_from_stacks(np.array(stacks[100:125]), np.zeros(25, np.int64),
                              np.zeros(25, np.float32))
    blob = encode_clip(clip)
    assert np.array_equal(decode_clip(blob).stacks(), np.array(stacks[100:125]))
    assert len(blob) < 10_000, len(blob)


# ---- episode ends ------------------------------------------------------------------------

def test_store_keeps_episode_ends_and_reads_older_clips(tmp_path):
    with_ends = reward_clip([1.0, 2.0], dones=[False, True], value=7)
    without = reward_clip([3.0, 4.0], value=9)
    assert decode_clip(encode_clip(with_ends)).dones.tolist() == [False, True]
    assert decode_clip(encode_clip(without)).dones is None
    buf = io.BytesIO()  # a blob written before clips had `dones`
    np.savez_compressed(buf, frames=with_ends.frames(), actions=with_ends.actions,
                        true_rewards=with_ends.true_rewards)
    assert decode_clip(buf.getvalue()).dones is None

    with PreferenceStore(tmp_path / "a.db") as store:
        store.add(Preference(with_ends, without, 1.0))
        store.add(Preference(without, with_ends, 0.0))
        assert store.get(1).left.dones.tolist() == [False, True] and store.get(1).right.dones is None
        store.export_npz(tmp_path / "labels.npz")
    with PreferenceStore(tmp_path / "b.db") as store:
        store.import_npz(tmp_path / "labels.npz")
        p = store.latest(2)
        assert p[0].left.dones.tolist() == [False, True] and p[0].right.dones is None
        assert p[1].left.dones is None and p[1].right.dones.tolist() == [False, True]
    # An export written before `dones` existed imports with dones=None.
    with zipfile.ZipFile(tmp_path / "labels.npz") as src, \
            zipfile.ZipFile(tmp_path / "old.npz", "w") as dst:
        for name in src.namelist():
            if name not in ("dones.npy", "clip_has_dones.npy"):
                dst.writestr(name, src.read(name))
    with PreferenceStore(tmp_path / "c.db") as store:
        assert store.import_npz(tmp_path / "old.npz") == 2
        assert all(s.dones is None for p in store.latest(2) for s in (p.left, p.right))


def test_an_export_of_the_first_format_imports_unchanged(tmp_path):
    """tests/fixtures/labels_export_v1.npz: three labels exported by code of the first export
    format, which named a clip a segment (`seg_steps`, `seg_has_dones`); today's store imports
    them, and exports them again as they were."""
    fixture = Path(__file__).resolve().parent / "fixtures" / "labels_export_v1.npz"
    with PreferenceStore(tmp_path / "a.db") as store:
        assert store.import_npz(fixture) == 3 and store.import_npz(fixture) == 0
        store.export_npz(tmp_path / "again.npz")
        labels = store.latest(3)
    assert [(p.mu, p.source, p.is_validation) for p in labels] == [
        (1.0, "human", False), (0.5, "synthetic", True), (0.0, "human", False)]
    assert labels[0].left.dones.tolist() == [False, False, True] and labels[0].right.dones is None
    assert labels[2].right.true_rewards.tolist() == [0.0, 0.0, 0.0, 1.0]
    old, new = np.load(fixture), np.load(tmp_path / "again.npz")
    assert int(new["format_version"]) == 2 and "seg_steps" not in new.files
    for name in ("created", "source", "is_validation", "mu", "actions", "true_rewards", "dones",
                 "frames"):
        assert np.array_equal(old[name], new[name]), name
    assert np.array_equal(old["seg_steps"], new["clip_steps"])
    assert np.array_equal(old["seg_has_dones"], new["clip_has_dones"])
