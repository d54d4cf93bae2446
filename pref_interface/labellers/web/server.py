"""The labelling page's server: standard-library HTTP on 127.0.0.1, in the main process.

Every request must carry the run's random token (`?token=`); the server answers only its own
routes and serves no file of the machine. Answers and edits become tokens on the `answers`
queue, as keys from the terminal do (pref_interface.labellers.keys). Each POST carries a fresh `nonce`, so a
replayed request is refused (409) and changes nothing; an answer names the pair it was given for,
and only the first answer to the pair shown now is taken, whichever tab or terminal gives it.

    GET  /?token=T                          the page
    GET  /state?token=T&since=V             the state once its version is past V (long poll):
                                            the pair, the next pair (loaded ahead), the prompt,
                                            the recent labels
    GET  /clip?token=T&pair=P&side=left     a clip of the pair as a sprite PNG (sprites.py)
    GET  /thumb?token=T&clip=C              a sorted clip's sprite (--queries sort)
    POST /answer?token=T  {"pair", "key": "L"|"R"|"E"|"incomparable", "nonce"}
    POST /edit?token=T    {"label", "answer": "L"|"R"|"E"|"delete", "nonce"}
    POST /reopen?token=T  {"label", "nonce"}     show a listed label's pair again
    POST /reinsert?token=T {"clip", "nonce"}     take a sorted clip out and insert it again

Several people (`labellers`, team mode): each has a token of their own, which says who asks, and
a state of their own: the pair shown to them, the next one (loaded ahead) and their labels. The
labelling process opens pairs (`{"open": {"id", "frames", "copies"}, "sprites"}`); the server
gives each to `copies` different people, one copy per person, oldest pair first, the pair shown
before the next one. Only the pair shown can be answered, once, by the person it is given to; the
answer carries their name (`PairAnswer.labeller`). A person is present while their page asks for
the state (a long poll of at most `timeout_s / 2`) or did within `timeout_s`; the pairs of one who
left go to others. `{"stored": {"pair", "labeller", "label", "mu"}}` lists a label on its person's
page, who may edit it; showing a label again and re-inserting a clip are a single person's.
The close message (`"pair": None`) withdraws every open pair.
"""
from __future__ import annotations

import hmac
import json
import queue
import secrets
import threading
import time
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any, Callable
from urllib.parse import parse_qs, urlsplit

from clips.clip import LabelEdit
from pref_interface.labellers.team import check_labellers
from pref_interface.labellers.keys import ANSWER_KEYS, ENTER, PairAnswer, ReinsertClip, ReopenLabel
from pref_interface.labellers.web.player import parse_clip_name

LONG_POLL_S = 20.0
MAX_BODY_BYTES = 4096
SPRITES_KEPT = 4  # pairs whose clips can still be fetched (a slow tab may ask for the last one)
ANSWER_NAMES = {"L": "L", "R": "R", "E": "E", "incomparable": ENTER}
HISTORY_SHOWN = 10  # a person's labels listed for editing, as many as one person's page lists
TEAM_WAITING = "waiting for a pair: the open ones are with the others"
CSP = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
       "img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'")


class RequestError(Exception):
    """A request the page refuses: its HTTP status and a one-line reason."""

    def __init__(self, status: HTTPStatus, reason: str) -> None:
        super().__init__(reason)
        self.status = status


@dataclass
class OpenPair:
    """A pair the labelling process opened in team mode: who holds it now, who answered it."""

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


class LabellingPage:
    """Serves the page and keeps what it shows: the pair, the prompt, the recent labels.

    Args:
        host, port: where to listen (port 0: a free port). Binding happens here, so a port in
            use raises OSError before anything runs; `start` then serves.
        token: the single person's token (random when None).
        labellers: team mode: the people's names, each with a random token of their own.
        timeout_s: team mode: how long a person's page may stay silent before their pairs go
            to others.
        on_presence: team mode: called with the names present whenever they change.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0, token: str | None = None,
                 labellers: list[str] | None = None, timeout_s: float = 60.0,
                 on_presence: Callable[[tuple], None] | None = None) -> None:
        self.answers: Any = None
        self.updates: Any = None
        self.labellers = [] if labellers is None else check_labellers(labellers)
        if self.labellers and token is not None:
            raise ValueError("with labellers each person has a token of their own")
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        self.timeout_s = timeout_s
        self.on_presence = on_presence
        self._people = {n: Person(n, secrets.token_urlsafe(18)) for n in self.labellers}
        self.token = self._people[self.labellers[0]].token if self.labellers else (
            token or secrets.token_urlsafe(18))
        self._cond = threading.Condition()
        self._state: dict = {"version": 1, "pair": None, "next": None, "answered": False,
                             "status": [], "history": [], "order": None,
                             "notice": "waiting for the first pair of clips"}
        self._sprites: dict[str, tuple[bytes, bytes]] = {}
        self._thumbs: dict[str, bytes] = {}  # the sorted clips' sprites, by clip name
        self._pairs: dict[str, OpenPair] = {}  # team mode's open pairs, oldest first
        self._nonces: set[str] = set()
        self._reported: tuple = ()  # the names last given to on_presence
        self._report_lock = threading.Lock()  # calls on_presence one at a time, in order
        self._running = threading.Event()
        self._server = ThreadingHTTPServer((host, port), _make_handler(self))
        self._server.daemon_threads = True
        self.page_html = resources.files("pref_interface.labellers.web").joinpath("page.html").read_bytes()

    @property
    def url(self) -> str:
        """The single person's address (in team mode, the first person's)."""
        return self._url(self.token)

    def urls(self) -> dict[str, str]:
        """Team mode: each person's address, by name (empty for a single person)."""
        return {n: self._url(p.token) for n, p in self._people.items()}

    def _url(self, token: str) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/?token={token}"

    @property
    def poll_s(self) -> float:
        """The longest a state request waits for a change."""
        return min(LONG_POLL_S, self.timeout_s / 2) if self.labellers else LONG_POLL_S

    def start(self, answers: Any, updates: Any) -> "LabellingPage":
        """Serve: answers and edits go on `answers` (the labeller's token queue, shared with the
        terminal's key reader); labelling's `WebPlayer` puts the page's changes on
        `updates`."""
        self.answers, self.updates = answers, updates
        self._running.set()
        threading.Thread(target=self._server.serve_forever, name="labelling-page",
                         daemon=True).start()
        threading.Thread(target=self._read_updates, name="page-updates", daemon=True).start()
        if self.labellers:
            threading.Thread(target=self._watch_presence, name="page-presence",
                             daemon=True).start()
        return self

    def stop(self) -> None:
        if self._running.is_set():
            self._running.clear()
            self._server.shutdown()
        self._server.server_close()
        with self._cond:
            self._cond.notify_all()  # long polls end now

    # ---- what the page shows ----------------------------------------------------------------

    def apply(self, update: dict) -> None:
        """Merge a change (from the `WebPlayer`, or `notice` from the run) into the state."""
        update = dict(update)
        if self.labellers:
            self._apply_team(update)
            return
        sprites = update.pop("sprites", None)
        thumbs = update.pop("thumbs", None)
        with self._cond:
            if thumbs is not None:  # comes with "order": keep the thumbnails of the clips shown
                self._thumbs.update(thumbs)
                shown = set(_clips_shown(update["order"]))
                self._thumbs = {k: v for k, v in self._thumbs.items() if k in shown}
            if sprites is not None:  # for the pair or the preloaded next one
                self._sprites[(update.get("next") or update["pair"])["id"]] = sprites
                while len(self._sprites) > SPRITES_KEPT:
                    del self._sprites[next(iter(self._sprites))]
            if "pair" in update:
                if update["pair"] is not None:
                    update.setdefault("notice", "")
                self._state["answered"] = False
            self._state.update(update)
            self._state["version"] += 1
            self._cond.notify_all()

    def notice(self, text: str) -> None:
        """A line the page shows while there is no pair (e.g. "pretraining the predictor")."""
        self.apply({"notice": text})

    def state(self, since: int = 0, timeout: float = LONG_POLL_S,
              labeller: str | None = None) -> dict:
        """The state once its version is past `since`, or as it is after `timeout` seconds. In
        team mode, `labeller`'s own state; asking makes them present."""
        if self.labellers:
            return self._team_state(self._person(labeller), since, timeout)
        with self._cond:
            self._cond.wait_for(lambda: self._state["version"] > since or
                                not self._running.is_set(), timeout)
            return dict(self._state)

    def sprite(self, pair_id: str, side: str, labeller: str | None = None) -> bytes:
        """A clip of a pair; in team mode only of a pair given to `labeller` now."""
        with self._cond:
            if self.labellers:
                person = self._person(labeller)
                held = pair_id in (person.pair, person.next) and pair_id in self._pairs
                sprites = self._pairs[pair_id].sprites if held else None
            else:
                sprites = self._sprites.get(pair_id)
        if sprites is None or side not in ("left", "right"):
            raise RequestError(HTTPStatus.NOT_FOUND, "no such clip")
        return sprites[side == "right"]

    def thumb(self, name: str) -> bytes:
        with self._cond:
            png = self._thumbs.get(name)
        if png is None:
            raise RequestError(HTTPStatus.NOT_FOUND, "no such clip")
        return png

    # ---- what the person does ---------------------------------------------------------------

    def answer(self, body: dict, labeller: str | None = None) -> None:
        key = ANSWER_NAMES.get(body.get("key"))
        if key is None or not isinstance(body.get("pair"), str):
            raise RequestError(HTTPStatus.BAD_REQUEST, "an answer needs a pair and a key")
        if self.labellers:
            self._team_answer(self._person(labeller), body, key)
            return
        with self._cond:
            self._use_nonce(body)
            pair = self._state["pair"]
            if pair is None or pair["id"] != body["pair"] or self._state["answered"]:
                raise RequestError(HTTPStatus.CONFLICT, "that pair is not waiting for an answer")
            self._state["answered"] = True
            self._state["version"] += 1
            self._cond.notify_all()
        self.answers.put(PairAnswer(body["pair"], key))

    def edit(self, body: dict, labeller: str | None = None) -> None:
        answer = body.get("answer")
        if answer not in (*ANSWER_KEYS, "delete"):
            raise RequestError(HTTPStatus.BAD_REQUEST, "an edit needs a label and an answer")
        mu = None if answer == "delete" else ANSWER_KEYS[answer]
        label_id = self._listed_label(body, labeller, mu)
        self.answers.put(LabelEdit(label_id, mu))

    def reopen(self, body: dict, labeller: str | None = None) -> None:
        self._single_only("showing a label again")
        self.answers.put(ReopenLabel(self._listed_label(body)))

    def reinsert(self, body: dict, labeller: str | None = None) -> None:
        self._single_only("re-inserting a clip")
        name = body.get("clip")
        parsed = parse_clip_name(name) if isinstance(name, str) else None
        if parsed is None:
            raise RequestError(HTTPStatus.BAD_REQUEST, "a re-insertion needs a clip")
        with self._cond:
            sorted_now = {n for order in self._state["order"] or ()
                          for cls in order["classes"] for n in cls}
            if name not in sorted_now:
                raise RequestError(HTTPStatus.NOT_FOUND, f"clip {name} is not sorted now")
            self._use_nonce(body)
        self.answers.put(ReinsertClip(*parsed))

    def _listed_label(self, body: dict, labeller: str | None = None,
                      mu: float | None = None) -> int:
        """The label a request names, refused unless the page lists it (in team mode: the
        person's own list, which then shows the edit's answer `mu`, None deleting it)."""
        label_id = body.get("label")
        if not isinstance(label_id, int) or isinstance(label_id, bool):
            raise RequestError(HTTPStatus.BAD_REQUEST, "a label id is a number")
        with self._cond:
            person = self._person(labeller) if self.labellers else None
            history = self._state["history"] if person is None else person.history
            if all(entry["id"] != label_id for entry in history):
                raise RequestError(HTTPStatus.NOT_FOUND, f"label {label_id} is not listed")
            self._use_nonce(body)
            if person is not None:
                person.history = [e if e["id"] != label_id else {**e, "mu": mu}
                                  for e in history if e["id"] != label_id or mu is not None]
                self._changed(person)
        return label_id

    def _single_only(self, what: str) -> None:
        if self.labellers:
            raise RequestError(HTTPStatus.CONFLICT, f"{what} is for one person labelling, "
                                                    "not for several")

    # ---- team mode ---------------------------------------------------------------------------

    def who(self, token: str) -> str | None:
        """The name of the person whose token this is (None for the single person); 403 for
        any other token. Compared in constant time against every token."""
        given = token.encode()
        if not self.labellers:
            if hmac.compare_digest(given, self.token.encode()):
                return None
        else:
            found = None
            for name, person in self._people.items():
                if hmac.compare_digest(given, person.token.encode()):
                    found = name
            if found is not None:
                return found
        raise RequestError(HTTPStatus.FORBIDDEN, "the page's address has a token")

    def status(self) -> list[str]:
        """The lines under the clips that every page shows now (labelling's own status)."""
        with self._cond:
            return list(self._state["status"])

    def present(self) -> list[str]:
        """Team mode: the names of the people here now."""
        with self._cond:
            return [n for n, p in self._people.items() if p.present]

    def _person(self, name: str | None) -> Person:
        person = self._people.get(name) if name is not None else None
        if person is None:
            raise RequestError(HTTPStatus.FORBIDDEN, "the page's address has a token")
        return person

    def _apply_team(self, update: dict) -> None:
        sprites = update.pop("sprites", None)
        with self._cond:
            everyone = False
            if "open" in update:
                pair = update.pop("open")
                if sprites is not None and pair["id"] not in self._pairs:  # else a repeat
                    self._pairs[pair["id"]] = OpenPair(pair["id"], list(pair["frames"]),
                                                       max(1, int(pair.get("copies", 1))), sprites)
                self._state["notice"] = ""
                everyone = True
            if "stored" in update:
                stored = update.pop("stored")
                person = self._people.get(stored["labeller"])
                if person is not None:
                    entry = {"id": stored["label"], "mu": stored["mu"]}
                    person.history = [entry, *person.history][:HISTORY_SHOWN]
                    self._changed(person)
            if "pair" in update:  # labelling is over: every open pair is withdrawn
                update.pop("next", None)
                update.pop("pair")
                self._pairs.clear()
                for person in self._people.values():
                    person.pair = person.next = None
                everyone = True
            for key in ("status", "notice", "order"):
                if key in update:
                    self._state[key] = update[key]
                    everyone = True
            if everyone:
                self._assign()
                for person in self._people.values():
                    self._changed(person)

    def _team_state(self, person: Person, since: int, timeout: float) -> dict:
        with self._cond:
            person.polls += 1
            arrived = not person.present
            if arrived:
                person.present = True
                self._assign()
        if arrived:
            self._report_presence()
        with self._cond:
            try:
                self._cond.wait_for(lambda: person.version > since or
                                    not self._running.is_set(), timeout)
                return {"version": person.version, "pair": self._pair_json(person.pair),
                        "next": self._pair_json(person.next), "answered": False,
                        "status": self._state["status"], "history": list(person.history),
                        "order": self._state["order"],
                        "notice": self._state["notice"] or TEAM_WAITING,
                        "labeller": person.name}
            finally:
                person.polls -= 1
                person.seen = time.monotonic()

    def _pair_json(self, pair_id: str | None) -> dict | None:
        return None if pair_id is None else {"id": pair_id, "frames": self._pairs[pair_id].frames}

    def _team_answer(self, person: Person, body: dict, key: str) -> None:
        """The shown pair's answer: the next pair is shown, another is loaded ahead."""
        with self._cond:
            self._use_nonce(body)
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
        self.answers.put(PairAnswer(pair.id, key, labeller=person.name))

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
        self._cond.notify_all()

    def _watch_presence(self) -> None:
        """Every second (or a quarter of the timeout): whoever stopped asking for `timeout_s`
        has left, and their pairs go to the others."""
        while self._running.is_set():
            time.sleep(min(1.0, self.timeout_s / 4))
            now, left = time.monotonic(), False
            with self._cond:
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

    def _use_nonce(self, body: dict) -> None:
        """Refuse a request seen before (call with the lock held)."""
        nonce = body.get("nonce")
        if not isinstance(nonce, str) or not 8 <= len(nonce) <= 64:
            raise RequestError(HTTPStatus.BAD_REQUEST, "a request needs a nonce")
        if nonce in self._nonces:
            raise RequestError(HTTPStatus.CONFLICT, "this request was already made")
        self._nonces.add(nonce)

    def _read_updates(self) -> None:
        while self._running.is_set():
            try:
                update = self.updates.get(timeout=0.2)
            except queue.Empty:
                continue
            except (EOFError, OSError):
                return
            self.apply(update)


def _make_handler(page: LabellingPage) -> type[BaseHTTPRequestHandler]:
    posts = {"/answer": page.answer, "/edit": page.edit, "/reopen": page.reopen,
             "/reinsert": page.reinsert}  # each takes the body and who asks

    class Handler(BaseHTTPRequestHandler):
        server_version = "rlhf-labelling"
        sys_version = ""

        def do_GET(self) -> None:
            self._handle(self._get)

        def do_POST(self) -> None:
            self._handle(self._post)

        def _get(self, path: str, query: dict, who: str | None) -> None:
            if path == "/":
                self._send(HTTPStatus.OK, page.page_html, "text/html; charset=utf-8")
            elif path == "/state":
                since = _int(query.get("since", ["0"])[0])
                self._send_json(HTTPStatus.OK, page.state(since, page.poll_s, who))
            elif path == "/clip":
                png = page.sprite(query.get("pair", [""])[0], query.get("side", [""])[0], who)
                self._send(HTTPStatus.OK, png, "image/png", cache="private, max-age=3600")
            elif path == "/thumb":
                png = page.thumb(query.get("clip", [""])[0])
                self._send(HTTPStatus.OK, png, "image/png", cache="private, max-age=3600")
            else:
                raise RequestError(HTTPStatus.NOT_FOUND, "no such page")

        def _post(self, path: str, query: dict, who: str | None) -> None:
            if path not in posts:
                raise RequestError(HTTPStatus.NOT_FOUND, "no such action")
            length = _int(self.headers.get("Content-Length", ""))
            if not 0 < length <= MAX_BODY_BYTES:
                raise RequestError(HTTPStatus.BAD_REQUEST, "a JSON body of at most 4 KB")
            try:
                body = json.loads(self.rfile.read(length))
            except (ValueError, UnicodeDecodeError):
                raise RequestError(HTTPStatus.BAD_REQUEST, "the body is not JSON") from None
            if not isinstance(body, dict):
                raise RequestError(HTTPStatus.BAD_REQUEST, "the body is not a JSON object")
            posts[path](body, who)
            self._send_json(HTTPStatus.OK, {"ok": True})

        def _handle(self, route) -> None:
            try:
                url = urlsplit(self.path)
                query = parse_qs(url.query)
                route(url.path, query, page.who(query.get("token", [""])[0]))
            except RequestError as e:
                self._send_json(e.status, {"error": str(e)})
            except ConnectionError:
                pass  # the tab closed while it waited: nothing to tell the terminal

        def _send_json(self, status: HTTPStatus, obj: dict) -> None:
            self._send(status, json.dumps(obj).encode(), "application/json")

        def _send(self, status: HTTPStatus, data: bytes, content_type: str,
                  cache: str = "no-store") -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Cache-Control", cache)
            self.send_header("Content-Security-Policy", CSP)
            self.send_header("X-Content-Type-Options", "nosniff")
            self.send_header("Referrer-Policy", "no-referrer")
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # the terminal belongs to the labelling prompt

    return Handler


def _clips_shown(orders: list[dict]) -> list[str]:
    """The names of the clips an "order" update shows: sorted ones, those being inserted and
    those to be inserted next (loaded ahead)."""
    return [n for o in orders
            for n in [*(n for c in o["classes"] for n in c), o["inserting"], o.get("upcoming")]
            if n is not None]


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise RequestError(HTTPStatus.BAD_REQUEST, f"not a number: {text[:20]!r}") from None
