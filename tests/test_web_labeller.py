"""The labelling page (--clip_player web): sprites, the server's rules, the labeller's page
tokens, label edits reaching the store and the trainer, and the page in a real browser."""
from __future__ import annotations

import io
from contextlib import contextmanager
import json
import multiprocessing as mp
import queue
import secrets
import tempfile
import threading
import time
import urllib.error
import urllib.request

import matplotlib.image
import numpy as np
import pytest

from clips.clip import LabelEdit, Preference
from pref_interface.labellers.human import HumanLabeller
from pref_interface.labellers.keys import ENTER, PairAnswer, ReinsertClip, ReopenLabel
from pref_interface.labellers.web.headless import browser_missing, headless_page, labelling_run
from pref_interface.labellers.web.player import WebPlayer, clip_name, parse_clip_name
from pref_interface.labellers.web.server import LabellingPage
from tests.helpers import drained, http_call, wait_until
from pref_interface.labellers.web.sprites import sprite_png
from pref_interface.labelling import LabelEditor
from pref_interface.queries.sorting import ClipSorter, rebuild_sorters
from pref_interface.store import PreferenceStore
from reward_predictor import MovingDotRewardNet, RewardPredictorEnsemble, RewardPredictorTrainer
from tests.test_human_labeller import RecordingPlayer, clip

# ---- sprites and the player -----------------------------------------------------------------

def test_a_sprite_is_a_png_of_every_frame_top_to_bottom():
    frames = np.random.default_rng(0).integers(0, 256, (25, 84, 84), dtype=np.uint8)
    png = sprite_png(frames)
    back = np.round(matplotlib.image.imread(io.BytesIO(png)) * 255).astype(np.uint8)
    assert back.shape == (25 * 84, 84) and np.array_equal(back.reshape(25, 84, 84), frames)


def test_a_preloaded_pair_is_shown_under_its_id_without_sending_its_clips_again():
    updates: queue.Queue = queue.Queue()
    player = WebPlayer(updates)
    assert updates.get_nowait() == {"labelling": True}
    a, b, c = (clip(v).frames()[3:] for v in (255, 128, 60))
    player.load(a, b)
    first = updates.get_nowait()
    assert "sprites" in first and first["next"] is None
    player.preload(b, c)
    preload = updates.get_nowait()
    player.load(b, c)
    shown = updates.get_nowait()
    assert shown["pair"]["id"] == preload["next"]["id"] == player.pair_id
    assert "sprites" not in shown and shown["next"] is None
    player.preload(a, c)
    updates.get_nowait()
    player.load(c, a)  # not the preloaded pair: new id, clips sent
    other = updates.get_nowait()
    assert "sprites" in other and other["pair"]["id"] not in (first["pair"]["id"],
                                                              preload["next"]["id"])


# ---- the server ------------------------------------------------------------------------------

@pytest.fixture
def page():
    server = LabellingPage().start(queue.Queue(), queue.Queue())
    server.apply({"labelling": True})  # as a labelling process's player says when it starts
    server.apply({"pair": {"id": "p1", "frames": [25, 25]}, "next": None,
                  "sprites": (b"left-png", b"right-png"), "history": [{"id": 7, "mu": 1.0}]})
    yield server
    server.stop()


def request(page: LabellingPage, path: str, body: dict | bytes | None = None,
            token: str | None = "page") -> tuple[int, bytes]:
    token = page.token if token == "page" else token
    sep = "&" if "?" in path else "?"
    url = page.url.split("/?")[0] + path + (f"{sep}token={token}" if token is not None else "")
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    return http_call(url, data)


def test_the_page_listens_on_loopback_only_by_default(page):
    assert page.url.startswith("http://127.0.0.1:") and f"token={page.token}" in page.url


@pytest.mark.parametrize("path", ["/", "/state", "/clip?pair=p1&side=left", "/answer"])
@pytest.mark.parametrize("token", [None, "", "wrong"])
def test_every_request_without_the_token_is_refused_and_changes_nothing(page, path, token):
    body = {"pair": "p1", "key": "L", "nonce": secrets.token_hex(8)} if path == "/answer" else None
    status, _ = request(page, path, body, token=token)
    assert status == 403
    assert drained(page.answers) == [] and not page.state()["answered"]


@pytest.mark.parametrize("path", ["/page.html", "/../../etc/passwd",
                                  "/pref_interface/labellers/web/page.html", "/clip?pair=p1&side=../../x"])
def test_no_path_of_the_machine_is_served(page, path):
    assert request(page, path)[0] == 404


def test_the_page_and_the_clips_of_the_pair_shown_are_served(page):
    status, html = request(page, "/")
    assert status == 200 and b"Which clip is better?" in html
    assert request(page, "/clip?pair=p1&side=right") == (200, b"right-png")
    state = json.loads(request(page, "/state?since=0")[1])
    assert state["pair"]["id"] == "p1" and state["history"] == [{"id": 7, "mu": 1.0}]


def test_a_state_request_waits_for_a_change(page):
    version = page.state()["version"]
    threading.Timer(0.2, page.apply, [{"status": ["pair 2"]}]).start()
    state = json.loads(request(page, f"/state?since={version}")[1])
    assert state["version"] > version and state["status"] == ["pair 2"]


@pytest.mark.parametrize("team", [False, True])
def test_when_the_run_ends_a_waiting_page_is_told_so_before_the_server_goes(team):
    """The page stops asking once a state says `ended` (page.html), so it does not retry for ever
    at an address that no longer answers."""
    server = LabellingPage(labellers=["ann", "bob"] if team else None).start(queue.Queue(),
                                                                           queue.Queue())
    token = server.view.tokens()["ann" if team else None]
    url = server.url.split("/?")[0]
    version = server.state(labeller="ann" if team else None)["version"]
    got = {}

    def wait() -> None:
        got["reply"] = http_call(f"{url}/state?since={version}&token={token}", None)

    waiting = threading.Thread(target=wait)
    waiting.start()
    wait_until(lambda: server._polls == 1, 5, "the state request to wait for a change")
    server.stop()
    waiting.join(5)
    status, body = got["reply"]
    state = json.loads(body)
    assert status == 200 and state["ended"] and state["pair"] is None
    assert "the run has ended" in state["notice"]
    server.apply({"notice": "no pair to label now", "pair": None})  # a late update: not shown
    assert "the run has ended" in server.state(labeller="ann" if team else None)["notice"]


def test_a_page_between_two_requests_when_the_run_ends_is_told_so_too(monkeypatch):
    """A page that has just had a reply asks again at once: the end waits for that request, so
    the page reads "the run has ended", not a server gone."""
    from pref_interface.labellers.web import server as web_server

    # the page's next request within the waits, however slowly a loaded machine starts it
    monkeypatch.setattr(web_server, "NEXT_POLL_S", 2.0)
    monkeypatch.setattr(web_server, "ENDED_GRACE_S", 5.0)
    server = LabellingPage().start(queue.Queue(), queue.Queue())
    token = server.view.tokens()[None]
    url = server.url.split("/?")[0]
    status, body = http_call(f"{url}/state?since=0&token={token}", None)
    version = json.loads(body)["version"]
    got = {}

    def ask_again() -> None:  # the page renders the reply, then asks again
        time.sleep(0.1)
        got["reply"] = http_call(f"{url}/state?since={version}&token={token}", None)

    asking = threading.Thread(target=ask_again)
    asking.start()
    server.stop()
    asking.join(5)
    status, body = got["reply"]
    assert status == 200 and json.loads(body)["ended"], (status, body)


def test_a_pair_takes_one_answer_and_a_replayed_or_second_answer_is_refused(page):
    nonce = secrets.token_hex(8)
    assert request(page, "/answer", {"pair": "p1", "key": "L", "nonce": nonce})[0] == 200
    assert request(page, "/answer", {"pair": "p1", "key": "L", "nonce": nonce})[0] == 409
    # another tab, same pair, its own request
    assert request(page, "/answer", {"pair": "p1", "key": "R",
                                     "nonce": secrets.token_hex(8)})[0] == 409
    assert request(page, "/answer", {"pair": "old", "key": "R",
                                     "nonce": secrets.token_hex(8)})[0] == 409
    assert drained(page.answers) == [PairAnswer("p1", "L")]


@pytest.mark.parametrize("body", [b"not json", b"[1, 2]", {"pair": "p1", "nonce": "n" * 16},
                                  {"pair": "p1", "key": "X", "nonce": "n" * 16},
                                  {"pair": "p1", "key": "L"}, {"pair": 1, "key": "L", "nonce": "n" * 16}])
def test_a_malformed_answer_is_refused_and_changes_nothing(page, body):
    assert request(page, "/answer", body)[0] == 400
    assert drained(page.answers) == [] and not page.state()["answered"]


def test_space_answers_incomparable(page):
    assert request(page, "/answer", {"pair": "p1", "key": "incomparable",
                                     "nonce": secrets.token_hex(8)})[0] == 200
    assert drained(page.answers) == [PairAnswer("p1", ENTER)]


def test_only_listed_labels_can_be_edited_or_shown_again_and_only_once_per_request(page):
    nonce = secrets.token_hex(8)
    assert request(page, "/edit", {"label": 7, "answer": "E", "nonce": nonce})[0] == 200
    assert request(page, "/edit", {"label": 7, "answer": "E", "nonce": nonce})[0] == 409
    assert request(page, "/edit", {"label": 8, "answer": "E",
                                   "nonce": secrets.token_hex(8)})[0] == 404
    assert request(page, "/edit", {"label": 7, "answer": "maybe",
                                   "nonce": secrets.token_hex(8)})[0] == 400
    assert request(page, "/edit", {"label": 7, "answer": "delete",
                                   "nonce": secrets.token_hex(8)})[0] == 200
    assert request(page, "/reopen", {"label": 7, "nonce": secrets.token_hex(8)})[0] == 200
    assert drained(page.answers) == [LabelEdit(7, 0.5), LabelEdit(7, None), ReopenLabel(7)]
    # Between phases or after Ctrl-D no labelling process would take a change: the page is told
    # (its list's buttons are off) and a change is refused.
    assert page.state()["labelling"] is True
    page.apply({"pair": None, "next": None, "labelling": False, "notice": "no pair to label now"})
    assert page.state()["labelling"] is False
    for path, body in (("/edit", {"label": 7, "answer": "E"}), ("/reopen", {"label": 7})):
        status, reply = request(page, path, {**body, "nonce": secrets.token_hex(8)})
        assert status == 409 and b"labelling is not running now" in reply
    assert drained(page.answers) == []


def sorted_page(page: LabellingPage, classes: list[list[str]], thumbs: dict) -> None:
    page.apply({"order": [{"split": "training", "classes": classes, "inserting": None,
                           "path": [], "interval": None, "reinserting": []}], "thumbs": thumbs})


def test_only_sorted_clips_thumbnails_are_served_and_only_they_can_be_inserted_again(page):
    sorted_page(page, [["t1"], ["t2", "t3"]], {"t1": b"1", "t2": b"2", "t3": b"3"})
    assert request(page, "/thumb?clip=t2") == (200, b"2")
    sorted_page(page, [["t1"], ["t3"]], {})  # t2 evicted: its thumbnail goes too
    assert request(page, "/thumb?clip=t2")[0] == 404 and request(page, "/thumb?clip=t3")[0] == 200
    nonce = secrets.token_hex(8)
    assert request(page, "/reinsert", {"clip": "t3", "nonce": nonce})[0] == 200
    assert request(page, "/reinsert", {"clip": "t3", "nonce": nonce})[0] == 409
    for bad, status in (("t2", 404), ("v1", 404), ("x1", 400), (3, 400)):
        assert request(page, "/reinsert", {"clip": bad, "nonce": secrets.token_hex(8)})[0] == status
    assert drained(page.answers) == [ReinsertClip(False, 3)]


def test_the_player_names_sorted_clips_by_split_and_sends_each_thumbnail_once():
    assert parse_clip_name(clip_name(True, -4, "9")) == (True, -4) and parse_clip_name("t") is None
    sorters = {False: ClipSorter(10), True: ClipSorter(10)}
    for i in range(3):
        sorters[False].offer(i, clip(40 * i + 10))
    sorters[True].offer(7, clip(250))
    query = sorters[False].next_query()
    updates: queue.Queue = queue.Queue()
    player = WebPlayer(updates)
    assert clip_name(False, 0, WebPlayer(updates).prefix) == clip_name(False, 0, player.prefix)
    drained(updates)  # each player's {"labelling": True}
    player.prefix = "p"  # each phase's player has its own (clip ids start again at 0)

    def n(names):  # "t0" -> "p:t0", in lists and lists of lists
        return [n(x) for x in names] if isinstance(names, list) else f"p:{names}"

    player.show_order(sorters)
    first = updates.get_nowait()
    training, validation = first["order"]
    assert training["classes"] == n([["t0"]])
    assert training["inserting"] == n(f"t{query[0]}") == n("t1")
    assert training["upcoming"] == n("t2")  # the next clip to place: its thumbnail is sent ahead
    assert validation == {"split": "validation", "classes": n([["v7"]]), "inserting": None,
                          "upcoming": None, "path": [], "interval": None, "reinserting": []}
    assert set(first["thumbs"]) == set(n(["t0", "t1", "t2", "v7"]))
    played = [sorters[False].clip(i).step_frames() for i in (0, 1)]
    assert sprite_png(played[1]) == first["thumbs"][n("t1")]  # the frames a pair plays
    player.load(played[1], played[0])  # a pair of clips the page holds: sent by name
    pair = updates.get_nowait()
    assert pair["pair"]["thumbs"] == n(["t1", "t0"]) and "sprites" not in pair
    sorters[False].answer(1.0)
    player.show_order(sorters)
    second = updates.get_nowait()
    assert second["order"][0]["classes"] == n([["t0"], ["t1"]]) and second["thumbs"] == {}
    player.show_order(sorters)  # nothing changed: nothing sent
    assert updates.empty()
    sorters[False].next_query()  # clip 2's insertion starts: the page has its thumbnail
    sorters[False].offer(3, clip(77))
    player.show_order(sorters)
    third = updates.get_nowait()
    assert third["order"][0]["inserting"] == n("t2") and set(third["thumbs"]) == {n("t3")}
    player.load(played[0], clip(99).frames()[3:])  # not a sorted clip: sprites sent
    assert "sprites" in updates.get_nowait()
    twin = ClipSorter(10)  # two sorted clips with the same frames: each thumbnail sent once
    twin.offer(20, clip(50))
    twin.offer(21, clip(50))
    twin.next_query()
    twin.answer(0.5)
    player.show_order({False: twin, True: ClipSorter(10)})
    assert len(updates.get_nowait()["thumbs"]) == 2
    player.show_order({False: twin, True: ClipSorter(10)})
    assert updates.empty()


# ---- the labeller and the store ----------------------------------------------------------------

class PagePlayer(RecordingPlayer):
    """A RecordingPlayer that names each pair it loads, as the WebPlayer does."""

    def load(self, left, right):
        super().load(left, right)
        self.pair_id = f"p{len(self.loaded)}"


def test_an_answer_from_the_page_labels_only_the_pair_it_was_given_for():
    answers: queue.Queue = queue.Queue()
    for token in (PairAnswer("p0", "L"), PairAnswer("p1", "R")):
        answers.put(token)
    lab = HumanLabeller(answers, PagePlayer(), fps=200.0, keep_typed_ahead=True)
    assert lab.label(clip(255), clip(128)) == 0.0  # the stale answer for p0 was dropped


@pytest.mark.parametrize("answer, mu", [("R", 0.0), ("incomparable", None), (None, None)])
def test_an_answer_the_page_took_as_the_run_stopped_is_still_returned_to_be_stored(answer, mu):
    """The person answers and the run stops before labelling has read the answer: the pair is
    withdrawn from the page (which then refuses answers to it) and the answer taken before
    still labels it; without one the labeller ends as soon as the page has withdrawn it."""
    from launch.stopping import StopFlag
    from pref_interface.labellers.keys import PairWithdrawn
    from pref_interface.labellers.web.core import RequestError

    stop = StopFlag(mp.get_context("spawn"))
    answers: queue.Queue = queue.Queue()
    page = LabellingPage().start(answers, queue.Queue())

    class AnsweredAsTheRunStops(WebPlayer):
        def load(self, left, right):
            super().load(left, right)
            wait_until(lambda: page.state(0, 0.1)["pair"] is not None, 30, "the pair on the page")
            if answer is not None:
                page.answer({"pair": self.pair_id, "key": answer, "nonce": secrets.token_hex(8)})
            stop.set()

    try:
        player = AnsweredAsTheRunStops(page.updates)
        lab = HumanLabeller(answers, player, stop_event=stop, fps=200.0, keep_typed_ahead=True)
        t0 = time.monotonic()
        assert lab.label(clip(255), clip(128)) == mu
        assert time.monotonic() - t0 < 4  # not the whole wait: the page's word came
        assert lab.unanswered_at_stop == (answer is None)
        wait_until(lambda: page.state(0, 0.1)["pair"] is None, 10, "the pair withdrawn")
        with pytest.raises(RequestError):
            page.answer({"pair": player.pair_id, "key": "L", "nonce": secrets.token_hex(8)})
        if answer is not None:  # the page's word follows the answer
            assert wait_until(lambda: drained(answers), 10, "the withdrawal") == [
                PairWithdrawn(player.pair_id)]
        assert answers.empty()
    finally:
        page.stop()


def test_a_label_asked_again_as_the_run_stops_takes_the_answer_the_page_took():
    """Stopped while a stored label is asked again: an answer the page took replaces the label,
    and the pair asked before is not shown back."""
    from launch.stopping import StopFlag
    from pref_interface.labellers.keys import PairWithdrawn

    stop = StopFlag(mp.get_context("spawn"))

    class Withdrawing(HistoryPlayer):
        """Answered R as the run stops, then withdrawn, as the page would put them."""

        def load(self, left, right):
            super().load(left, right)
            if len(self.loaded) == 2:  # the label asked again
                stop.set()

        def withdraw(self):
            answers.put(PairAnswer(self.pair_id, "R"))
            answers.put(PairWithdrawn(self.pair_id))

    with page_labeller() as (lab, answers, player, store, ids):
        lab.player = Withdrawing()
        lab.stop_event = stop
        answers.put(ReopenLabel(ids[1]))
        assert lab.label(clip(10), clip(20)) is None
        assert store.recent_answers(10) == [(ids[1], 0.0), (ids[0], 1.0)]
        assert len(lab.player.loaded) == 2


def test_a_reinsert_from_the_page_reaches_the_interface_and_leaves_the_pair_up():
    answers: queue.Queue = queue.Queue()
    for token in (ReinsertClip(True, 5), PairAnswer("p1", "L")):
        answers.put(token)
    player = PagePlayer()
    lab = HumanLabeller(answers, player, fps=200.0, keep_typed_ahead=True)
    asked = []
    lab.reinsert = lambda split, clip_id: asked.append((split, clip_id)) or "queued"
    assert lab.label(clip(255), clip(128)) == 1.0
    assert asked == [(True, 5)] and len(player.loaded) == 1


def test_between_pairs_the_pages_requests_are_taken_and_stray_keys_dropped():
    from pref_interface.labellers.keys import EOF
    from pref_interface.labelling import LabellingStopped

    answers: queue.Queue = queue.Queue()
    for token in ("L", ReinsertClip(False, 3), "R"):
        answers.put(token)
    lab = HumanLabeller(answers, PagePlayer(), fps=200.0)
    asked = []
    lab.reinsert = lambda split, clip_id: asked.append((split, clip_id)) or "queued"
    lab.idle()
    assert asked == [(False, 3)] and answers.empty() and lab.last == "queued"
    answers.put(EOF)
    with pytest.raises(LabellingStopped):
        lab.idle()
    piped: queue.Queue = queue.Queue()
    piped.put("L")
    HumanLabeller(piped, PagePlayer(), keep_typed_ahead=True).idle()
    assert piped.get_nowait() == "L"  # piped answers wait for their pair


def stored_labels(path: str, n: int, swapped: tuple[int, ...] = ()) -> list[int]:
    """`n` labels, left clip(200) better; those numbered in `swapped` were seen right clip first."""
    left = clip(200)
    with PreferenceStore(path) as store:
        return [store.add(Preference(left, clip(100 + k), 1.0, "human",
                                     shown_swapped=True if k in swapped else None))
                for k in range(n)]


def test_an_edit_goes_to_the_store_then_to_the_trainer():
    with tempfile.TemporaryDirectory() as tmp:
        path = f"{tmp}/prefs.sqlite"
        ids = stored_labels(path, 3)
        sent: queue.Queue = queue.Queue()
        with PreferenceStore(path) as store:
            editor = LabelEditor(store, sent)
            assert editor.edit(LabelEdit(ids[0], 0.0)) and editor.edit(LabelEdit(ids[1], None))
            assert not editor.edit(LabelEdit(999, 0.5))
            assert editor.recent(10) == [(ids[2], 1.0), (ids[0], 0.0)]
        assert drained(sent) == [LabelEdit(ids[0], 0.0), LabelEdit(ids[1], None)]


class HistoryPlayer(PagePlayer):
    """A PagePlayer that keeps the label list it was last given."""

    def show_history(self, history):
        self.history = history


@contextmanager
def page_labeller(keep_typed_ahead: bool = True, swapped: tuple[int, ...] = ()):
    """A person's labeller on the page over a store of two labels (left clip(200) better; those
    numbered in `swapped` seen right clip first): (labeller, answers, player, store, label ids)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = f"{tmp}/prefs.sqlite"
        ids = stored_labels(path, 2, swapped)
        answers: queue.Queue = queue.Queue()
        with PreferenceStore(path) as store:
            player = HistoryPlayer()
            lab = HumanLabeller(answers, player, fps=200.0, keep_typed_ahead=keep_typed_ahead,
                                labels=LabelEditor(store, None))
            yield lab, answers, player, store, ids


def test_undo_shows_the_last_pair_again_and_its_new_answer_replaces_the_label():
    with page_labeller() as (lab, answers, player, store, ids):
        # shown: p1 (the new pair); undo reopens label ids[1] as p2; its answer E replaces
        # it; p1 comes back as p3 and is answered R
        for token in (ReopenLabel(ids[1]), PairAnswer("p2", "E"), PairAnswer("p3", "R")):
            answers.put(token)
        assert lab.label(clip(10), clip(20)) == 0.0
        assert store.recent_answers(10) == [(ids[1], 0.5), (ids[0], 1.0)]
        answers.put(ReopenLabel(ids[0]))
        answers.put(PairAnswer("p5", ENTER))  # incomparable deletes the reopened label
        answers.put(PairAnswer("p6", "L"))
        assert lab.label(clip(10), clip(20)) == 1.0
        assert store.recent_answers(10) == [(ids[1], 0.5)]


def test_undo_between_pairs_asks_the_last_label_again_at_once():
    """No pair on screen (labelling waits for clips): U still shows the last labelled pair."""
    with page_labeller(keep_typed_ahead=False) as (lab, answers, player, store, ids):
        answers.put(ReopenLabel(ids[1]))
        answers.put(PairAnswer("p1", "R"))
        lab.idle()
        assert len(player.loaded) == 1 and lab.last == f"label {ids[1]}: now right better"
        assert store.recent_answers(10) == [(ids[1], 0.0), (ids[0], 1.0)]


def test_a_pair_shown_swapped_is_listed_changed_and_asked_again_as_the_person_saw_it():
    """Sorting shows a person the clip being placed on either side, while the store keeps it on
    the left: the page's list, its L/E/R buttons and "show again" follow the sides seen, which
    the store keeps (a labeller of a later phase, or of the run resumed, knows them too)."""
    # ids[1]: clip(200) was shown on the right and R was pressed
    with page_labeller(swapped=(1,)) as (lab, answers, player, store, ids):
        lab.stored(ids[1])
        assert player.history == [(ids[1], 0.0), (ids[0], 1.0)]
        # "L" on the list for ids[1]: the clip seen on the left, the stored right, is better
        for token in (LabelEdit(ids[1], 1.0), PairAnswer("p1", "E")):
            answers.put(token)
        assert lab.label(clip(10), clip(20)) == 0.5
        assert store.recent_answers(10) == [(ids[1], 0.0), (ids[0], 1.0)]
        assert player.history == [(ids[1], 1.0), (ids[0], 1.0)]
        for token in (ReopenLabel(ids[1]), PairAnswer("p3", "R"), PairAnswer("p4", "L")):
            answers.put(token)
        assert lab.label(clip(10), clip(20)) == 1.0
        reopened = player.loaded[2]  # asked again with the sides it was seen with
        assert np.array_equal(reopened[0], clip(101).step_frames())
        assert np.array_equal(reopened[1], clip(200).step_frames())
        # R on that pair again: the stored left, clip(200), is better once more
        assert store.recent_answers(10) == [(ids[1], 1.0), (ids[0], 1.0)]
        assert player.history == [(ids[1], 0.0), (ids[0], 1.0)]


def test_the_trainer_applies_an_edit_to_the_label_it_holds():
    trainer = RewardPredictorTrainer(RewardPredictorEnsemble(MovingDotRewardNet, ensemble_size=1))
    for k in range(3):
        trainer.add(Preference(clip(10 + k), clip(100 + k), 1.0, "human", k == 2, label_id=k))
    assert trainer.edit(LabelEdit(0, 0.5)) and trainer.edit(LabelEdit(2, None))
    assert trainer.edit(LabelEdit(1, None)) and not trainer.edit(LabelEdit(7, 0.0))
    assert trainer.n_train == 1 and trainer.n_val == 0 and len(trainer.clips) == 2
    assert len(trainer.bootstrap_counts()) == 1 and trainer.held_labels()[0].mu == 0.5


# ---- in a browser -------------------------------------------------------------------------------

@pytest.mark.skipif(browser_missing() is not None, reason=str(browser_missing()))
def test_a_person_labels_in_the_browser_and_the_store_holds_exactly_what_was_pressed(tmp_path):
    with labelling_run(["gather_initial_prefs", "MovingDotNoFrameskip-v0", "--n_initial_prefs",
                        "4", "--log_dir", str(tmp_path / "run")],
                       open(tmp_path / "run.log", "w+")) as (proc, url):
        with headless_page() as page:
            page.goto(url)
            shown = None

            def next_pair() -> str:
                page.wait_for_function("window.labelling.canAnswer() && "
                                       f"window.labelling.shownPair !== {json.dumps(shown)}",
                                       timeout=60_000)
                return page.evaluate("window.labelling.shownPair")

            shown = next_pair()
            assert request_url(url.split("?")[0] + "state")[0] == 403  # not without the token
            drawn = page.evaluate("window.labelling.framesDrawn")
            page.wait_for_function(f"window.labelling.framesDrawn.left > {drawn['left'] + 5} && "
                                   f"window.labelling.framesDrawn.right > {drawn['right'] + 5}")
            for side in ("left", "right"):  # both clips play: their frames change, not blank
                lit = page.evaluate(f"""() => {{ const c = document.getElementById('{side}');
                    const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
                    return d.some((v, i) => i % 4 !== 3 && v > 0); }}""")
                assert lit
            # L, R, E, Space (not stored), undo (label 3 again: now R), E
            keys = ("L", "R", "E", "Space", "U", "R", "E")
            for k, key in enumerate(keys):
                page.keyboard.press(key)
                if k < len(keys) - 1:  # the last label ends the gathering: no next pair
                    shown = next_pair()
        assert proc.wait(60) == 0
    with PreferenceStore(tmp_path / "run" / "prefs.sqlite", create=False) as store:
        assert [mu for _, mu in reversed(store.recent_answers(10))] == [1.0, 0.0, 0.0, 0.5]
        assert all(p.source == "human" for p in store.latest(10))


@pytest.mark.skipif(browser_missing() is not None, reason=str(browser_missing()))
def test_an_answer_the_run_never_got_leaves_its_pair_to_be_answered_again(tmp_path):
    """The next pair shows the moment a key is pressed; when the answer does not reach the run
    (a dropped connection), the page goes back to the pair the run still asks, not frozen."""
    with labelling_run(["gather_initial_prefs", "MovingDotNoFrameskip-v0", "--n_initial_prefs",
                        "2", "--log_dir", str(tmp_path / "run")],
                       open(tmp_path / "run.log", "w+")) as (proc, url):
        with headless_page() as page:
            page.goto(url)
            page.wait_for_function("window.labelling.canAnswer() && "
                                   "window.labelling.preloadedPair() !== null", timeout=60_000)
            first = json.dumps(page.evaluate("window.labelling.shownPair"))
            page.route("**/answer?*", lambda route: route.abort())
            page.keyboard.press("L")
            page.wait_for_function(f"window.labelling.shownPair !== {first}")  # shown early
            page.wait_for_function(f"window.labelling.shownPair === {first} && "
                                   "window.labelling.canAnswer()", timeout=60_000)
            page.unroute("**/answer?*")
            page.keyboard.press("R")
            page.wait_for_function(f"window.labelling.shownPair !== {first} && "
                                   "window.labelling.canAnswer()", timeout=60_000)
            page.keyboard.press("E")
        assert proc.wait(60) == 0
    with PreferenceStore(tmp_path / "run" / "prefs.sqlite", create=False) as store:
        assert [mu for _, mu in reversed(store.recent_answers(10))] == [0.0, 0.5]


def request_url(url: str) -> tuple[int | None, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except OSError:
        return None, b""


@pytest.mark.skipif(browser_missing() is not None, reason=str(browser_missing()))
def test_a_person_sorting_clips_sees_them_in_order_and_inserts_one_again(tmp_path):
    chosen, seen_inserting = None, False
    with labelling_run(["gather_initial_prefs", "MovingDotNoFrameskip-v0", "--n_initial_prefs",
                        "12", "--queries", "sort", "--log_dir", str(tmp_path / "run")],
                       open(tmp_path / "run.log", "w+")) as (proc, url):
        with headless_page() as page:
            page.goto(url)
            shown = None
            for _ in range(40):
                page.wait_for_function(
                    "(window.labelling.canAnswer() && "
                    f"window.labelling.shownPair !== {json.dumps(shown)}) || "
                    f"({json.dumps(shown)} !== null && "
                    "document.getElementById('notice').style.display === 'block')",
                    timeout=60_000)
                if not page.evaluate("window.labelling.canAnswer()"):
                    break  # the last label was stored: the run has ended
                shown = page.evaluate("window.labelling.shownPair")
                training = page.evaluate("window.labelling.order")[0]
                seen_inserting = seen_inserting or training["inserting"] == chosen
                sorted_clips = [n for c in training["classes"] for n in c]
                if chosen is None and len(sorted_clips) >= 3:
                    # the thumbnails play: drawn again and again, and not blank
                    drawn = page.evaluate("window.labelling.thumbsDrawn")
                    page.wait_for_function(f"window.labelling.thumbsDrawn > {drawn + 20}")
                    assert page.evaluate("""() => [...document.querySelectorAll('.cls canvas')]
                        .some((c) => c.getContext('2d').getImageData(0, 0, 84, 84).data
                                      .some((v, i) => i % 4 !== 3 && v > 0))""")
                    chosen = sorted_clips[0]
                    page.click(f'button[data-reinsert="{chosen}"]')
                    page.wait_for_function(
                        "(({n}) => {const o = window.labelling.order[0];"
                        " return o.reinserting.includes(n) || o.inserting === n;})"
                        f"({{n: {json.dumps(chosen)}}})")
                page.keyboard.press("L")
        assert proc.wait(60) == 0
    assert chosen is not None and seen_inserting
    with PreferenceStore(tmp_path / "run" / "prefs.sqlite", create=False) as store:
        assert len(store) == 12
        rebuilt = rebuild_sorters(store.iter_latest(len(store)), max_clips=3000)
    assert rebuilt[False].n_reinserted == 1 and rebuilt[False].n_skipped == 0
