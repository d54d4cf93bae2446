"""What the page's server and its two views (one person, a team) share: the refusal of a
request, and the lock, nonces and answer queue that every request goes through."""
from __future__ import annotations

import threading
from http import HTTPStatus
from typing import Any


FIRST_NOTICE = "waiting for the first pair of clips"  # every page's line before the first pair


class RequestError(Exception):
    """A request the page refuses: its HTTP status and a one-line reason."""

    def __init__(self, status: HTTPStatus, reason: str) -> None:
        super().__init__(reason)
        self.status = status


def not_found(what: str = "no such clip") -> RequestError:
    return RequestError(HTTPStatus.NOT_FOUND, what)


class PageCore:
    """The condition that wakes long polls when something changes (its lock guards every view's
    state), whether the page serves, the nonces seen, and where answers and edits go (`answers`,
    set when the page starts)."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.running = threading.Event()
        self.answers: Any = None
        self._nonces: set[str] = set()

    def wait_for(self, changed, timeout: float) -> None:
        """Wait (lock held) until `changed()` or the page stops, at most `timeout` seconds."""
        self.cond.wait_for(lambda: changed() or not self.running.is_set(), timeout)

    def use_nonce(self, body: dict) -> None:
        """Refuse a request seen before (call with the lock held)."""
        nonce = body.get("nonce")
        if not isinstance(nonce, str) or not 8 <= len(nonce) <= 64:
            raise RequestError(HTTPStatus.BAD_REQUEST, "a request needs a nonce")
        if nonce in self._nonces:
            raise RequestError(HTTPStatus.CONFLICT, "this request was already made")
        self._nonces.add(nonce)
