"""Sorting clips by comparisons: balanced insertions, classes, eviction, one query per
comparison, and the order rebuilt from the stored labels after a resume."""
from __future__ import annotations

from typing import Callable

import numpy as np
import pytest

from clips.clip import Clip, Preference
from pref_interface.queries.sorting import ClipSorter, rebuild_sorters
from pref_interface.store import PreferenceStore

SEEDS = range(5)
Teacher = Callable[[Clip, Clip], "float | None"]


def make_clip(i: int, ret: float) -> Clip:
    """A one-step clip with true return `ret`; `i` in its action makes its key unique."""
    return Clip.pack(np.zeros((4, 84, 84), np.uint8), np.array([i], np.int64),
                     np.array([ret], np.float32))


def exact(new: Clip, old: Clip) -> float:
    """The oracle: 1.0 if the new (left) clip's true return is higher, 0.5 if equal."""
    a, b = new.true_return, old.true_return
    return 1.0 if a > b else 0.0 if a < b else 0.5


def drive(sorter: ClipSorter, teacher: Teacher, labels: list[Preference] | None = None,
          split: bool = False) -> list[tuple[int, int, int]]:
    """Answer every query, storing answered ones as labels (new clip left, as the loop would);
    returns (new id, comparisons asked for it, n_classes when its insertion began)."""
    asked: list[tuple[int, int, int]] = []
    while (q := sorter.next_query()) is not None:
        new_id, new, _, old = q
        if not asked or asked[-1][0] != new_id:
            asked.append((new_id, 0, sorter.n_classes))
        asked[-1] = (new_id, asked[-1][1] + 1, asked[-1][2])
        mu = teacher(new, old)
        if mu is not None and labels is not None:
            labels.append(Preference(new, old, mu, is_validation=split))
        sorter.answer(mu)
    return asked


def insert_all(sorter: ClipSorter, clips: list[Clip], teacher: Teacher = exact,
               labels: list[Preference] | None = None, split: bool = False, first_id: int = 0
               ) -> list[tuple[int, int, int]]:
    """Offer and insert the clips one at a time."""
    asked = []
    for i, clip in enumerate(clips, first_id):
        sorter.offer(i, clip)
        asked += drive(sorter, teacher, labels, split)
    return asked


def key_order(sorter: ClipSorter) -> list[list[bytes]]:
    return [[sorter.clip(i).key for i in c] for c in sorter.classes()]


def test_bad_settings_raise_one_line_errors():
    for bad in (lambda: ClipSorter(1), lambda: ClipSorter(5, max_waiting=0)):
        with pytest.raises(ValueError, match=r"^[^\n]+$"):
            bad()
    s = ClipSorter(5)
    with pytest.raises(ValueError, match="next_query"):
        s.answer(1.0)  # nothing asked
    s.offer(0, make_clip(0, 0.0))
    s.offer(1, make_clip(1, 1.0))
    with pytest.raises(ValueError, match="next_query"):
        s.answer(1.0)  # a clip waits but no query was asked
    s.next_query()
    for mu in (0.3, 2.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="mu must be"):
            s.answer(mu)
    s.answer(1.0)
    with pytest.raises(ValueError, match="next_query"):
        s.answer(1.0)  # answered already
    with pytest.raises(ValueError, match="already offered"):
        s.offer(1, make_clip(1, 1.0))


@pytest.mark.parametrize("seed", SEEDS)
def test_insertions_stay_within_the_balanced_bound(seed):
    rng = np.random.default_rng(seed)
    s = ClipSorter(1000)
    asked = insert_all(s, [make_clip(i, r) for i, r in enumerate(rng.permutation(100))])
    assert len(asked) == 99  # every clip but the first was compared
    for new_id, n, n_classes in asked:
        assert 1 <= n <= n_classes.bit_length(), (new_id, n, n_classes)  # ceil(log2(k + 1))
    assert max(n for _, n, _ in asked) == 7  # 64..99 classes: the bound is reached, not beaten
    assert s.last_depth == asked[-1][1] and s.depth == 7
    assert s.n_comparisons == sum(n for _, n, _ in asked)


def test_the_first_query_is_the_middle_class():
    s = ClipSorter(100)
    insert_all(s, [make_clip(i, r) for i, r in enumerate([3, 1, 4, 0, 2, 5])])
    s.offer(6, make_clip(6, 2.5))
    _, _, old_id, _ = s.next_query()
    assert s.ranks()[old_id] == 3  # six classes: gaps 0..6, middle class (0 + 6) // 2


@pytest.mark.parametrize("seed", SEEDS)
def test_an_exact_teacher_sorts_by_true_return(seed):
    rng = np.random.default_rng(seed)
    returns = rng.normal(size=60)
    s = ClipSorter(1000)
    insert_all(s, [make_clip(i, r) for i, r in enumerate(returns)])
    classes = s.classes()
    assert all(len(c) == 1 for c in classes)
    assert [c[0] for c in classes] == np.argsort(returns).tolist()


@pytest.mark.parametrize("seed", SEEDS)
def test_ties_form_classes(seed):
    rng = np.random.default_rng(seed)
    returns = rng.integers(0, 5, size=40).astype(float)
    s = ClipSorter(1000)
    insert_all(s, [make_clip(i, r) for i, r in enumerate(returns)])
    classes = s.classes()
    assert [returns[c[0]] for c in classes] == sorted(set(returns))
    assert all(len({returns[i] for i in c}) == 1 for c in classes)
    assert sorted(i for c in classes for i in c) == list(range(40))
    ranks = s.ranks()
    assert all(ranks[i] == sorted(set(returns)).index(returns[i]) for i in range(40))
    for new_id, n, n_classes in insert_all(s, [make_clip(40, 2.0)], first_id=40):
        assert n <= n_classes.bit_length()


def test_an_incomparable_answer_drops_the_clip():
    returns = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    incomparable = {2, 4}

    def teacher(new: Clip, old: Clip) -> float | None:
        return None if int(new.actions[0]) in incomparable else exact(new, old)
    s = ClipSorter(100)
    asked = insert_all(s, [make_clip(i, r) for i, r in enumerate(returns)], teacher)
    assert [n for i, n, _ in asked if i in incomparable] == [1, 1]  # one query, then dropped
    assert s.classes() == [[0], [1], [3], [5]]
    assert s.n_dropped == 2 and s.inserting is None and s.next_query() is None


def test_eviction_keeps_the_newest_max_clips_and_removes_empty_classes():
    returns = [9.0, 8.0, 1.0, 2.0, 2.0, 3.0, 1.0, 3.0, 2.0, 5.0]
    s = ClipSorter(5)
    insert_all(s, [make_clip(i, r) for i, r in enumerate(returns)])
    assert len(s) == 5 and s.n_evicted == 5
    kept = sorted(i for c in s.classes() for i in c)
    assert kept == [5, 6, 7, 8, 9]  # the oldest sorted clips went first
    # The classes of 8 and 9 (the first clips) are gone; no class is left empty.
    assert s.classes() == [[6], [8], [5, 7], [9]]
    with pytest.raises(KeyError):
        s.clip(0)


@pytest.mark.parametrize("seed", SEEDS)
def test_each_comparison_is_exactly_one_query(seed):
    rng = np.random.default_rng(seed)
    s = ClipSorter(30, max_waiting=50)
    n_answers = 0
    for i, r in enumerate(rng.integers(0, 8, size=50)):
        s.offer(i, make_clip(i, float(r)))
    while (q := s.next_query()) is not None:
        assert s.next_query() == q  # asked again before an answer: the same query, not a new one
        s.answer(exact(q[1], q[3]) if rng.random() > 0.1 else None)
        n_answers += 1
    assert s.n_comparisons == n_answers
    assert s.n_inserted + s.n_dropped == 50 and len(s) == 30


def test_waiting_clips_beyond_max_waiting_drop_the_oldest():
    s = ClipSorter(10, max_waiting=2)
    for i in range(5):
        s.offer(i, make_clip(i, float(i)))
    assert s.n_waiting == 2 and s.next_query()[0] == 3


def live_run(seed: int, max_clips: int, n: int, incomparable: float = 0.1
             ) -> tuple[dict[bool, ClipSorter], list[Preference], list[Clip]]:
    """Two split sorters fed interleaved clips with tied returns, some answers incomparable;
    the answered queries are returned as labels in the order they were stored."""
    rng = np.random.default_rng(seed)
    sorters = {False: ClipSorter(max_clips), True: ClipSorter(max_clips)}
    labels: list[Preference] = []
    clips = [make_clip(i, float(r)) for i, r in enumerate(rng.integers(0, 6, size=n))]

    def teacher(new: Clip, old: Clip) -> float | None:
        return None if rng.random() < incomparable else exact(new, old)
    for i, clip in enumerate(clips):
        split = bool(rng.random() < 0.3)
        insert_all(sorters[split], [clip], teacher, labels, split, first_id=i)
    return sorters, labels, clips


@pytest.mark.parametrize("seed", SEEDS)
def test_replaying_the_stored_labels_rebuilds_the_same_order(seed):
    live, labels, _ = live_run(seed, max_clips=12, n=60)
    assert live[False].n_dropped > 0 and live[False].n_evicted > 0  # both cases are replayed
    rebuilt = rebuild_sorters(labels, max_clips=12)
    for split in (False, True):
        assert key_order(rebuilt[split]) == key_order(live[split])
        assert rebuilt[split].n_skipped == 0
        assert all(i < 0 for c in rebuilt[split].classes() for i in c)


def test_replay_from_a_preference_store(tmp_path):
    live, labels, _ = live_run(7, max_clips=8, n=30)
    with PreferenceStore(tmp_path / "prefs.sqlite") as store:
        for pref in labels:
            store.add(pref)
        rebuilt = rebuild_sorters(store.iter_latest(len(store)), max_clips=8)
    for split in (False, True):
        assert key_order(rebuilt[split]) == key_order(live[split])


@pytest.mark.parametrize("seed", SEEDS)
def test_an_unfinished_last_insertion_is_dropped_on_replay(seed):
    live, labels, clips = live_run(seed, max_clips=1000, n=40, incomparable=0.0)
    s = live[False]
    assert s.depth >= 2
    late = make_clip(999, 2.5)
    s.offer(999, late)
    _, new, _, old = s.next_query()  # killed after the first of its >= 2 answers is stored
    labels.append(Preference(new, old, exact(new, old)))
    s.answer(exact(new, old))
    assert s.inserting == 999
    rebuilt = rebuild_sorters(labels, max_clips=1000)
    order = key_order(rebuilt[False])
    assert order == key_order(s)
    assert late.key not in {k for c in order for k in c}
    assert sum(len(c) for c in order) == len(s) and rebuilt[False].n_dropped == 1
    assert rebuilt[False].inserting is None and rebuilt[False].next_query() is None


def test_a_clip_inserted_again_leaves_the_order_once_the_insertion_under_way_ends():
    s = ClipSorter(100)
    clips = [make_clip(i, float(r)) for i, r in enumerate([2, 0, 4, 1, 3])]
    insert_all(s, clips[:4])
    s.offer(4, clips[4])
    new_id, _, _, _ = s.next_query()
    assert new_id == 4 and not s.reinsert(99) and s.reinsert(1)  # 99 is not sorted
    assert 1 in s.ranks() and s.view()["reinserting"] == [1]  # still sorted meanwhile
    s.offer(5, make_clip(5, 9.0))
    assert s.view()["upcoming"] == 1 and s.clip(5).true_return == 9.0  # a re-insertion first
    drive(s, exact)  # clip 4's insertion ends, then clip 1's starts and is answered anew
    assert s.n_reinserted == 1 and s.view()["reinserting"] == []
    assert [i for c in s.classes() for i in c] == [1, 3, 0, 4, 2, 5]


def test_a_misplaced_clip_inserted_again_finds_its_place_and_replay_repeats_it():
    s = ClipSorter(100)
    labels: list[Preference] = []
    clips = [make_clip(i, float(r)) for i, r in enumerate([1, 3, 4, 0])]
    insert_all(s, clips[:2], labels=labels)
    s.offer(2, clips[2])
    drive(s, lambda new, old: 0.0, labels)  # clip 2 (return 4) is wrongly judged the worst
    assert s.ranks()[2] == 0
    assert s.reinsert(2) and s.view()["inserting"] is None
    new_id, _, _, _ = s.next_query()
    assert new_id == 2 and 2 not in s.ranks() and s.clip(2) is clips[2]
    drive(s, exact, labels)
    insert_all(s, clips[3:], labels=labels, first_id=3)
    assert [i for c in s.classes() for i in c] == [3, 0, 1, 2]
    rebuilt = rebuild_sorters(labels, max_clips=100)[False]
    assert key_order(rebuilt) == key_order(s) and rebuilt.n_reinserted == 1
    assert rebuilt.n_skipped == 0


@pytest.mark.parametrize("end", ["incomparable", "stopped"])
def test_a_clip_placed_again_goes_back_where_it_was_when_its_placing_ends_early(end):
    s = ClipSorter(100)
    labels: list[Preference] = []
    clips = [make_clip(i, float(r)) for i, r in enumerate([1, 3, 4, 5, 0, 2])]
    insert_all(s, clips[:5], labels=labels)  # classes [4] [0] [1] [2] [3]: 1 takes 2 answers
    before = key_order(s)
    assert s.reinsert(1) and not s.reinsert(77)
    _, new, _, old = s.next_query()
    labels.append(Preference(new, old, exact(new, old)))  # one comparison stored ...
    s.answer(exact(new, old))
    assert s.inserting == 1 and s.next_query() is not None
    if end == "incomparable":  # ... then "can't tell": not stored
        s.answer(None)
        assert key_order(s) == before and s.inserting is None
        insert_all(s, clips[5:], labels=labels, first_id=5)
    rebuilt = rebuild_sorters(labels, max_clips=100)[False]
    if end == "stopped":  # the run stopped there: the replay ends the placing early
        assert key_order(rebuilt) == before
    else:
        assert key_order(rebuilt) == key_order(s) and rebuilt.n_skipped == 0


def test_a_clip_waiting_to_be_placed_again_and_evicted_is_forgotten():
    s = ClipSorter(3)
    insert_all(s, [make_clip(i, float(i)) for i in range(3)])
    s.offer(3, make_clip(3, 9.0))
    assert s.next_query()[0] == 3  # clip 3's insertion is under way ...
    assert s.reinsert(0) and s.view()["reinserting"] == [0]  # ... as clip 0 is asked for again
    drive(s, exact)  # clip 3 placed: the oldest sorted clip, 0, is evicted while it waits
    assert s.n_evicted == 1 and s.view()["reinserting"] == [] and s.next_query() is None
    assert s.n_reinserted == 0 and s.classes() == [[1], [2], [3]] and not s.reinsert(0)


def test_the_view_marks_the_clip_being_inserted_its_path_and_interval():
    s = ClipSorter(100)
    insert_all(s, [make_clip(i, float(i)) for i in range(7)])  # 7 classes
    s.offer(7, make_clip(7, 2.5))
    _, _, first, _ = s.next_query()
    s.answer(0.0)
    _, _, second, _ = s.next_query()
    view = s.view()
    assert view["inserting"] == 7 and view["path"] == [[first, 0.0]] and view["upcoming"] is None
    assert first == 3 and second == 1 and view["interval"] == [0, 3]
    assert view["classes"] == [[i] for i in range(7)]


def test_a_label_that_is_no_query_is_skipped():
    live, labels, clips = live_run(3, max_clips=1000, n=20, incomparable=0.0)
    stray = Preference(make_clip(500, 0.0), make_clip(501, 1.0), 0.0)  # a blind pair
    k = next(k for k in range(5, len(labels)) if labels[k].left.key != labels[k - 1].left.key)
    rebuilt = rebuild_sorters(labels[:k] + [stray] + labels[k:], max_clips=1000)
    assert rebuilt[False].n_skipped == 1
    assert key_order(rebuilt[False]) == key_order(live[False])
    with pytest.raises(ValueError, match="id order"):
        rebuild_sorters([Preference(clips[1], clips[0], 1.0, label_id=2),
                         Preference(clips[2], clips[0], 1.0, label_id=1)], max_clips=10)


# ---- the labelling loop in sorting mode ---------------------------------------------------------

def _labelling(store_path, **config):
    """The labelling steps with the oracle, sorting, their clips from a plain queue."""
    import multiprocessing as mp
    import queue

    from launch.loop import Channels
    from pref_interface.config import LabellingConfig
    from pref_interface.labelling import LabellingStats
    from pref_interface.process import Labelling

    stats = LabellingStats.create(mp.get_context("spawn"))
    clips: queue.Queue = queue.Queue()
    labelling = Labelling(LabellingConfig(synthetic=True, queries="sort", seed=0, **config),
                          Channels(None, clips), stats=stats, store_path=str(store_path))
    return labelling, clips


def _step(labelling) -> int:
    """One pass of labelling_loop's body; the labels committed."""
    labelling.take_clips()
    n = 0
    for pair in labelling.draw_pairs():
        pref = labelling.label(pair)
        if pref is not None:
            labelling.commit(pref)
            n += 1
    return n


def _order(labelling) -> list[list[bytes]]:
    """The training split's classes, worst first, as clip keys."""
    sorter = labelling.mode.sorters[False]
    return [sorted(sorter.clip(i).key for i in cls) for cls in sorter.classes()]


def test_the_loop_sorts_clips_by_their_true_return_one_stored_label_per_comparison(tmp_path):
    labelling, clips = _labelling(tmp_path / "prefs.sqlite", val_fraction=0.0)
    returns = np.random.default_rng(0).permutation(12).astype(float)
    for i, r in enumerate(returns):
        clips.put(make_clip(i, r))
    n_labels = sum(_step(labelling) for _ in range(200))
    sorter = labelling.mode.sorters[False]
    assert len(sorter) == 12 and sorter.n_comparisons == n_labels == len(labelling.store)
    assert [sorter.clip(c[0]).true_return for c in sorter.classes()] == sorted(returns)
    for pref in labelling.store.latest(n_labels):  # the clip being sorted is every label's left
        assert pref.left.key != pref.right.key and pref.mu in (0.0, 0.5, 1.0)
    labelling.close()


def test_a_run_stopped_mid_insertion_keeps_its_labels_and_resumes_the_same_order(tmp_path):
    path = tmp_path / "prefs.sqlite"
    labelling, clips = _labelling(path, val_fraction=0.0)
    for i, r in enumerate(np.random.default_rng(1).permutation(20).astype(float)):
        clips.put(make_clip(i, r))
    sorter = labelling.mode.sorters[False]
    while sorter.n_inserted < 10 or sorter._insertion is None or sorter._insertion.depth == 0:
        _step(labelling)  # stops with an insertion under way, some of its comparisons stored
    stored, order = len(labelling.store), _order(labelling)
    labelling.store.close()  # the process dies here: nothing more is written
    resumed, _ = _labelling(path, val_fraction=0.0)
    assert len(resumed.store) == stored  # every committed label is there
    assert _order(resumed) == order  # the sorted clips as they were; the half-sorted one dropped
    resumed.close()


def test_sorting_keeps_the_splits_apart_and_near_the_validation_share(tmp_path):
    labelling, clips = _labelling(tmp_path / "prefs.sqlite")
    for i, r in enumerate(np.random.default_rng(2).permutation(60).astype(float)):
        clips.put(make_clip(i, r))
    for _ in range(400):
        _step(labelling)
    labels = labelling.store.latest(len(labelling.store))
    val_keys = {labelling.mode.sorters[True].clip(i).key for c in labelling.mode.sorters[True].classes()
                for i in c}
    train_keys = {labelling.mode.sorters[False].clip(i).key for c in labelling.mode.sorters[False].classes()
                  for i in c}
    assert val_keys and train_keys and not val_keys & train_keys
    for pref in labels:
        assert (pref.left.key in val_keys or pref.right.key in val_keys) == pref.is_validation
    share = np.mean([p.is_validation for p in labels])
    assert 0.2 < share < 0.55, share  # 1/e of the clips, and so about 1/e of the labels
    labelling.close()


@pytest.mark.parametrize("change", ["first flipped", "last flipped", "last deleted"])
def test_a_changed_comparison_places_its_clip_again_and_the_replay_agrees(tmp_path, change):
    """A person changes or deletes one of the comparisons that placed a clip: the clip is placed
    again by fresh comparisons, so the live order and the one a resume rebuilds agree."""
    from clips.clip import LabelEdit

    store = tmp_path / "prefs.sqlite"
    labelling, clips = _labelling(store, val_fraction=0.0)
    returns = np.random.default_rng(3).permutation(10).astype(float)
    for i, r in enumerate(returns[:9]):
        clips.put(make_clip(i, r))
    while len(labelling.mode.sorters[False]) < 9:
        _step(labelling)
    last = labelling.store.latest(1)[0]  # the answer that placed the last clip
    path = [p for p in labelling.store.latest(len(labelling.store)) if p.left.key == last.left.key]
    assert len(path) >= 2
    label = path[0] if change.startswith("first") else last
    sorter = labelling.mode.sorters[False]
    clip_id = sorter.sorted_id(label.left.key)
    assert clip_id is not None and label.mu in (0.0, 1.0)
    assert labelling.editor.edit(LabelEdit(label.label_id, None if change.endswith("deleted")
                                           else 1.0 - label.mu))
    assert sorter.view()["reinserting"] == [clip_id]
    clips.put(make_clip(9, returns[9]))
    while sorter.view()["reinserting"] or len(sorter) < 10 or sorter.inserting is not None:
        _step(labelling)
    assert sorter.n_reinserted == 1
    assert [sorter.clip(c[0]).true_return for c in sorter.classes()] == sorted(returns)
    order = _order(labelling)
    labelling.close()
    resumed, _ = _labelling(store, val_fraction=0.0)
    assert _order(resumed) == order
    resumed.close()


# ---- what the order gives the trainer (--implied_pairs) ----------------------------------------

def _trainer(implied: bool, batch_size: int = 4):
    from reward_predictor import MovingDotRewardNet, RewardPredictorEnsemble, RewardPredictorTrainer

    return RewardPredictorTrainer(RewardPredictorEnsemble(MovingDotRewardNet, ensemble_size=2),
                                  batch_size=batch_size, implied_pairs=implied)


def test_the_trainer_adds_pairs_the_order_implies_better_clip_left_only_when_asked():
    from clips.clip import ClipOrder

    clips = [make_clip(i, float(i)) for i in range(6)]
    for implied in (False, True):
        trainer = _trainer(implied)
        for i in range(4):  # clip 5 is sorted but in no label the trainer holds
            trainer.add(Preference(clips[i + 1], clips[i], 1.0))
        rank = {c.key: r for r, c in enumerate(clips)}
        trainer.set_order(ClipOrder([[c.key] for c in clips[:2]] + [[clips[2].key, clips[3].key]]
                                    + [[c.key] for c in clips[4:]]))
        for batch in trainer.sample_batches():
            extra = [p for p in batch if p.source == "implied"]
            # as many implied pairs as labels at most (4 a batch, n_train = 4 in all)
            assert len(batch) == 4 + len(extra) and (0 < len(extra) <= 4 if implied else not extra)
            for p in extra:
                assert p.mu == 1.0 and rank[p.left.key] > rank[p.right.key]
                assert {rank[p.left.key], rank[p.right.key]} != {2, 3}  # one class: no pair
                assert clips[5].key not in (p.left.key, p.right.key)  # not held: not used
        assert trainer.train_steps(1)["loss"] > 0


def test_labelling_sends_the_training_order_after_each_insertion(tmp_path):
    import multiprocessing as mp
    import queue

    from clips.clip import ClipOrder
    from launch.loop import Channels
    from pref_interface.config import LabellingConfig
    from pref_interface.labelling import LabellingStats
    from pref_interface.process import Labelling

    clips, prefs = queue.Queue(), queue.Queue()
    labelling = Labelling(LabellingConfig(synthetic=True, queries="sort", val_fraction=0.0,
                                          max_in_flight=1000), Channels(None, clips, prefs),
                          stats=LabellingStats.create(mp.get_context("spawn")),
                          store_path=str(tmp_path / "prefs.sqlite"))
    for i, r in enumerate([3.0, 1.0, 2.0, 0.0]):
        clips.put(make_clip(i, r))
    for _ in range(20):
        _step(labelling)
    sent = [prefs.get_nowait() for _ in range(prefs.qsize())]
    orders = [m for m in sent if isinstance(m, ClipOrder)]
    assert len(orders) == 1 + 3  # at the start, then after each of the three insertions
    assert orders[-1].classes == [[labelling.mode.sorters[False].clip(i).key for i in cls]
                                  for cls in labelling.mode.sorters[False].classes()]
    assert len(orders[-1].classes) == 4
    labelling.close()


def test_rank_targets_are_the_normal_quantiles_of_the_classes():
    from reward_predictor.loss import rank_targets

    t = rank_targets(np.array([0, 1, 1, 2]), 3)
    assert t[1] == t[2] == 0.0 and t[0] == -t[3] and t[0] < -0.9  # Phi^-1(1/6) = -0.967
    assert np.allclose(t[0], -0.9674, atol=1e-4)


def test_a_rank_loss_fits_the_sorted_order_and_replaces_or_joins_the_papers():
    """MovingDot clips whose dot sits further right are sorted higher; a predictor trained on
    the rank loss alone (its labels say nothing: all ties) learns to pay for the right."""
    import torch

    from clips.clip import ClipOrder
    from reward_predictor import MovingDotRewardNet, RewardPredictorEnsemble, RewardPredictorTrainer
    from tests.helpers import dot_clip

    torch.manual_seed(0)
    clips = [dot_clip(x, steps=4) for x in range(10, 74, 4)]  # 16 clips, left to right
    for loss in ("preference", "rank", "both"):
        trainer = RewardPredictorTrainer(RewardPredictorEnsemble(MovingDotRewardNet, ensemble_size=1,
                                                                 lr=3e-3), batch_size=8,
                                         loss=loss)
        for a, b in zip(clips, clips[1:]):
            trainer.add(Preference(a, b, 0.5))  # ties: no signal in the labels
        trainer.set_order(ClipOrder([[c.key] for c in clips]))
        for _ in range(150):
            metrics = trainer.train_steps(1)
        assert ("rank_loss" in metrics) == (loss != "preference")
        returns = trainer.ensemble.member_returns(clips)[0].numpy()
        corr = np.corrcoef(returns, np.arange(len(clips)))[0, 1]
        if loss == "preference":  # tied labels: the returns stay equal, whatever their order
            assert returns.std() < 0.05, returns.std()
        else:  # the order, at the targets' scale (their std is about 0.9)
            assert corr > 0.95 and 0.6 < returns.std() < 1.2, (loss, corr, returns.std())
    with pytest.raises(ValueError, match="none of"):
        RewardPredictorTrainer(RewardPredictorEnsemble(MovingDotRewardNet, ensemble_size=1),
                               loss="ranks")
