"""Several people labelling one run: labelling's side (pairs out, answers back with their
labeller, a share of the pairs to two people and their agreement), with the page's server played
by a thread."""
from __future__ import annotations

import multiprocessing as mp
import queue
import threading

import numpy as np
import pytest

from clips.clip import Clip, Preference
from launch.loop import Channels, run_labelling
from pref_interface.config import LabellingConfig
from pref_interface.labellers.keys import EOF, PairAnswer, PairWithdrawn
from pref_interface.labellers.team import Agreement, Team, TeamAnswer, parse_labellers, stored_agreement
from pref_interface.labelling import LabellingStats
from pref_interface.store import PreferenceStore
from tests.helpers import drained, wait_until

PEOPLE = ["ann", "bob", "cy"]


def clip(value: int) -> Clip:
    return Clip.pack(np.full((4, 84, 84), value, np.uint8), np.zeros(1, np.int64),
                     np.full(1, float(value % 5), np.float32))


class FakePage:
    """The page's server: gives each open pair to `copies` different people in turn, who answer
    L, R, E or incomparable by the pair's number; remembers who was given what."""

    def __init__(self, updates: queue.Queue, answers: queue.Queue) -> None:
        self.updates, self.answers = updates, answers
        self.given: dict[str, list[str]] = {}
        self.stored: list[dict] = []
        self.status: list[str] = []
        self.turn = 0
        self.running = True
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self) -> None:
        while self.running:
            try:
                update = self.updates.get(timeout=0.05)
            except queue.Empty:
                continue
            if "open" in update:
                pair = update["open"]
                n = int(pair["id"].rsplit("-", 1)[1])
                people = [PEOPLE[(self.turn + k) % 3] for k in range(pair["copies"])]
                self.turn += 1
                self.given[pair["id"]] = people
                for person in people:  # bob always answers "as good", so agreement varies
                    key = "E" if person == "bob" else ["L", "R", "L", "\n"][n % 4]
                    self.answers.put(PairAnswer(pair["id"], key, labeller=person))
            elif "withdrawn" in update:  # as the server says it once the pairs are off the pages
                self.answers.put(PairWithdrawn(update["withdrawn"]))
            elif "stored" in update:
                self.stored.append(update["stored"])
            elif "status" in update:
                self.status = update["status"]


def test_labellers_are_names_or_a_count():
    assert parse_labellers("ann, bob") == ["ann", "bob"]
    assert parse_labellers("3") == ["p1", "p2", "p3"]
    for bad in ("ann,ann", "a b", "", "0", "x" * 33):
        with pytest.raises(ValueError):
            parse_labellers(bad)


def test_agreement_counts_pairs_two_people_answered():
    a = Agreement()
    a.add(TeamAnswer("1", "bob", 1.0), copies=2)
    a.add(TeamAnswer("1", "ann", 1.0), copies=2)
    a.add(TeamAnswer("2", "ann", 0.0), copies=2)
    a.add(TeamAnswer("2", "bob", 0.5), copies=2)
    a.add(TeamAnswer("3", "ann", 0.0), copies=1)
    assert a.shares() == {"ann-bob": 0.5}


def labelled(page: FakePage, config: LabellingConfig, clips: queue.Queue, path: str,
             stop: threading.Event | None = None, **parts) -> list[Preference]:
    """Run labelling with the fake page's people until it stops by itself; the stored labels."""
    worker = threading.Thread(target=run_labelling,
                              args=(config, Channels(stop or threading.Event(), clips)),
                              kwargs=dict(store_path=path, **parts))
    worker.start()
    worker.join(timeout=60)
    page.running = False
    assert not worker.is_alive()
    with PreferenceStore(path, create=False) as store:
        return [store.get(i) for i in store.all_ids()]


def test_a_team_labels_each_pair_once_or_twice_and_every_label_names_its_labeller(tmp_path):
    updates, answers, clips = queue.Queue(), queue.Queue(), queue.Queue()
    page = FakePage(updates, answers)
    for v in range(40):
        clips.put(clip(v))
    stop = threading.Event()
    stats = LabellingStats.create(mp.get_context("spawn"))
    config = LabellingConfig(seed=0, val_fraction=0.0, max_pairs_per_clip=None, max_clips=40,
                             labellers=tuple(PEOPLE), overlap=0.5, page_updates=updates,
                             stop_after_labels=30)
    path = str(tmp_path / "prefs.sqlite")
    team = Team(PEOPLE, updates, answers)
    labels = labelled(page, config, clips, path, stop, stats=stats, labeller=team,
                      log_dir=str(tmp_path / "tb"))
    with PreferenceStore(path, create=False) as store:
        per_person = store.labellers()
    assert len(labels) == 30 and all(p.labeller in PEOPLE and p.source == "human" for p in labels)
    assert sum(per_person.values()) == 30 and set(per_person) <= set(PEOPLE)
    # No pair went to one person twice, and a pair of two people was stored twice at most.
    assert all(len(set(people)) == len(people) for people in page.given.values())
    assert any(len(people) == 2 for people in page.given.values())
    assert len(page.stored) == 30 and {s["labeller"] for s in page.stored} <= set(PEOPLE)
    # Each stored label is its labeller's answer to the pair they were given, and incomparable
    # answers (every fourth pair's, but bob's) are not stored.
    assert all(s["labeller"] in page.given[s["pair"]] for s in page.stored)
    assert all(s["mu"] == (0.5 if s["labeller"] == "bob" else
                           [1.0, 0.0, 1.0, None][int(s["pair"].rsplit("-", 1)[1]) % 4])
               for s in page.stored)
    assert sorted((p.labeller, p.mu) for p in labels) == sorted(
        (s["labeller"], s["mu"]) for s in page.stored)
    assert team.agreement.shares() and all(0.0 <= v <= 1.0 for v in team.agreement.shares().values())


def two_people_labelling(tmp_path, stop: threading.Event):
    """Labelling for ann and bob in a thread, once their four pairs are out: the thread, the
    page's updates and answers queues, and the pairs' ids."""
    updates, answers, clips = queue.Queue(), queue.Queue(), queue.Queue()
    for v in range(6):
        clips.put(clip(v))
    stats = LabellingStats.create(mp.get_context("spawn"))
    config = LabellingConfig(seed=0, val_fraction=0.0, max_pairs_per_clip=None,
                             labellers=("ann", "bob"), page_updates=updates)
    worker = threading.Thread(target=run_labelling, args=(config, Channels(stop, clips)),
                              kwargs=dict(stats=stats, store_path=str(tmp_path / "p.sqlite"),
                                          labeller=Team(["ann", "bob"], updates, answers)))
    worker.start()
    opened: list[str] = []
    wait_until(lambda: opened.extend(u["open"]["id"] for u in drained(updates) if "open" in u)
               or len(opened) >= 4, 30, "four pairs out (two people, two each)")
    return worker, updates, answers, opened


def withdrawn(updates: queue.Queue) -> dict:
    """The update that takes every pair off the pages, as labelling ends."""
    return wait_until(lambda: [u for u in drained(updates) if "withdrawn" in u], 30,
                      "the pairs withdrawn")[0]


def test_the_terminals_ctrl_d_stops_a_team(tmp_path):
    worker, updates, answers, opened = two_people_labelling(tmp_path, threading.Event())
    answers.put(EOF)
    answers.put(PairWithdrawn(withdrawn(updates)["withdrawn"]))  # the page's word
    worker.join(timeout=30)
    assert not worker.is_alive() and len(opened) == 4


def test_an_answer_a_teams_page_took_as_the_run_stopped_is_stored(tmp_path):
    """The run stops while ann's answer is on its way: labelling withdraws every pair from the
    pages and stores the answers they took before, then ends."""
    stop = threading.Event()
    worker, updates, answers, opened = two_people_labelling(tmp_path, stop)
    stop.set()
    withdrawal = withdrawn(updates)
    assert withdrawal["pair"] is None
    answers.put(PairAnswer(opened[1], "L", labeller="ann"))  # taken before the withdrawal...
    answers.put(PairWithdrawn(withdrawal["withdrawn"]))  # ...which the page then says
    worker.join(timeout=30)
    assert not worker.is_alive()
    with PreferenceStore(tmp_path / "p.sqlite", create=False) as store:
        assert [(p.labeller, p.mu) for p in store.latest(10)] == [("ann", 1.0)]


def test_an_edit_from_a_page_is_confirmed_to_the_pages_once_the_store_holds_it():
    """The pages show an edit as the store took it; one of a label no longer stored unlists it."""
    from clips.clip import LabelEdit

    class Editor:
        def __init__(self) -> None:
            self.held = {5: 1.0}

        def edit(self, edit: LabelEdit) -> bool:
            if edit.label_id not in self.held:
                return False
            self.held[edit.label_id] = edit.mu
            return True

    updates, answers, editor = queue.Queue(), queue.Queue(), Editor()
    team = Team(["ann"], updates, answers, editor=editor)
    for edit in (LabelEdit(5, 0.5), LabelEdit(6, 1.0)):
        answers.put(edit)
    assert list(team.answers()) == [] and editor.held == {5: 0.5}
    assert drained(updates) == [{"labelling": True}, {"edited": {"label": 5, "mu": 0.5}},
                                {"edited": {"label": 6, "mu": None}}]


def test_a_left_out_labeller_is_not_trained_on_and_keeps_their_labels(tmp_path):
    """--leave_out: the trainer skips a person's labels, from the store and as they arrive."""
    from reward_predictor.config import TrainerConfig
    from reward_predictor.process import _set_up
    from tests.helpers import moving_dot_pref

    rng = np.random.default_rng(0)
    path = tmp_path / "prefs.sqlite"
    with PreferenceStore(path) as store:
        for k in range(9):
            pref = moving_dot_pref(rng, is_validation=k % 3 == 0)
            store.add(Preference(pref.left, pref.right, pref.mu, "human", pref.is_validation,
                                 labeller=PEOPLE[k % 3]))
    config = TrainerConfig(env_kind="moving_dot", ensemble_size=1, left_out=("ann",))
    trainer = _set_up(config, 1, str(path))
    assert trainer.n_train + trainer.n_val == 6  # ann's three labels left out
    with PreferenceStore(path, create=False) as store:
        assert store.labellers() == {"ann": 3, "bob": 3, "cy": 3}
    everyone = _set_up(TrainerConfig(env_kind="moving_dot", ensemble_size=1), 1, str(path))
    assert everyone.n_train + everyone.n_val == 9
    # the budget of labels held counts only the others': the newest 4 of bob's and cy's six
    few = _set_up(TrainerConfig(env_kind="moving_dot", ensemble_size=1, left_out=("ann",),
                                max_prefs=4), 1, str(path))
    assert few.n_train + few.n_val == 4


def test_a_left_out_labellers_labels_are_skipped_as_they_arrive_and_still_counted(tmp_path):
    """--leave_out on labels that reach the running trainer, not only those loaded at its start."""
    from types import SimpleNamespace

    from reward_predictor.config import TrainerConfig, TrainerStats
    from reward_predictor.process import PredictorTraining
    from reward_predictor.shared import SharedWeights
    from tests.helpers import moving_dot_pref

    ctx = mp.get_context("spawn")
    config = TrainerConfig(env_kind="moving_dot", ensemble_size=1, left_out=("ann",))
    arriving: queue.Queue = queue.Queue()
    channels = SimpleNamespace(preferences=arriving, reward_weights=SharedWeights(ctx),
                               stop=ctx.Event())
    training = PredictorTraining(config, channels, stats=TrainerStats.create(ctx),
                                 log_dir=str(tmp_path))
    try:
        rng = np.random.default_rng(0)
        for k in range(9):
            pref = moving_dot_pref(rng, is_validation=k % 3 == 0)
            arriving.put(Preference(pref.left, pref.right, pref.mu, "human", pref.is_validation,
                                    labeller=PEOPLE[k % 3]))
        wait_until(lambda: (training.take_labels(), training.stats.labels_received.value)[1] == 9,
                   10, "the nine labels taken")  # ... each counted as received
        assert training.trainer.n_train + training.trainer.n_val == 6  # ann's three skipped
    finally:
        training.telemetry.close()
        channels.reward_weights.release()


def test_agreement_with_the_ensemble_and_from_the_stored_labels():
    a = Agreement()
    a.add_ensemble("ann", 1.0, 0.8)  # agrees
    a.add_ensemble("ann", 0.0, 0.8)  # does not
    a.add_ensemble("ann", 0.5, 0.8)  # "as good": no clear answer to compare
    assert a.shares() == {"ann-ensemble": 0.5}
    assert a.described() == "ann-ensemble 50% of 2"
    x, y, z = clip(1), clip(2), clip(3)
    labels = [Preference(x, y, 1.0, "human", labeller="ann"),
              Preference(y, x, 0.0, "human", labeller="bob"),  # the same answer, shown swapped
              Preference(x, z, 1.0, "human", labeller="ann"),
              Preference(x, z, 0.5, "human", labeller="cy"),
              Preference(y, z, 1.0, "human", labeller="cy")]  # one person only: no pair
    assert stored_agreement(labels).shares() == {"ann-bob": 1.0, "ann-cy": 0.0}
    # The ensemble's answer kept with a label counts as it did live, across resumes.
    u, v = clip(4), clip(5)  # pairs nobody else labelled
    labels += [Preference(u, v, 1.0, "human", labeller="bob", ensemble_p=0.9),
               Preference(v, u, 1.0, "human", labeller="bob", ensemble_p=0.3),
               Preference(u, x, 0.5, "human", labeller="bob", ensemble_p=0.7)]  # no clear answer
    assert stored_agreement(labels).described() == ("ann-bob 100% of 1, ann-cy 0% of 1, "
                                                    "bob-ensemble 50% of 2")


def test_each_label_keeps_the_ensembles_answer_when_the_person_gave_it(tmp_path):
    # The ensemble's P[left better] goes into the store with the label, so that the run's
    # summary counts agreement with it over every start; a diverged ensemble's (NaN) is not kept.
    updates, answers, clips = queue.Queue(), queue.Queue(), queue.Queue()
    page = FakePage(updates, answers)
    for v in range(40):
        clips.put(clip(v))

    def predict(lefts, rights):  # one member; NaN for a left clip of an odd value
        v = int(lefts[0].frames()[0, 0, 0])
        return np.array([[0.8 if v % 2 == 0 else np.nan]])

    config = LabellingConfig(seed=0, val_fraction=0.0, max_pairs_per_clip=None, max_clips=40,
                             labellers=tuple(PEOPLE), overlap=0.0, page_updates=updates,
                             stop_after_labels=20)
    labels = labelled(page, config, clips, str(tmp_path / "prefs.sqlite"),
                      stats=LabellingStats.create(mp.get_context("spawn")),
                      labeller=Team(PEOPLE, updates, answers), make_predictor=lambda: predict)
    kept = {int(p.left.frames()[0, 0, 0]) % 2: p.ensemble_p for p in labels}
    assert len(labels) == 20 and kept == {0: 0.8, 1: None}
    assert any(k.endswith("-ensemble") for k in stored_agreement(labels).shares())


def test_a_teams_pairs_are_planned_within_the_answers_wanted_before_any_is_drawn():
    """With --overlap a pair may take two answers: the plan says how many pairs to draw, so
    every pair drawn is opened (a drawn pair counts as offered)."""
    from pref_interface.labellers.team import Team

    rng = np.random.default_rng(0)
    team = Team(["ann", "bob"], queue.Queue(), queue.Queue())
    assert team.plan(5, rng, overlap=1.0) == [2, 2, 1]
    assert team.plan(3, rng, overlap=0.0) == [1, 1, 1]
    assert team.plan(0, rng, overlap=0.5) == []
    for budget in range(1, 20):
        copies = team.plan(budget, rng, overlap=0.5)
        assert sum(copies) == budget and set(copies) <= {1, 2}
    # a team of one: a second copy would hold an answer of the budget for ever
    assert Team(["ann"], queue.Queue(), queue.Queue()).plan(3, rng, overlap=1.0) == [1, 1, 1]
