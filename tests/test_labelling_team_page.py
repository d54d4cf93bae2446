"""The labelling page serving several people (`labellers`): a token and a state each, every open
pair to `copies` different people, the pairs of one who leaves to the others, and no person
answering, seeing or editing what is another's. Plain HTTP against a real server."""
from __future__ import annotations

import json
import queue
import secrets
import threading
from collections import Counter

import numpy as np
import pytest

from clips.clip import LabelEdit
from pref_interface.labellers.keys import ENTER, PairAnswer
from pref_interface.labellers.web.server import LabellingPage
from pref_interface.labellers.web.sprites import sprite_png
from tests.helpers import drained, http_call, wait_until

TIMEOUT_S = 3.0  # gone after this long without a request: long beside a loaded machine's stalls
KEYS = ["L", "R", "E", "incomparable"]


def png(value: int) -> bytes:
    return sprite_png(np.full((1, 1, 1), value % 256, np.uint8))


def open_pair(page: LabellingPage, n: int, copies: int = 1) -> str:
    """Open pair "p<n>", as the labelling process does, through the updates queue."""
    page.updates.put({"open": {"id": f"p{n}", "frames": [1, 1], "copies": copies},
                      "sprites": (png(2 * n), png(2 * n + 1))})
    return f"p{n}"


@pytest.fixture
def team():
    seen: list[tuple] = []
    page = LabellingPage(labellers=["ann", "bob", "cy"], timeout_s=TIMEOUT_S,
                         on_presence=seen.append)
    page.start(queue.Queue(), queue.Queue())
    page.apply({"labelling": True})  # as the labelling process's Team says when it starts
    page.presence_seen = seen
    yield page
    page.stop()


class Browser:
    """One person's page, over HTTP."""

    def __init__(self, page: LabellingPage, name: str | None, token: str | None = None) -> None:
        self.page, self.name = page, name
        self.token = token if token is not None else page.urls()[name].split("token=")[1]
        self.version = 0

    def request(self, path: str, body: dict | None = None, **params) -> tuple[int, bytes]:
        query = "&".join(f"{k}={v}" for k, v in {"token": self.token, **params}.items())
        url = f"{self.page.url.split('/?')[0]}{path}?{query}"
        data = None if body is None else json.dumps({**body, "nonce": secrets.token_hex(8)}).encode()
        return http_call(url, data)

    def state(self, since: int | None = None) -> dict:
        """The state (waiting for a change past the last one seen when `since` is None)."""
        status, data = self.request("/state", since=self.version if since is None else since)
        assert status == 200, data
        state = json.loads(data)
        self.version = state["version"]
        return state

    def answer(self, pair: str, key: str = "L") -> int:
        return self.request("/answer", {"pair": pair, "key": key})[0]

    def clip(self, pair: str, side: str = "left") -> tuple[int, bytes]:
        return self.request("/clip", pair=pair, side=side)

    def shown(self) -> tuple[str | None, str | None]:
        state = self.state(since=0)
        return tuple(p and p["id"] for p in (state["pair"], state["next"]))


def wait_for_pairs(page: LabellingPage, n: int) -> None:
    wait_until(lambda: len(page.view.open_pairs()) >= n and page.updates.empty(), 5, f"{n} open pairs")


def test_names_are_checked_and_each_person_has_an_address_of_their_own():
    for bad in (["ann", "ann"], ["a b"], [""], ["x" * 33], []):
        with pytest.raises(ValueError):
            LabellingPage(labellers=bad)
    page = LabellingPage(labellers=["ann", "bob"], timeout_s=TIMEOUT_S)
    try:
        urls = page.urls()
        assert list(urls) == ["ann", "bob"] and len(set(urls.values())) == 2
        assert page.url == urls["ann"] and page.poll_s == TIMEOUT_S / 2
    finally:
        page.stop()
    single = LabellingPage()
    try:
        assert single.urls() == {} and "labeller" not in single.state(timeout=0)
    finally:
        single.stop()


def test_three_people_answer_every_pair_as_often_as_it_asks_each_answer_with_its_person(team):
    people = {name: Browser(team, name) for name in ("ann", "bob", "cy")}
    for browser in people.values():  # all here before the pairs come
        assert browser.state()["labeller"] == browser.name
    copies = {open_pair(team, n, 2 if n % 3 == 0 else 1): 2 if n % 3 == 0 else 1
              for n in range(1, 31)}
    given: list[tuple[str, str, str]] = []  # (person, pair, key) as answered
    done, errors = threading.Event(), []

    def label(browser: Browser) -> None:
        try:
            while not done.is_set():
                pair = browser.state()["pair"]
                if pair is None:
                    continue
                n = int(pair["id"][1:])
                assert browser.clip(pair["id"], "right") == (200, png(2 * n + 1))
                key = KEYS[n % 4]
                assert browser.answer(pair["id"], key) == 200
                given.append((browser.name, pair["id"], key))
        except Exception as e:  # reported by the test, not lost in the thread
            errors.append(e)

    threads = [threading.Thread(target=label, args=(b,), daemon=True) for b in people.values()]
    for t in threads:
        t.start()
    wait_until(lambda: len(given) >= sum(copies.values()) or errors, 15, "every answer")
    done.set()
    for t in threads:
        t.join(5)
    assert not errors, errors
    answers = drained(team.answers)
    names = {"L": "L", "R": "R", "E": "E", "incomparable": ENTER}
    assert Counter(answers) == Counter(PairAnswer(p, names[k], labeller=who) for who, p, k in given)
    assert Counter(a.pair_id for a in answers) == copies  # each pair exactly as often as asked
    for pair_id, n in copies.items():
        assert len({a.labeller for a in answers if a.pair_id == pair_id}) == n  # different people
    assert {a.labeller for a in answers} == set(people) and not team.view.open_pairs()


def test_a_pair_for_two_goes_to_two_people_at_once_and_never_twice_to_one(team):
    ann, bob = Browser(team, "ann"), Browser(team, "bob")
    ann.state(), bob.state()
    open_pair(team, 1, copies=2)
    wait_for_pairs(team, 1)
    assert ann.shown() == ("p1", None) and bob.shown() == ("p1", None)
    assert ann.answer("p1") == 200 and ann.answer("p1") == 409
    assert ann.shown() == (None, None) and ann.clip("p1")[0] == 404
    assert bob.answer("p1", "R") == 200
    assert drained(team.answers) == [PairAnswer("p1", "L", "ann"), PairAnswer("p1", "R", "bob")]


def test_one_who_stops_asking_loses_their_pairs_to_the_others(team):
    ann, bob, cy = (Browser(team, n) for n in ("ann", "bob", "cy"))
    ann.state()
    for n in range(1, 4):
        open_pair(team, n, copies=2 if n == 3 else 1)
    wait_for_pairs(team, 3)
    assert ann.shown() == ("p1", "p2")  # oldest first: the one shown, then the next
    bob.state()
    assert bob.shown() == ("p3", None)
    assert ann.answer("p3") == 409  # a pair is answered by the one it is shown to
    stop = threading.Event()

    def keep_asking() -> None:
        while not stop.is_set():
            bob.state()

    threading.Thread(target=keep_asking, daemon=True).start()
    try:
        # bob, with no free pair left, is shown ann's next; ann gets p3 as her next
        assert bob.answer("p3") == 200
        assert Browser(team, "bob").shown() == ("p2", None) and ann.shown() == ("p1", "p3")
        # ann stops asking: after the timeout p1 is bob's, p3 (answered by bob) is no one's
        wait_until(lambda: team.present() == ["bob"], 4 * TIMEOUT_S, "ann to leave")
        assert Browser(team, "bob").shown() == ("p2", "p1")
        wait_until(lambda: team.presence_seen[-1] == ("bob",), 10, "the page told of it")
        assert team.presence_seen == [("ann",), ("ann", "bob"), ("bob",)]
        assert ann.clip("p1")[0] == 404 and ann.answer("p1") == 409
        assert bob.answer("p2", "incomparable") == 200 and bob.answer("p1", "E") == 200
        p3 = team.view.open_pairs()["p3"]
        assert p3.answered_by == {"bob"} and not p3.holders
        # a late joiner gets a pair at once: the one bob answered already
        assert cy.shown() == ("p3", None) and cy.answer("p3", "R") == 200
    finally:
        stop.set()
    assert drained(team.answers) == [PairAnswer("p3", "L", "bob"), PairAnswer("p2", ENTER, "bob"),
                                     PairAnswer("p1", "E", "bob"), PairAnswer("p3", "R", "cy")]


def test_a_late_joiner_is_shown_a_pair_at_once(team):
    ann, bob = Browser(team, "ann"), Browser(team, "bob")
    ann.state()
    for n in range(1, 5):
        open_pair(team, n)
    wait_for_pairs(team, 4)
    assert ann.shown() == ("p1", "p2")
    state = bob.state()  # the first request of a new person answers at once
    assert state["pair"]["id"] == "p3" and state["next"]["id"] == "p4"
    assert bob.clip("p4") == (200, png(8))
    # with no free pair left, a newcomer is shown another's next (not shown yet)
    cy = Browser(team, "cy")
    assert cy.shown() == ("p2", None) and ann.shown() == ("p1", None)
    assert ann.clip("p2")[0] == 404 and cy.clip("p2") == (200, png(4))
    for n in (5, 6):
        open_pair(team, n)
    wait_for_pairs(team, 6)
    assert ann.shown() == ("p1", "p5") and bob.shown() == ("p3", "p4") and cy.shown() == ("p2", "p6")


def test_no_one_answers_sees_or_edits_what_is_anothers(team):
    ann, bob = Browser(team, "ann"), Browser(team, "bob")
    ann.state(), bob.state()
    for n in (1, 2):
        open_pair(team, n)
    wait_for_pairs(team, 2)
    assert ann.shown() == ("p1", None) and bob.shown() == ("p2", None)
    assert bob.answer("p1") == 409 and bob.clip("p1")[0] == 404
    assert ann.clip("p1", "right") == (200, png(3)) and ann.clip("p1", "up")[0] == 404
    stranger = Browser(team, None, token="wrong")
    for path, body in (("/state", None), ("/clip", None), ("/answer", {"pair": "p1", "key": "L"}),
                       ("/", None)):
        assert stranger.request(path, body, pair="p1", side="left")[0] == 403
    assert Browser(team, None, token="").request("/state")[0] == 403
    team.apply({"stored": {"pair": "p9", "labeller": "ann", "label": 5, "mu": 1.0}})
    assert ann.state(since=0)["history"] == [{"id": 5, "mu": 1.0}]
    assert bob.state(since=0)["history"] == []
    assert bob.request("/edit", {"label": 5, "answer": "E"})[0] == 404
    assert ann.request("/edit", {"label": 5, "answer": "E"})[0] == 200
    assert ann.state(since=0)["labelling"] is True  # a labelling process takes changes
    # The list shows an edit once the store holds it, not before.
    assert ann.state(since=0)["history"] == [{"id": 5, "mu": 1.0}]
    team.apply({"edited": {"label": 5, "mu": 0.5}})
    assert ann.state(since=0)["history"] == [{"id": 5, "mu": 0.5}]
    assert ann.request("/edit", {"label": 5, "answer": "delete"})[0] == 200
    team.apply({"edited": {"label": 5, "mu": None}})
    assert ann.state(since=0)["history"] == []
    assert ann.request("/reopen", {"label": 5})[0] == 409
    assert ann.request("/reinsert", {"clip": "1:t3"})[0] == 409
    assert drained(team.answers) == [LabelEdit(5, 0.5), LabelEdit(5, None)]
    # the run's notice and status are everyone's; closing withdraws every pair
    team.apply({"status": ["labels stored 1"]})
    team.apply({"pair": None, "next": None, "notice": "labelling has stopped"})
    for browser in (ann, bob):
        state = browser.state(since=0)
        assert (state["pair"], state["next"], state["notice"], state["status"]) == (
            None, None, "labelling has stopped", ["labels stored 1"])
    assert ann.answer("p1") == 409 and ann.clip("p1")[0] == 404 and not team.view.open_pairs()
