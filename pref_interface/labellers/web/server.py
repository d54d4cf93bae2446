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
"""
from __future__ import annotations

import hmac
import json
import queue
import secrets
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, urlsplit

from clips.clip import LabelEdit
from pref_interface.labellers.keys import ANSWER_KEYS, ENTER, PairAnswer, ReinsertClip, ReopenLabel
from pref_interface.labellers.web.player import parse_clip_name

LONG_POLL_S = 20.0
MAX_BODY_BYTES = 4096
SPRITES_KEPT = 4  # pairs whose clips can still be fetched (a slow tab may ask for the last one)
ANSWER_NAMES = {"L": "L", "R": "R", "E": "E", "incomparable": ENTER}
CSP = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
       "img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'")


class RequestError(Exception):
    """A request the page refuses: its HTTP status and a one-line reason."""

    def __init__(self, status: HTTPStatus, reason: str) -> None:
        super().__init__(reason)
        self.status = status


class LabellingPage:
    """Serves the page and keeps what it shows: the pair, the prompt, the recent labels.

    Args:
        host, port: where to listen (port 0: a free port). Binding happens here, so a port in
            use raises OSError before anything runs; `start` then serves.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0, token: str | None = None) -> None:
        self.answers: Any = None
        self.updates: Any = None
        self.token = token or secrets.token_urlsafe(18)
        self._cond = threading.Condition()
        self._state: dict = {"version": 1, "pair": None, "next": None, "answered": False,
                             "status": [], "history": [], "order": None,
                             "notice": "waiting for the first pair of clips"}
        self._sprites: dict[str, tuple[bytes, bytes]] = {}
        self._thumbs: dict[str, bytes] = {}  # the sorted clips' sprites, by clip name
        self._nonces: set[str] = set()
        self._running = threading.Event()
        self._server = ThreadingHTTPServer((host, port), _make_handler(self))
        self._server.daemon_threads = True
        self.page_html = resources.files("pref_interface.labellers.web").joinpath("page.html").read_bytes()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/?token={self.token}"

    def start(self, answers: Any, updates: Any) -> "LabellingPage":
        """Serve: answers and edits go on `answers` (the labeller's token queue, shared with the
        terminal's key reader); labelling's `WebPlayer` puts the page's changes on
        `updates`."""
        self.answers, self.updates = answers, updates
        self._running.set()
        threading.Thread(target=self._server.serve_forever, name="labelling-page",
                         daemon=True).start()
        threading.Thread(target=self._read_updates, name="page-updates", daemon=True).start()
        return self

    def stop(self) -> None:
        if self._running.is_set():
            self._running.clear()
            self._server.shutdown()
        self._server.server_close()

    # ---- what the page shows ----------------------------------------------------------------

    def apply(self, update: dict) -> None:
        """Merge a change (from the `WebPlayer`, or `notice` from the run) into the state."""
        update = dict(update)
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

    def state(self, since: int = 0, timeout: float = LONG_POLL_S) -> dict:
        """The state once its version is past `since`, or as it is after `timeout` seconds."""
        with self._cond:
            self._cond.wait_for(lambda: self._state["version"] > since or
                                not self._running.is_set(), timeout)
            return dict(self._state)

    def sprite(self, pair_id: str, side: str) -> bytes:
        with self._cond:
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

    def answer(self, body: dict) -> None:
        key = ANSWER_NAMES.get(body.get("key"))
        if key is None or not isinstance(body.get("pair"), str):
            raise RequestError(HTTPStatus.BAD_REQUEST, "an answer needs a pair and a key")
        with self._cond:
            self._use_nonce(body)
            pair = self._state["pair"]
            if pair is None or pair["id"] != body["pair"] or self._state["answered"]:
                raise RequestError(HTTPStatus.CONFLICT, "that pair is not waiting for an answer")
            self._state["answered"] = True
            self._state["version"] += 1
            self._cond.notify_all()
        self.answers.put(PairAnswer(body["pair"], key))

    def edit(self, body: dict) -> None:
        answer = body.get("answer")
        if answer not in (*ANSWER_KEYS, "delete"):
            raise RequestError(HTTPStatus.BAD_REQUEST, "an edit needs a label and an answer")
        label_id = self._listed_label(body)
        self.answers.put(LabelEdit(label_id, None if answer == "delete" else ANSWER_KEYS[answer]))

    def reopen(self, body: dict) -> None:
        self.answers.put(ReopenLabel(self._listed_label(body)))

    def reinsert(self, body: dict) -> None:
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

    def _listed_label(self, body: dict) -> int:
        label_id = body.get("label")
        if not isinstance(label_id, int) or isinstance(label_id, bool):
            raise RequestError(HTTPStatus.BAD_REQUEST, "a label id is a number")
        with self._cond:
            if all(entry["id"] != label_id for entry in self._state["history"]):
                raise RequestError(HTTPStatus.NOT_FOUND, f"label {label_id} is not listed")
            self._use_nonce(body)
        return label_id

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
             "/reinsert": page.reinsert}

    class Handler(BaseHTTPRequestHandler):
        server_version = "rlhf-labelling"
        sys_version = ""

        def do_GET(self) -> None:
            self._handle(self._get)

        def do_POST(self) -> None:
            self._handle(self._post)

        def _get(self, path: str, query: dict) -> None:
            if path == "/":
                self._send(HTTPStatus.OK, page.page_html, "text/html; charset=utf-8")
            elif path == "/state":
                since = _int(query.get("since", ["0"])[0])
                self._send_json(HTTPStatus.OK, page.state(since))
            elif path == "/clip":
                png = page.sprite(query.get("pair", [""])[0], query.get("side", [""])[0])
                self._send(HTTPStatus.OK, png, "image/png", cache="private, max-age=3600")
            elif path == "/thumb":
                png = page.thumb(query.get("clip", [""])[0])
                self._send(HTTPStatus.OK, png, "image/png", cache="private, max-age=3600")
            else:
                raise RequestError(HTTPStatus.NOT_FOUND, "no such page")

        def _post(self, path: str, query: dict) -> None:
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
            posts[path](body)
            self._send_json(HTTPStatus.OK, {"ok": True})

        def _handle(self, route) -> None:
            try:
                url = urlsplit(self.path)
                query = parse_qs(url.query)
                token = query.get("token", [""])[0]
                if not hmac.compare_digest(token.encode(), page.token.encode()):
                    raise RequestError(HTTPStatus.FORBIDDEN, "the page's address has a token")
                route(url.path, query)
            except RequestError as e:
                self._send_json(e.status, {"error": str(e)})

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
