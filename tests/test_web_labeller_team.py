"""Several people labelling one run (--labellers), end to end: `run.py` with its labelling pages
open in three tabs of headless Chromium, the labels in the store, a tab closed mid-pair, each
token kept to its own pairs; and the page served on an address other than loopback, reached from
another network namespace (as from another machine)."""
from __future__ import annotations

import json
import re
import os
import secrets
import shlex
import shutil
import subprocess
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest

from pref_interface.labellers.web.headless import RECORD_ANSWERS, browser_missing, headless_page, team_run
from pref_interface.store import PreferenceStore, stored_labels
from tests.helpers import http_call, wait_until

ROOT = Path(__file__).resolve().parent.parent
NAMES = ("ann", "bob", "cy")
N_LABELS = 30
TIMEOUT_S = 4.0
MU = {"L": 1.0, "R": 0.0, "E": 0.5}
# the tests that read one team run (`team_labelled`) share a worker, so the run is made once
pytestmark = pytest.mark.xdist_group("team_run")


def call(url: str, body: dict | None = None) -> tuple[int | None, bytes]:
    """GET (or POST `body`, with a fresh nonce) `url`: the status and the body; None when nothing
    answers."""
    data = None if body is None else json.dumps({**body, "nonce": secrets.token_hex(8)}).encode()
    return http_call(url, data)


class Tab:
    """One person's labelling page in a tab, and what it was told to press."""

    def __init__(self, page, name: str, url: str) -> None:
        self.page, self.name, self.url = page, name, url
        self.base, self.token = url.split("/?token=")
        self.last: str | None = None  # the pair last answered
        self.pressed: list[tuple[str, str]] = []  # (pair, key)

    def api(self, path: str, token: str | None = None, **params: str) -> str:
        query = "&".join(f"{k}={v}" for k, v in {"token": token or self.token, **params}.items())
        return f"{self.base}{path}?{query}"

    def state(self) -> dict:
        status, data = call(self.api("/state", since="0"))
        assert status == 200, data
        return json.loads(data)

    def shown(self) -> str | None:
        """The pair the page shows and may answer now (not the one it answered last)."""
        return self.page.evaluate(
            "window.labelling.canAnswer() && window.labelling.shownPair !== "
            f"{json.dumps(self.last)} ? window.labelling.shownPair : null")

    def answer(self, pair: str, key: str) -> None:
        self.page.keyboard.press(key)
        self.last = pair
        self.pressed.append((pair, key))

    def sent(self) -> list[dict]:
        """The answers the page posted, once every one has its reply."""
        self.page.wait_for_function("window.answersPending === 0", timeout=30_000)
        return self.page.evaluate("window.answersSent")


@dataclass
class Observed:
    """What the team run showed: the answers each tab posted, the closed tab's pair and where it
    went, the statuses of requests made with the wrong token, and the labels stored."""

    sent: dict[str, list[dict]] = field(default_factory=dict)
    closed_pair: str = ""
    closed_sprites: tuple[bytes, bytes] = (b"", b"")
    lost_after: float = 0.0  # seconds from the close until cy's token lost the pair
    shown_again: list[tuple[str, tuple]] = field(default_factory=list)  # who, the sprites fetched
    statuses: dict[str, int | None] = field(default_factory=dict)
    stored: list = field(default_factory=list)
    labellers: dict = field(default_factory=dict)
    rc: int | None = None
    log: str = ""

    def accepted(self, name: str | None = None) -> list[dict]:
        """The answers the run took (200), all or one person's."""
        return [a for who, answers in self.sent.items() if name in (None, who)
                for a in answers if a["status"] == 200]


def label_in_turn(tabs: list[Tab], done: Callable[[], bool], timeout_s: float,
                  on_shown: Callable[[Tab, str], None] = lambda tab, pair: None,
                  explain: Callable[[], str] = lambda: "") -> None:
    """Each tab answers the pair it shows as soon as it can (L, R, E in turn over all the
    answers) until `done()`."""
    end = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < end, f"labelling took over {timeout_s} s; {explain()}"
        answered = False
        for tab in tabs:
            pair = tab.shown()
            if pair is not None and not done():
                on_shown(tab, pair)
                tab.answer(pair, "LRE"[sum(len(t.pressed) for t in tabs) % 3])
                answered = True
        if not answered:
            time.sleep(0.02)


def sprites(tab: Tab, pair: str, token: str | None = None) -> tuple:
    return tuple(call(tab.api("/clip", token, pair=pair, side=side)) for side in ("left", "right"))


@pytest.fixture(scope="module")
def team_labelled(tmp_path_factory) -> Observed:
    """Three tabs label N_LABELS pairs of one run; cy's tab is closed mid-pair after a few."""
    missing = browser_missing()
    if missing is not None:
        pytest.skip(missing)
    tmp = tmp_path_factory.mktemp("team")
    seen = Observed()
    with team_run(["gather_initial_prefs", "MovingDotNoFrameskip-v0", "--n_initial_prefs",
                   str(N_LABELS), "--labellers", ",".join(NAMES), "--overlap", "0.3",
                   "--labeller_timeout", str(TIMEOUT_S), "--log_dir", str(tmp / "run")],
                  open(tmp / "run.log", "w+")) as (proc, urls), headless_page() as first:
        assert sorted(urls) == sorted(NAMES)
        first.context.add_init_script(RECORD_ANSWERS)
        pages = [first, first.context.new_page(), first.context.new_page()]
        tabs = {name: Tab(page, name, urls[name]) for name, page in zip(NAMES, pages)}
        for tab in tabs.values():
            tab.page.goto(tab.url)
        ann, bob, cy = (tabs[n] for n in NAMES)
        everyone = [ann, bob, cy]
        label_in_turn(everyone, lambda: sum(len(t.pressed) for t in everyone) >= 6
                      and len(cy.pressed) > 0, 60)
        # cy's tab shows a pair, unanswered, that neither ann nor bob holds or has answered (a
        # pair's other copy, --overlap); it is closed
        while True:
            wait_until(cy.shown, 30, "a pair shown to cy", explain=lambda: json.dumps(cy.state()))
            pair = cy.shown()
            if pair not in held(ann) | held(bob) | {a["pair"] for t in (ann, bob) for a in t.sent()}:
                break
            cy.answer(pair, "L")
        seen.closed_pair = pair
        assert cy.state()["pair"]["id"] == pair
        seen.closed_sprites = sprites(cy, pair)
        seen.statuses.update(crossed_requests(everyone))
        seen.sent["cy"] = cy.sent()
        closed_at = time.monotonic()
        cy.state()  # cy's last request ends after closed_at: the timeout runs from no earlier
        last_request = time.monotonic()
        cy.page.close()
        # ann and bob wait: cy holds the pair until the timeout, then loses it
        time.sleep(max(0.0, last_request + TIMEOUT_S / 2 - time.monotonic()))
        seen.statuses["before the timeout: clip"] = call(cy.api("/clip", pair=pair, side="left"))[0]
        wait_until(lambda: call(cy.api("/clip", pair=pair, side="left"))[0] != 200,
                   4 * TIMEOUT_S, "cy to lose the pair of the closed tab")
        seen.lost_after = time.monotonic() - closed_at
        seen.statuses["gone: clip"] = call(cy.api("/clip", pair=pair, side="left"))[0]
        seen.statuses["gone: answer"] = call(cy.api("/answer"), {"pair": pair, "key": "L"})[0]

        def on_shown(tab: Tab, shown: str) -> None:
            """The closed tab's pair, shown to another: who, and the sprites they fetch."""
            # (the server's pair, not one the page preloaded and was then taken from it)
            if shown == pair and (tab.state()["pair"] or {}).get("id") == shown:
                seen.shown_again.append((tab.name, sprites(tab, shown)))

        def explain() -> str:
            """What the run and the tabs had done, for a run that did not end."""
            answers = {t.name: [a["status"] for a in t.page.evaluate("window.answersSent")]
                       for t in (ann, bob)}
            return (f"labels stored {stored_labels(str(tmp / 'run' / 'prefs.sqlite'))}, answers "
                    f"{json.dumps({**answers, 'cy': [a['status'] for a in seen.sent['cy']]})}; "
                    f"the run's log ends:\n{(tmp / 'run.log').read_text()[-3000:]}")

        # ann and bob label until the run has its labels and ends: a page that was slow to ask
        # for its state may have lost a pair to the other, and its answer is then refused
        pair_left = [ann, bob]
        label_in_turn(pair_left, lambda: proc.poll() is not None, 90, on_shown, explain)
        seen.rc = proc.wait(60)
        seen.sent.update({t.name: t.sent() for t in pair_left})
    with PreferenceStore(tmp / "run" / "prefs.sqlite", create=False) as store:
        seen.stored = store.latest(len(store))
        seen.labellers = store.labellers()
    seen.log = (tmp / "run.log").read_text()
    return seen


def held(tab: Tab) -> set[str | None]:
    """The pairs given to a tab's person now: the one shown and the next."""
    state = tab.state()
    return {state["pair"] and state["pair"]["id"], state["next"] and state["next"]["id"]}


def crossed_requests(tabs: list[Tab]) -> dict[str, int | None]:
    """Requests for a pair shown to one person with another's token, and with no right token:
    their statuses."""
    given = {t.name: (t.state()["pair"] or {}).get("id") for t in tabs}
    owner, other = next((a, b) for a in tabs for b in tabs
                        if a is not b and given[a.name] and given[a.name] not in held(b))
    pair = given[owner.name]
    answer = {"pair": pair, "key": "L"}
    forged = owner.token[:-1] + ("A" if owner.token[-1] != "A" else "B")
    return {
        "owner: clip": call(owner.api("/clip", pair=pair, side="left"))[0],
        "other: answer": call(other.api("/answer"), answer)[0],
        "other: clip": call(other.api("/clip", pair=pair, side="left"))[0],
        "other: clip right": call(other.api("/clip", pair=pair, side="right"))[0],
        "wrong: state": call(owner.api("/state", forged))[0],
        "wrong: clip": call(owner.api("/clip", "wrong", pair=pair, side="left"))[0],
        "wrong: answer": call(owner.api("/answer", "wrong"), answer)[0],
        "wrong: page": call(owner.api("/", "wrong"))[0],
        "none: state": call(f"{owner.base}/state")[0],
    }


def test_three_people_label_one_run_and_the_store_holds_exactly_their_labels(team_labelled):
    seen = team_labelled
    assert seen.rc == 0
    sent = [(name, a) for name in NAMES for a in seen.accepted(name)]
    assert len(sent) == N_LABELS  # the run ended when it had taken its labels
    # an answer not taken is one for a pair no longer the person's
    assert {a["status"] for answers in seen.sent.values() for a in answers} <= {200, 409}
    assert seen.labellers == {name: len(seen.accepted(name)) for name in NAMES}
    # The run's summary counts each person's labels and says how the two-person pairs agreed.
    summary = seen.log[seen.log.index("run finished"):]
    row = next(line for line in summary.splitlines() if line.strip().startswith("labellers"))
    assert all(re.search(rf"\b{name} {n}\b", row) for name, n in seen.labellers.items()), summary
    assert re.search(r"agreement +\w+-\w+ \d+% of \d+", summary), summary
    assert all(seen.accepted(name) for name in NAMES)
    for name in NAMES:  # each person's answers, as the store has them
        assert Counter(p.mu for p in seen.stored if p.labeller == name) == Counter(
            MU[a["key"]] for a in seen.accepted(name))
    assert all(p.source == "human" for p in seen.stored)
    # each pair answered once, or by two different people where it was overlapped
    by_pair = defaultdict(list)
    for name, a in sent:
        by_pair[a["pair"]].append(name)
    assert all(len(set(names)) == len(names) <= 2 for names in by_pair.values())
    by_clips = defaultdict(list)
    for p in seen.stored:
        by_clips[(p.left.key, p.right.key)].append(p.labeller)
    assert sorted(map(len, by_clips.values())) == sorted(map(len, by_pair.values()))
    assert all(len(set(names)) == len(names) for names in by_clips.values())
    assert any(len(names) == 2 for names in by_clips.values())  # --overlap 0.3 showed some twice


def test_a_pair_of_a_tab_closed_mid_pair_goes_to_another_after_the_timeout(team_labelled):
    seen = team_labelled
    assert seen.statuses["before the timeout: clip"] == 200
    assert TIMEOUT_S <= seen.lost_after < 3 * TIMEOUT_S
    # then cy's token neither answers nor sees the pair
    assert seen.statuses["gone: answer"] == 409 and seen.statuses["gone: clip"] == 404
    names = [name for name, _ in seen.shown_again]  # its copies, each to another person
    assert names and len(set(names)) == len(names) <= 2 and "cy" not in names
    assert all(fetched == seen.closed_sprites for _, fetched in seen.shown_again)
    assert seen.closed_sprites[0][0] == seen.closed_sprites[1][0] == 200
    answered = [name for name in NAMES for a in seen.accepted(name) if a["pair"] == seen.closed_pair]
    assert sorted(answered) == sorted(names)


def test_one_persons_token_neither_answers_nor_sees_anothers_pair(team_labelled):
    statuses = team_labelled.statuses
    assert statuses["owner: clip"] == 200
    assert statuses["other: answer"] == 409
    assert statuses["other: clip"] == statuses["other: clip right"] == 404
    assert {statuses[k] for k in statuses if k.startswith(("wrong", "none"))} == {403}


# ---- from another machine ------------------------------------------------------------------------

# Run by `unshare --net --mount`: a private /run for `ip netns`, so the machine's is untouched; this
# namespace (10.77.0.1) and "far" (10.77.0.2) joined by a veth pair, as two machines on one link.
NETNS_SETUP = """
mount -t tmpfs none /run && mkdir /run/netns && ip netns add far &&
ip link add v0 type veth peer name v1 && ip link set v1 netns far &&
ip addr add 10.77.0.1/24 dev v0 && ip link set v0 up && ip link set lo up &&
ip netns exec far sh -c 'ip addr add 10.77.0.2/24 dev v1 && ip link set v1 up && ip link set lo up'
"""
# `serve ROOT`: a team's page on 10.77.0.1 and a page on the default address (loopback), then
# `ask` in "far" prints, as JSON, the statuses of its requests to both.
NETNS_SCRIPT = r"""
import json, queue, secrets, subprocess, sys, urllib.error, urllib.request


def status(url, body=None):
    data = None if body is None else json.dumps({**body, "nonce": secrets.token_hex(8)}).encode()
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data), timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, b""
    except OSError as e:
        return type(e).__name__, b""


if sys.argv[1] == "ask":
    where = json.load(sys.stdin)
    base, ann = where["ann"].split("/?token=")
    bob = where["bob"].split("/?token=")[1]
    code, state = status(f"{base}/state?since=0&token={ann}")
    print(json.dumps({
        "state": code, "shown": json.loads(state)["pair"]["id"] if code == 200 else None,
        "clip": status(f"{base}/clip?pair=p1&side=left&token={ann}"),
        "other's answer": status(f"{base}/answer?token={bob}", {"pair": "p1", "key": "L"})[0],
        "wrong token": status(f"{base}/state?token=wrong")[0],
        "loopback page": status(where["local"].replace("127.0.0.1", "10.77.0.1"))[0],
    }, default=bytes.decode))
    sys.exit(0)

sys.path.insert(0, sys.argv[2])
from pref_interface.labellers.web.server import LabellingPage

page = LabellingPage("10.77.0.1", labellers=["ann", "bob"]).start(queue.Queue(), queue.Queue())
page.apply({"open": {"id": "p1", "frames": [1, 1], "copies": 1}, "sprites": (b"left", b"right")})
local = LabellingPage()  # on another port than the team's, so that a refusal is this one's
while local.url.split("/?")[0].rsplit(":")[-1] == page.url.split("/?")[0].rsplit(":")[-1]:
    local = LabellingPage()
local.start(queue.Queue(), queue.Queue())
where = {**page.urls(), "local": local.url}
asked = subprocess.run(["ip", "netns", "exec", "far", sys.executable, __file__, "ask"],
                       input=json.dumps(where), capture_output=True, text=True, timeout=60)
print(json.dumps({"urls": where, "far": asked.stdout, "err": asked.stderr[-2000:]}))
"""


def netns_missing() -> str | None:
    """Why no network namespace can be made here (for a skip reason), or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    missing = [c for c in ("ip", "unshare") if shutil.which(c) is None]
    return f"no {', '.join(missing)} command here" if missing else None


@pytest.mark.skipif(netns_missing() is not None, reason=str(netns_missing()))
def test_the_page_on_a_non_loopback_address_is_reached_from_another_machine(tmp_path):
    script = tmp_path / "netns_page.py"
    script.write_text(NETNS_SCRIPT)
    command = (f"({NETNS_SETUP}) || exit 77\n"
               f"exec {shlex.quote(sys.executable)} {shlex.quote(str(script))} serve "
               f"{shlex.quote(str(ROOT))}")
    done = subprocess.run(["unshare", "--net", "--mount", "sh", "-c", command],
                          capture_output=True, text=True, timeout=90)
    if done.returncode == 77 or done.stderr.startswith("unshare:"):
        pytest.skip(f"cannot make network namespaces here: {done.stderr.strip()[-300:]}")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["urls"]["ann"].startswith("http://10.77.0.1:")
    assert result["far"], result["err"]
    assert json.loads(result["far"]) == {
        "state": 200, "shown": "p1", "clip": [200, "left"], "other's answer": 409,
        "wrong token": 403,
        "loopback page": "URLError"}  # the default address is not reachable from another machine
