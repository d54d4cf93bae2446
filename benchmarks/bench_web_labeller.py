"""The labelling page's speed: time from a person's answer to the next pair on screen.

Starts `run.py gather_initial_prefs ENV --clip_player web` for each environment, opens the page in
headless Chromium (pref_interface/labellers/web/headless.py), and answers --pairs pairs, one every
--think_s seconds (a person watches a clip for 1.7 s, App. A.2). For each answer it reads the
page's own measure: from the key press to the frame in which the next pair is first painted. Also
prints how long the answer's POST took. Target: under 100 ms locally. With `--queries
sort` each comparison depends on the answer before it, so the next pair cannot be loaded ahead:
it is drawn, sent and loaded after the answer.

    .venv/bin/python -m benchmarks.bench_web_labeller
    .venv/bin/python -m benchmarks.bench_web_labeller --envs PongNoFrameskip-v4 \
        --screenshot docs/labelling.png
    .venv/bin/python -m benchmarks.bench_web_labeller --queries pairs sort  # pairs, then sorting
"""
from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.bench_a2c import machine_header
from pref_interface.labellers.web.headless import browser_missing, headless_page, labelling_run
from runtime.script_args import ScriptParser, first_paragraph

KEYS = "LRE"
RECORD_POSTS = """() => {
  const fetch0 = window.fetch;
  window.postMs = [];
  window.fetch = async (url, options) => {
    const t = performance.now();
    const response = await fetch0(url, options);
    if (options && options.method === "POST") window.postMs.push(performance.now() - t);
    return response;
  };
}"""


def measure(env_id: str, pairs: int, think_s: float, screenshot: str | None,
            queries: str = "pairs") -> dict:
    """Answer `pairs` pairs on a fresh run's page; the page's timings in ms."""
    with tempfile.TemporaryDirectory() as tmp, labelling_run(
            ["gather_initial_prefs", env_id, "--n_initial_prefs", str(pairs + 5),
             "--queries", queries, "--log_dir", str(Path(tmp) / "run")],
            tempfile.TemporaryFile("w+")) as (_, url):
        with headless_page() as page:
            page.goto(url)
            page.evaluate(RECORD_POSTS)
            shown = None
            for k in range(pairs):
                page.wait_for_function(
                    "window.labelling.canAnswer() && window.labelling.shownPair !== "
                    + json.dumps(shown),
                    timeout=120_000)
                shown = page.evaluate("window.labelling.shownPair")
                time.sleep(think_s)
                if k == min(3, pairs - 1) and screenshot:  # a few labels in the list
                    page.screenshot(path=screenshot)
                page.keyboard.press(KEYS[k % len(KEYS)])
            page.wait_for_function(f"window.labelling.swapMs.length >= {pairs}",
                                   timeout=60_000)
            return {"swap": page.evaluate("window.labelling.swapMs"),
                    "post": page.evaluate("window.postMs")}


def summary(values: list[float]) -> str:
    return (f"min {min(values):6.1f}  median {statistics.median(values):6.1f}  "
            f"max {max(values):6.1f} ms")


def main(argv: list[str] | None = None) -> int:
    p = ScriptParser(description=first_paragraph(__doc__))
    p.add_argument("--envs", nargs="+", default=["MovingDotNoFrameskip-v0", "PongNoFrameskip-v4"],
                   help="env ids, one run each")
    p.add_argument("--pairs", type=int, default=30, help="answers per environment")
    p.add_argument("--think_s", type=float, default=1.7,
                   help="seconds the page plays a pair before it is answered (App. A.2: a clip "
                        "lasts 1.7 s)")
    p.add_argument("--screenshot", help="save the page as it shows the fourth pair (last env)")
    p.add_argument("--queries", nargs="+", default=["pairs"], choices=["pairs", "sort"],
                   help="query modes to measure, each on every env (run.py's --queries)")
    args = p.parse_args(argv)
    missing = browser_missing()
    if missing:
        print(f"bench_web_labeller: {missing}", file=sys.stderr)
        return 2
    print(machine_header())
    for queries, env_id in ((q, e) for q in args.queries for e in args.envs):
        print(f"{env_id}, --queries {queries}: answering {args.pairs} pairs, {args.think_s} s "
              "each ...", flush=True)
        ms = measure(env_id, args.pairs, args.think_s, args.screenshot, queries)
        print(f"  answer -> next pair painted: {summary(ms['swap'])}")
        print(f"  answer POST round trip:      {summary(ms['post'])}")
        slow = [k + 1 for k, x in enumerate(ms["swap"]) if x >= 100]
        print(f"  under 100 ms: {len(ms['swap']) - len(slow)}/{len(ms['swap'])}"
              + (f" (answers {slow} were not)" if slow else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
