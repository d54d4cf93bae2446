"""The page as one person sees it: one state for every tab, the pair shown and the next one,
the prompt, the recent labels and the sorted clips (`--queries sort`). The first answer to the
pair shown is taken, whichever tab or terminal gives it."""
from __future__ import annotations

import hmac
import secrets
from http import HTTPStatus

from pref_interface.labellers.keys import PairAnswer, ReinsertClip
from pref_interface.labellers.web.core import FIRST_NOTICE, PageCore, RequestError, not_found
from pref_interface.labellers.web.player import parse_clip_name

SPRITES_KEPT = 4  # pairs whose clips can still be fetched (a slow tab may ask for the last one)


class OnePersonView:
    """The single person's state, behind the token `token` (random when None)."""

    def __init__(self, core: PageCore, token: str | None = None) -> None:
        self.core = core
        self.token = token or secrets.token_urlsafe(18)
        self._state: dict = {"version": 1, "pair": None, "next": None, "answered": False,
                             "status": [], "history": [], "order": None,
                             "notice": FIRST_NOTICE, "ended": False, "labelling": False}
        self._sprites: dict[str, tuple[bytes, bytes]] = {}
        self._thumbs: dict[str, bytes] = {}  # the sorted clips' sprites, by clip name

    def tokens(self) -> dict[str | None, str]:
        return {None: self.token}

    def who(self, given: bytes) -> str | None:
        if hmac.compare_digest(given, self.token.encode()):
            return None
        raise RequestError(HTTPStatus.FORBIDDEN, "the page's address has a token")

    def apply(self, update: dict) -> None:
        sprites = update.pop("sprites", None)
        thumbs = update.pop("thumbs", None)
        with self.core.cond:
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
            self._changed()

    def state(self, since: int, timeout: float, labeller: str | None) -> dict:
        with self.core.cond:
            self.core.wait_for(lambda: self._state["version"] > since, timeout)
            return dict(self._state)

    def status(self) -> list[str]:
        with self.core.cond:
            return list(self._state["status"])

    def sprite(self, pair_id: str, labeller: str | None) -> tuple[bytes, bytes] | None:
        with self.core.cond:
            return self._sprites.get(pair_id)

    def thumb(self, name: str) -> bytes:
        with self.core.cond:
            png = self._thumbs.get(name)
        if png is None:
            raise not_found()
        return png

    def answer(self, body: dict, key: str, labeller: str | None) -> None:
        with self.core.cond:
            self.core.use_nonce(body)
            pair = self._state["pair"]
            if pair is None or pair["id"] != body["pair"] or self._state["answered"]:
                raise RequestError(HTTPStatus.CONFLICT, "that pair is not waiting for an answer")
            self._state["answered"] = True
            self._changed()
            # queued under the lock: a withdrawal of the pair (`LabellingPage.apply`) comes after
            self.core.answers.put(PairAnswer(body["pair"], key))

    def listed_label(self, body: dict, label_id: int, labeller: str | None) -> None:
        """Refuse a label the page does not list."""
        with self.core.cond:
            if all(entry["id"] != label_id for entry in self._state["history"]):
                raise not_found(f"label {label_id} is not listed")
            self.core.use_nonce(body)

    def reinsert(self, body: dict) -> None:
        name = body.get("clip")
        parsed = parse_clip_name(name) if isinstance(name, str) else None
        if parsed is None:
            raise RequestError(HTTPStatus.BAD_REQUEST, "a re-insertion needs a clip")
        with self.core.cond:
            sorted_now = {n for order in self._state["order"] or ()
                          for cls in order["classes"] for n in cls}
            if name not in sorted_now:
                raise not_found(f"clip {name} is not sorted now")
            self.core.use_nonce(body)
        self.core.answers.put(ReinsertClip(*parsed))

    def _changed(self) -> None:
        self._state["version"] += 1
        self.core.cond.notify_all()


def _clips_shown(orders: list[dict]) -> list[str]:
    """The names of the clips an "order" update shows: sorted ones, those being inserted and
    those to be inserted next (loaded ahead)."""
    return [n for o in orders
            for n in [*(n for c in o["classes"] for n in c), o["inserting"], o.get("upcoming")]
            if n is not None]
