"""The page as several people see it (`--labellers`): each has a token of their own, which says
who asks, and a state of their own: the pair shown to them, the next one (loaded ahead) and
their labels.

The labelling process opens pairs (`{"open": {"id", "frames", "copies"}, "sprites"}`); each goes
to `copies` different people, one copy per person, oldest pair first, the pair shown before the
next one. Only the pair shown can be answered, once, by the person it is given to; the answer
carries their name (`PairAnswer.labeller`). A person is present while their page asks for the
state (a long poll of at most `timeout_s / 2`) or did within `timeout_s`; the pairs of one who
left go to the others. `{"stored": {"pair", "labeller", "label", "mu"}}` lists a label on its
person's page, who may edit it; `{"edited": {"label", "mu"}}` shows an edit once the store holds
it (mu None: the label is gone). The close message (`"pair": None`) withdraws every open pair.
"""
from __future__ import annotations

import hmac
import secrets
import threading
import time
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Callable

from pref_interface.labellers.keys import PairAnswer
from pref_interface.labellers.team import check_labellers
from pref_interface.labellers.web.core import FIRST_NOTICE, PageCore, RequestError, not_found
from pref_interface.labelling import HISTORY_LENGTH

WAITING = "waiting for a pair: the open ones are with the others"


@dataclass
class OpenPair:
    """A pair the labelling process opened: who holds it now, who answered it."""

    id: str
    frames: list
    copies: int
    sprites: tuple[bytes, bytes]
    holders: set[str] = field(default_factory=set)
    answered_by: set[str] = field(default_factory=set)

    def free_for(self, name: str) -> bool:
        """Whether a copy is left to give, and `name` neither holds nor answered it."""
        return (name not in self.holders and name not in self.answered_by
                and len(self.holders) + len(self.answered_by) < self.copies)


@dataclass
class Person:
    """One labeller of a team: their token, the pair shown and the next one (ids), their labels,
    and whether they are here (a long poll open, or one ended within the timeout)."""

    name: str
    token: str
    pair: str | None = None
    next: str | None = None
    history: list = field(default_factory=list)
    version: int = 1
    polls: int = 0
    seen: float = 0.0
    present: bool = False


class TeamView:
    """The people's states and the open pairs handed out among them.

    Args:
        names: the people (checked by `check_labellers`), each given a random token.
        timeout_s: how long (> 0) a person's page may stay silent before their pairs go to others.
        on_presence: called with the names present whenever they change.
    """

    def __init__(self, core: PageCore, names: list[str], timeout_s: float,
                 on_presence: Callable[[tuple], None] | None = None) -> None:
        self.core = core
        self.timeout_s = timeout_s
        self.on_presence = on_presence
        self._people = {n: Person(n, secrets.token_urlsafe(18)) for n in check_labellers(names)}
        self._shared: dict = {"status": [], "order": None, "notice": FIRST_NOTICE,  # every page's
                              "ended": False, "labelling": False}
        self._pairs: dict[str, OpenPair] = {}  # oldest first
        self._reported: tuple = ()  # the names last given to on_presence
        self._report_lock = threading.Lock()  # calls on_presence one at a time, in order

    def tokens(self) -> dict[str | None, str]:
        return {n: p.token for n, p in self._people.items()}

    def open_pairs(self) -> dict[str, OpenPair]:
        """The pairs open now, given out or waiting for someone to take them, oldest first."""
        with self.core.cond:
            return dict(self._pairs)

    def who(self, given: bytes) -> str:
        """Compared in constant time against every person's token."""
        found = None
        for name, person in self._people.items():
            if hmac.compare_digest(given, person.token.encode()):
                found = name
        if found is None:
            raise RequestError(HTTPStatus.FORBIDDEN, "the page's address has a token")
        return found

    def start(self) -> None:
        threading.Thread(target=self._watch_presence, name="page-presence", daemon=True).start()

    # ---- what the pages show ---------------------------------------------------------------

    def apply(self, update: dict) -> None:
        sprites = update.pop("sprites", None)
        with self.core.cond:
            everyone = False
            if "open" in update:
                pair = update.pop("open")
                if sprites is not None and pair["id"] not in self._pairs:  # else a repeat
                    self._pairs[pair["id"]] = OpenPair(pair["id"], list(pair["frames"]),
                                                       max(1, int(pair.get("copies", 1))), sprites)
                self._shared["notice"] = ""
                everyone = True
            if "stored" in update:
                stored = update.pop("stored")
                person = self._people.get(stored["labeller"])
                if person is not None:
                    entry = {"id": stored["label"], "mu": stored["mu"]}
                    person.history = [entry, *person.history][:HISTORY_LENGTH]
                    self._changed(person)
            if "edited" in update:
                edited = update.pop("edited")
                for person in self._people.values():
                    self._show_edit(person, edited["label"], edited["mu"])
            if "pair" in update:  # labelling is over: every open pair is withdrawn
                self._pairs.clear()
                for person in self._people.values():
                    person.pair = person.next = None
                everyone = True
            for key in ("status", "notice", "order", "ended", "labelling"):
                if key in update:
                    self._shared[key] = update[key]
                    everyone = True
            if everyone:
                self._assign()
                for person in self._people.values():
                    self._changed(person)

    def state(self, since: int, timeout: float, labeller: str | None) -> dict:
        """`labeller`'s own state; asking makes them present."""
        person = self._person(labeller)
        with self.core.cond:
            person.polls += 1
            arrived = not person.present
            if arrived:
                person.present = True
                self._assign()
        if arrived:
            self._report_presence()
        with self.core.cond:
            try:
                self.core.wait_for(lambda: person.version > since, timeout)
                return {"version": person.version, "pair": self._pair_json(person.pair),
                        "next": self._pair_json(person.next), "answered": False,
                        "status": self._shared["status"], "history": list(person.history),
                        "order": self._shared["order"],
                        "notice": self._shared["notice"] or WAITING, "labeller": person.name,
                        "ended": self._shared["ended"], "labelling": self._shared["labelling"]}
            finally:
                person.polls -= 1
                person.seen = time.monotonic()

    def status(self) -> list[str]:
        with self.core.cond:
            return list(self._shared["status"])

    def present(self) -> list[str]:
        """The names of the people here now."""
        with self.core.cond:
            return [n for n, p in self._people.items() if p.present]

    def sprite(self, pair_id: str, labeller: str | None) -> tuple[bytes, bytes] | None:
        """Only a pair given to `labeller` now."""
        person = self._person(labeller)
        with self.core.cond:
            held = pair_id in (person.pair, person.next) and pair_id in self._pairs
            return self._pairs[pair_id].sprites if held else None

    def thumb(self, name: str) -> bytes:
        raise not_found()

    # ---- what the people do ----------------------------------------------------------------

    def answer(self, body: dict, key: str, labeller: str | None) -> None:
        """The shown pair's answer: the next pair is shown, another is loaded ahead."""
        person = self._person(labeller)
        with self.core.cond:
            self.core.use_nonce(body)
            if person.pair is None or person.pair != body["pair"]:
                raise RequestError(HTTPStatus.CONFLICT, "that pair is not shown to you now")
            pair = self._pairs[person.pair]
            pair.holders.discard(person.name)
            pair.answered_by.add(person.name)
            if len(pair.answered_by) >= pair.copies:
                del self._pairs[pair.id]
            person.pair, person.next = person.next, None
            self._changed(person)
            self._assign()
            # queued under the lock: a withdrawal of the pairs (`LabellingPage.apply`) comes after
            self.core.answers.put(PairAnswer(pair.id, key, labeller=person.name))

    def listed_label(self, body: dict, label_id: int, labeller: str | None) -> None:
        """Refuse a label not on the person's own list. The list shows the edit once the store
        holds it (`{"edited": ...}`), not before."""
        person = self._person(labeller)
        with self.core.cond:
            if all(entry["id"] != label_id for entry in person.history):
                raise not_found(f"label {label_id} is not listed")
            self.core.use_nonce(body)

    def _show_edit(self, person: Person, label_id: int, mu: float | None) -> None:
        """`person`'s list, if it has the label, with its new answer `mu` (None: removed)."""
        if all(entry["id"] != label_id for entry in person.history):
            return
        person.history = [e if e["id"] != label_id else {**e, "mu": mu}
                          for e in person.history if e["id"] != label_id or mu is not None]
        self._changed(person)

    # ---- handing pairs out -----------------------------------------------------------------

    def _person(self, name: str | None) -> Person:
        person = self._people.get(name) if name is not None else None
        if person is None:
            raise RequestError(HTTPStatus.FORBIDDEN, "the page's address has a token")
        return person

    def _pair_json(self, pair_id: str | None) -> dict | None:
        return None if pair_id is None else {"id": pair_id, "frames": self._pairs[pair_id].frames}

    def _assign(self) -> None:
        """Give the open pairs to the people here, oldest first: everyone a pair to answer, then
        everyone the next one. One without a pair may take another's next (not shown yet). Call
        with the lock held."""
        here = [p for p in self._people.values() if p.present]
        for person in here:
            if person.pair is None and person.next is not None:
                person.pair, person.next = person.next, None
                self._changed(person)
        for slot in ("pair", "next"):
            for person in here:
                if getattr(person, slot) is not None:
                    continue
                pair = next((q for q in self._pairs.values() if q.free_for(person.name)), None)
                if pair is None and slot == "pair":
                    pair = self._take_a_next(person)
                if pair is not None:
                    pair.holders.add(person.name)
                    setattr(person, slot, pair.id)
                    self._changed(person)

    def _take_a_next(self, person: Person) -> OpenPair | None:
        for other in self._people.values():
            if other.next is None or other is person:
                continue
            pair = self._pairs[other.next]
            if person.name not in pair.answered_by and person.name not in pair.holders:
                pair.holders.discard(other.name)
                other.next = None
                self._changed(other)
                return pair
        return None

    def _changed(self, person: Person) -> None:
        person.version += 1
        self.core.cond.notify_all()

    def _watch_presence(self) -> None:
        """Every second (or a quarter of the timeout): whoever stopped asking for `timeout_s`
        has left, and their pairs go to the others."""
        while self.core.running.is_set():
            time.sleep(min(1.0, self.timeout_s / 4))
            now, left = time.monotonic(), False
            with self.core.cond:
                for person in self._people.values():
                    if person.present and not person.polls and now - person.seen >= self.timeout_s:
                        person.present, left = False, True
                        for pair_id in (person.pair, person.next):
                            if pair_id is not None:
                                self._pairs[pair_id].holders.discard(person.name)
                        person.pair = person.next = None
                        self._changed(person)
                if left:
                    self._assign()
            if left:
                self._report_presence()

    def _report_presence(self) -> None:
        with self._report_lock:
            names = tuple(self.present())
            if names != self._reported:
                self._reported = names
                if self.on_presence is not None:
                    self.on_presence(names)
