"""Sorting clips instead of comparing blind pairs: each new clip is placed among the
clips already sorted by a binary search that asks one comparison at a time.

The idea is rl-teacher-atari's sorting tree: the sorted clips form classes of equally good clips,
worst to best, and a new clip is compared with a clip of the middle class of its search interval,
so an insertion asks at most ceil(log2(n_classes + 1)) questions, and the order then implies a
label for every two clips in different classes (the trainer samples them: `--implied_pairs`).

The caller drives it, one query at a time, and stores each answer as an ordinary label with the
new clip on the left: `offer` clips, then `next_query` / `answer` until `next_query` is None.
A sorter serves one split (training or validation); the caller keeps one per split, as labels are
only made within a split. After a resume, `rebuild_sorters` replays the stored labels. A sorted
clip a person thinks misplaced can be taken out and inserted again (`reinsert`); its earlier
labels stay in the store.
"""
from __future__ import annotations

import itertools
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Iterable

from clips.clip import Clip, Preference

# (new clip's id, new clip, sorted clip's id, sorted clip): is the new (left) clip better?
Query = tuple[int, Clip, int, Clip]
ANSWERS = (0.0, 0.5, 1.0)  # mu: the new clip worse, as good as, better than the sorted one


@dataclass
class _Insertion:
    """A clip being placed: the gaps lo..hi (gap g is just below class g) it may still go in."""

    clip_id: int
    clip: Clip
    lo: int
    hi: int
    depth: int = 0  # comparisons answered so far
    asked: bool = False  # a query on it is out and not answered yet
    path: list[tuple[int, float | None]] = field(default_factory=list)  # (sorted id, mu) so far
    home: tuple[int, int, bool] | None = None  # a sorted clip placed again: where it was

    @property
    def mid(self) -> int:
        """The class to compare with: the middle of the interval (a balanced tree)."""
        return (self.lo + self.hi) // 2


class ClipSorter:
    """Clips in a sorted order of classes of equally good clips (worst first), bounded to the
    newest `max_clips` sorted clips, filled one insertion at a time by the caller's comparisons.

    Args:
        max_clips: clips kept sorted; beyond it the oldest sorted clip is evicted (>= 2).
        max_waiting: clips offered and not yet being inserted; beyond it the oldest is dropped
            (default `max_clips`), so clips arriving faster than labels cannot pile up.
    """

    def __init__(self, max_clips: int, max_waiting: int | None = None) -> None:
        if max_clips < 2:
            raise ValueError(f"max_clips must be >= 2, got {max_clips}")
        self.max_clips = max_clips
        self.max_waiting = max_clips if max_waiting is None else max_waiting
        if self.max_waiting < 1:
            raise ValueError(f"max_waiting must be >= 1, got {self.max_waiting}")
        self._classes: list[list[int]] = []  # worst to best; each class's ids oldest first
        self._clips: OrderedDict[int, Clip] = OrderedDict()  # sorted clips, oldest sorted first
        self._waiting: OrderedDict[int, Clip] = OrderedDict()  # offered, oldest first
        self._insertion: _Insertion | None = None
        self._reinserts: list[int] = []  # sorted clips to take out and insert again, in turn
        self._replay_ids = itertools.count(-1, -1)  # replayed clips' ids: never a buffer's (>= 0)
        self._last_label_id: int | None = None
        self.n_comparisons = 0  # answers taken, one per query asked (replayed ones included)
        self.n_inserted = 0  # clips that entered the order
        self.n_dropped = 0  # insertions ended by an incomparable answer, or cut short on replay
        self.n_evicted = 0
        self.n_reinserted = 0  # sorted clips taken out to be inserted again
        self.n_skipped = 0  # replayed labels that were no query this sorter would ask
        self.last_depth = 0  # comparisons the last finished insertion took

    # ---- the caller's side --------------------------------------------------------------------

    def offer(self, clip_id: int, clip: Clip) -> None:
        """Queue a clip for insertion; the very first clip becomes the first class at once."""
        if clip_id in self._clips or clip_id in self._waiting or (
                self._insertion is not None and self._insertion.clip_id == clip_id):
            raise ValueError(f"clip id {clip_id} was already offered to this sorter")
        if not self._classes:
            self._place(clip_id, clip, 0, join=False)
            return
        self._waiting[clip_id] = clip
        while len(self._waiting) > self.max_waiting:
            self._waiting.popitem(last=False)

    def next_query(self) -> Query | None:
        """The comparison to ask now (the same one until it is answered); None: nothing waits."""
        ins = self._insertion
        if ins is None:
            ins = self._insertion = self._next_insertion()
            if ins is None:
                return None
        rep = self._classes[ins.mid][-1]  # the class's newest clip: the last to be evicted
        ins.asked = True
        return ins.clip_id, ins.clip, rep, self._clips[rep]

    def answer(self, mu: float | None) -> None:
        """The answer to the last query, new clip on the left: 1.0 better, 0.0 worse, 0.5 as
        good (it joins that class), None incomparable (the new clip is dropped)."""
        ins = self._insertion
        if ins is None or not ins.asked:
            raise ValueError("answer() without a query asked: call next_query() first")
        if mu is not None and float(mu) not in ANSWERS:
            raise ValueError(f"mu must be one of {ANSWERS} or None, got {mu}")
        ins.asked = False
        ins.depth += 1
        ins.path.append((self._classes[ins.mid][-1], None if mu is None else float(mu)))
        self.n_comparisons += 1
        if mu is None:
            self._drop_insertion()
        elif float(mu) == 0.5:
            self._finish(ins, ins.mid, join=True)
        else:
            ins.lo, ins.hi = (ins.mid + 1, ins.hi) if float(mu) == 1.0 else (ins.lo, ins.mid)
            if ins.lo == ins.hi:
                self._finish(ins, ins.lo, join=False)

    def reinsert(self, clip_id: int) -> bool:
        """Take a sorted clip out of the order and insert it again, by fresh comparisons, once
        the insertion under way (if any) ends; False if it cannot be (not sorted now, or the
        only sorted clip). An incomparable answer, or a stop, during its insertion leaves it
        where it was."""
        if not self._can_reinsert(clip_id):
            return False
        if clip_id not in self._reinserts:
            self._reinserts.append(clip_id)
        return True

    # ---- the order ----------------------------------------------------------------------------

    def classes(self) -> list[list[int]]:
        """The sorted clips' ids, class by class, worst class first."""
        return [list(c) for c in self._classes]

    def ranks(self) -> dict[int, int]:
        """Each sorted clip's class index (0: the worst class)."""
        return {i: rank for rank, c in enumerate(self._classes) for i in c}

    def sorted_id(self, key: bytes) -> int | None:
        """The id of the sorted clip with this content key; None if none is sorted now."""
        return next((i for i, c in self._clips.items() if c.key == key), None)

    def clip(self, clip_id: int) -> Clip:
        """A sorted clip, the clip being inserted or a waiting one; KeyError for any other id."""
        ins = self._insertion
        if ins is not None and ins.clip_id == clip_id:
            return ins.clip
        return self._clips[clip_id] if clip_id in self._clips else self._waiting[clip_id]

    def view(self) -> dict:
        """The order as the labelling page draws it: `classes` (ids, worst class first), the
        clip being inserted (`inserting`, or None), the comparisons it took so far (`path`:
        [sorted clip's id, mu]) and the classes it may still join or go between (`interval`:
        gaps lo..hi, gap g just below class g), the clips waiting to be inserted again, and the
        clip to be inserted after this one (`upcoming`, or None; the page loads it ahead)."""
        ins = self._insertion
        again = [i for i in self._reinserts if self._can_reinsert(i)]
        return {"classes": self.classes(),
                "inserting": None if ins is None else ins.clip_id,
                "path": [] if ins is None else [list(step) for step in ins.path],
                "interval": None if ins is None else [ins.lo, ins.hi],
                "reinserting": again,
                "upcoming": again[0] if again else next(iter(self._waiting), None)}

    def __len__(self) -> int:
        return len(self._clips)

    @property
    def n_classes(self) -> int:
        return len(self._classes)

    @property
    def depth(self) -> int:
        """The balanced tree's depth: the most comparisons the next insertion can ask,
        ceil(log2(n_classes + 1))."""
        return len(self._classes).bit_length()

    @property
    def inserting(self) -> int | None:
        """The id of the clip being inserted, if any."""
        return None if self._insertion is None else self._insertion.clip_id

    @property
    def n_waiting(self) -> int:
        return len(self._waiting)

    # ---- inside -------------------------------------------------------------------------------

    def _next_insertion(self) -> _Insertion | None:
        """The next clip to insert: a clip asked to be inserted again (taken out of the order
        now), else the oldest waiting clip."""
        while self._reinserts:
            clip_id = self._reinserts.pop(0)
            if self._can_reinsert(clip_id):
                return self._start_reinsertion(clip_id, clip_id)
        if not self._waiting:
            return None
        clip_id, clip = self._waiting.popitem(last=False)
        return _Insertion(clip_id, clip, 0, len(self._classes))

    def _can_reinsert(self, clip_id: int) -> bool:
        return clip_id in self._clips and len(self._clips) > 1

    def _start_reinsertion(self, clip_id: int, new_id: int) -> _Insertion:
        """Take a sorted clip out to place it again (as `new_id`), remembering where it was."""
        k = next(k for k, c in enumerate(self._classes) if clip_id in c)
        home = k, self._classes[k].index(clip_id), len(self._classes[k]) == 1
        clip = self._take_out(clip_id)
        self.n_reinserted += 1
        return _Insertion(new_id, clip, 0, len(self._classes), home=home)

    def _take_out(self, clip_id: int) -> Clip:
        """Remove a sorted clip from its class (and the class if it is left empty)."""
        k = next(k for k, c in enumerate(self._classes) if clip_id in c)
        self._classes[k].remove(clip_id)
        if not self._classes[k]:
            del self._classes[k]
        return self._clips.pop(clip_id)

    def _finish(self, ins: _Insertion, index: int, join: bool) -> None:
        self._insertion = None
        self.last_depth = ins.depth
        self._place(ins.clip_id, ins.clip, index, join)

    def _place(self, clip_id: int, clip: Clip, index: int, join: bool) -> None:
        """Put a clip into class `index` (join) or a new class there, then evict the oldest."""
        if join:
            self._classes[index].append(clip_id)
        else:
            self._classes.insert(index, [clip_id])
        self._clips[clip_id] = clip
        self.n_inserted += 1
        # The oldest sorted clips go; one waiting to be placed again is then passed over.
        while len(self._clips) > self.max_clips:
            self._take_out(next(iter(self._clips)))
            self.n_evicted += 1

    def _replay(self, pref: Preference) -> None:
        """Take a stored label as the answer to the query it came from (left: the clip being
        inserted); a label that is no query this sorter would ask now is skipped."""
        if pref.label_id is not None:
            if self._last_label_id is not None and pref.label_id <= self._last_label_id:
                raise ValueError(f"labels must be replayed in id order: {pref.label_id} came "
                                 f"after {self._last_label_id}")
            self._last_label_id = pref.label_id
        ins = self._insertion
        if ins is None or ins.clip.key != pref.left.key or not self._replay_expects(pref):
            # A new insertion. The one before ended with an incomparable answer (never stored)
            # or was cut short (by a stop, or a person's change to one of its comparisons, after
            # which the live sorter placed the clip again); either way it is not in the order,
            # as in the live sorter.
            self._drop_insertion()
            if not self._classes:  # the live sorter's first clip, placed without a comparison
                self._place(next(self._replay_ids), pref.right, 0, join=False)
            again = self.sorted_id(pref.left.key)
            if again is not None and self._can_reinsert(again):  # a sorted clip placed again
                self._insertion = self._start_reinsertion(again, next(self._replay_ids))
            else:
                self._insertion = _Insertion(next(self._replay_ids), pref.left, 0,
                                             len(self._classes))
        if not self._replay_expects(pref):
            self._drop_insertion()
            self.n_skipped += 1
            return
        self.answer(pref.mu)

    def _replay_expects(self, pref: Preference) -> bool:
        """Whether a stored label answers the query the insertion under way asks now."""
        _, _, _, rep = self.next_query()  # type: ignore[misc]
        return rep.key == pref.right.key and float(pref.mu) in ANSWERS

    def _drop_insertion(self) -> None:
        """End the insertion under way without placing its clip: a new clip is dropped, a
        sorted one being placed again goes back where it was."""
        ins, self._insertion = self._insertion, None
        if ins is None:
            return
        self.n_dropped += 1
        if ins.home is not None:
            k, pos, alone = ins.home
            if alone:
                self._classes.insert(k, [ins.clip_id])
            else:
                self._classes[k].insert(pos, ins.clip_id)
            self._clips[ins.clip_id] = ins.clip


def rebuild_sorters(labels: Iterable[Preference], max_clips: int,
                    max_waiting: int | None = None) -> dict[bool, ClipSorter]:
    """The sorters of both splits (keyed by `is_validation`) as they were when `labels` were
    stored, rebuilt from the labels alone, oldest first (e.g. `store.iter_latest(len(store))`).

    Assumes every label answered a sorter's query, the clip being inserted on the left: labels
    of another kind, or edited or deleted since, make the replay skip what no longer fits
    (`n_skipped`). An insertion left unfinished is dropped (its labels stay in the store).
    Replayed clips get ids -1, -2, ..., which never clash with a ClipBuffer's.
    """
    sorters = {split: ClipSorter(max_clips, max_waiting) for split in (False, True)}
    for pref in labels:
        sorters[bool(pref.is_validation)]._replay(pref)
    for sorter in sorters.values():
        sorter._drop_insertion()
    return sorters
