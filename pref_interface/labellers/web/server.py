"""The labelling page's server: standard-library HTTP on 127.0.0.1, in the main process.

Every request must carry a token of the run (`?token=`); the server answers only its own routes
and serves no file of the machine. Answers and edits become tokens on the `answers` queue, as
keys from the terminal do (pref_interface.labellers.keys). Each POST carries a fresh `nonce`, so
a replayed request is refused (409) and changes nothing; an answer names the pair it was given
for. What a page shows and which answers count is its view's: one person's (`one_person.py`) or
a team's, each person with a token and pairs of their own (`team_view.py`).

    GET  /?token=T                          the page
    GET  /state?token=T&since=V             the state once its version is past V (long poll):
                                            the pair, the next pair (loaded ahead), the prompt,
                                            the recent labels
    GET  /clip?token=T&pair=P&side=left     a clip of the pair as a sprite PNG (sprites.py)
    GET  /thumb?token=T&clip=C              a sorted clip's sprite (--queries sort)
    POST /answer?token=T  {"pair", "key": "L"|"R"|"E"|"incomparable", "nonce"}
    POST /edit?token=T    {"label", "answer": "L"|"R"|"E"|"delete", "nonce"}
    POST /reopen?token=T  {"label", "nonce"}     show a listed label's pair again (one person)
    POST /reinsert?token=T {"clip", "nonce"}     take a sorted clip out and insert it again (one
                                                 person)

Edits, re-openings and re-insertions are refused (409) while no labelling process takes them: its
player or team says `{"labelling": true}` when it starts and `false` when it closes, and the
state carries it (the page's list is off meanwhile).
"""
from __future__ import annotations

import contextlib
import json
import queue
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any, Callable, Iterator
from urllib.parse import parse_qs, urlsplit

from clips.clip import LabelEdit
from pref_interface.labellers.keys import ANSWER_KEYS, ENTER, PairWithdrawn, ReopenLabel
from pref_interface.labellers.web.core import PageCore, RequestError, not_found
from pref_interface.labellers.web.one_person import OnePersonView
from pref_interface.labellers.web.team_view import TeamView

LONG_POLL_S = 20.0  # the longest a state request waits for a change
RUN_ENDED = "the run has ended: nothing more to label here"  # every page's last line
ENDED_GRACE_S = 1.0  # how long the end waits, at most, for the pages to fetch it
NEXT_POLL_S = 0.25  # a page asks again this soon after a reply (page.html's poll loop)
MAX_BODY_BYTES = 4096
ANSWER_NAMES = {"L": "L", "R": "R", "E": "E", "incomparable": ENTER}
CSP = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
       "img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'")


class LabellingPage:
    """Serves the page; its view keeps what it shows.

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
        if labellers is not None and token is not None:
            raise ValueError("with labellers each person has a token of their own")
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        self.core = PageCore()
        self.updates: Any = None
        self.timeout_s = timeout_s
        self.view: OnePersonView | TeamView = (
            OnePersonView(self.core, token) if labellers is None
            else TeamView(self.core, labellers, timeout_s, on_presence))
        self.labellers = [n for n in self.view.tokens() if n is not None]  # checked names
        self._server = ThreadingHTTPServer((host, port), _make_handler(self))
        self._server.daemon_threads = True
        self.page_html = resources.files("pref_interface.labellers.web").joinpath("page.html").read_bytes()
        self._polls = 0  # state requests being answered (under core.cond)
        self._last_poll_end = 0.0  # when the last one was (time.monotonic)
        self._ended = False
        self._labelling = False  # a labelling process takes changes now (`{"labelling": bool}`)

    @property
    def token(self) -> str:
        """The single person's token (in team mode, the first person's)."""
        return next(iter(self.view.tokens().values()))

    @property
    def url(self) -> str:
        """The single person's address (in team mode, the first person's)."""
        return self._url(self.token)

    def urls(self) -> dict[str, str]:
        """Team mode: each person's address, by name (empty for a single person)."""
        return {n: self._url(t) for n, t in self.view.tokens().items() if n is not None}

    def _url(self, token: str) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/?token={token}"

    @property
    def answers(self) -> Any:
        return self.core.answers

    @property
    def poll_s(self) -> float:
        """The longest a state request waits for a change."""
        return min(LONG_POLL_S, self.timeout_s / 2) if self.labellers else LONG_POLL_S

    def start(self, answers: Any, updates: Any) -> "LabellingPage":
        """Serve: answers and edits go on `answers` (the labeller's token queue, shared with the
        terminal's key reader); labelling's `WebPlayer` puts the page's changes on
        `updates`."""
        self.core.answers, self.updates = answers, updates
        self.core.running.set()
        threading.Thread(target=self._server.serve_forever, name="labelling-page",
                         daemon=True).start()
        threading.Thread(target=self._read_updates, name="page-updates", daemon=True).start()
        if isinstance(self.view, TeamView):
            self.view.start()
        return self

    def stop(self) -> None:
        """Tell every open page that the run has ended (their waiting requests answer it, and the
        pages stop asking), then stop serving."""
        if self.core.running.is_set():
            try:
                self.apply({"pair": None, "next": None, "notice": RUN_ENDED, "ended": True})
                self._ended = True  # no later update (a pair, a notice) shows over it
                self._wait_for_pages()
            finally:
                self.core.running.clear()
                self._server.shutdown()
        self._server.server_close()
        with self.core.cond:
            self.core.cond.notify_all()  # long polls end now

    def _wait_for_pages(self) -> None:
        """Let the pages fetch the end: the requests waiting now carry it out, and a page between
        two requests asks again within NEXT_POLL_S; at most ENDED_GRACE_S in all."""
        deadline = time.monotonic() + ENDED_GRACE_S
        with self.core.cond:
            while (now := time.monotonic()) < deadline:
                quiet = now - self._last_poll_end
                if self._polls == 0 and quiet >= NEXT_POLL_S:
                    return
                self.core.cond.wait(min(deadline - now, max(NEXT_POLL_S - quiet, 0.01)))

    # ---- what the page shows ----------------------------------------------------------------

    def apply(self, update: dict) -> None:
        """Merge a change (from the `WebPlayer` or the `Team`, or `notice` from the run) into the
        state; `{"labelling": bool}` says whether a labelling process takes changes now."""
        if "labelling" in update:  # the pages show it too: their changes are off while it is not
            with self.core.cond:
                self._labelling = bool(update["labelling"])
        update = dict(update)
        withdrawn = update.pop("withdrawn", None)
        with self.core.cond:  # an answer is queued under this lock too: it comes before the mark
            if not self._ended:
                self.view.apply(update)
            if withdrawn is not None:
                self.core.answers.put(PairWithdrawn(withdrawn))

    def notice(self, text: str) -> None:
        """A line the page shows while there is no pair (e.g. "pretraining the predictor")."""
        self.apply({"notice": text})

    def state(self, since: int = 0, timeout: float = LONG_POLL_S,
              labeller: str | None = None) -> dict:
        """The state once its version is past `since`, or as it is after `timeout` seconds. In
        team mode, `labeller`'s own state; asking makes them present."""
        return self.view.state(since, timeout, labeller)

    @contextlib.contextmanager
    def answering_poll(self) -> Iterator[None]:
        """Count a state request from its wait to its last byte sent (`stop` waits for them)."""
        with self.core.cond:
            self._polls += 1
        try:
            yield
        finally:
            with self.core.cond:
                self._polls -= 1
                self._last_poll_end = time.monotonic()
                self.core.cond.notify_all()

    def status(self) -> list[str]:
        """The lines under the clips that every page shows now (labelling's own status)."""
        return self.view.status()

    def present(self) -> list[str]:
        """Team mode: the names of the people here now."""
        return self.view.present() if isinstance(self.view, TeamView) else []

    def sprite(self, pair_id: str, side: str, labeller: str | None = None) -> bytes:
        """A clip of a pair; in team mode only of a pair given to `labeller` now."""
        sprites = self.view.sprite(pair_id, labeller)
        if sprites is None or side not in ("left", "right"):
            raise not_found()
        return sprites[side == "right"]

    def thumb(self, name: str) -> bytes:
        return self.view.thumb(name)

    def who(self, token: str) -> str | None:
        """The name of the person whose token this is (None for the single person); 403 for
        any other token. Compared in constant time."""
        return self.view.who(token.encode())

    # ---- what the person does ---------------------------------------------------------------

    def answer(self, body: dict, labeller: str | None = None) -> None:
        key = ANSWER_NAMES.get(body.get("key"))
        if key is None or not isinstance(body.get("pair"), str):
            raise RequestError(HTTPStatus.BAD_REQUEST, "an answer needs a pair and a key")
        self.view.answer(body, key, labeller)

    def edit(self, body: dict, labeller: str | None = None) -> None:
        answer = body.get("answer")
        if answer not in (*ANSWER_KEYS, "delete"):
            raise RequestError(HTTPStatus.BAD_REQUEST, "an edit needs a label and an answer")
        mu = None if answer == "delete" else ANSWER_KEYS[answer]
        self._labelling_runs()
        self.core.answers.put(LabelEdit(self._listed_label(body, labeller), mu))

    def reopen(self, body: dict, labeller: str | None = None) -> None:
        self._one_person_only("showing a label again")
        self._labelling_runs()
        self.core.answers.put(ReopenLabel(self._listed_label(body)))

    def reinsert(self, body: dict, labeller: str | None = None) -> None:
        self._one_person_only("re-inserting a clip")
        self._labelling_runs()
        self.view.reinsert(body)

    def _labelling_runs(self) -> None:
        """Refuse a change that no labelling process would take (between phases, after Ctrl-D):
        it would wait unseen, or never be made."""
        with self.core.cond:
            if not self._labelling:
                raise RequestError(HTTPStatus.CONFLICT, "labelling is not running now: labels "
                                                        "can be changed while it runs")

    def _listed_label(self, body: dict, labeller: str | None = None) -> int:
        """The label a request names, refused unless the page lists it (in team mode: the
        person's own list)."""
        label_id = body.get("label")
        if not isinstance(label_id, int) or isinstance(label_id, bool):
            raise RequestError(HTTPStatus.BAD_REQUEST, "a label id is a number")
        self.view.listed_label(body, label_id, labeller)
        return label_id

    def _one_person_only(self, what: str) -> None:
        if self.labellers:
            raise RequestError(HTTPStatus.CONFLICT, f"{what} is for one person labelling, "
                                                    "not for several")

    def _read_updates(self) -> None:
        while self.core.running.is_set():
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
                with page.answering_poll():
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


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise RequestError(HTTPStatus.BAD_REQUEST, f"not a number: {text[:20]!r}") from None
