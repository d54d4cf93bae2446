"""Several people labelling one run (--labellers): labels per minute with 1, 2 and 3 people, and the
time from a person's answer to their next pair on screen.

For each team size N, starts `run.py gather_initial_prefs ENV --labellers N` and opens the N
labelling pages in tabs of one headless Chromium (pref_interface/labellers/web/headless.py). Each
scripted person answers the pair shown as soon as the page takes an answer (after `--think_s`),
until `--labels` answers are given. Labels per minute: the answers over the time from the first
pair on screen to the last answer. Answer -> next pair: the page's own measure, from the key press
to the frame in which the person's next pair is first painted (as bench_web_labeller.py reads
it); it includes any wait for a pair when none was loaded ahead.

    .venv/bin/python -m benchmarks.bench_web_team
    .venv/bin/python -m benchmarks.bench_web_team --labels 20 --people 3
"""
from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.bench_a2c import machine_header
from pref_interface.labellers.web.headless import RECORD_ANSWERS, browser_missing, headless_page, team_run
from pref_interface.store import PreferenceStore
from runtime.script_args import ScriptParser, first_paragraph

KEYS = "LRE"
READY = ("(last) => window.labelling.canAnswer() && window.labelling.shownPair !== last"
         " ? window.labelling.shownPair : null")


def measure(env_id: str, people: int, labels: int, think_s: float, overlap: float) -> dict:
    """`labels` answers by `people` scripted people on a fresh run's pages: the seconds they
    took, the page's answer -> next pair times (ms), the answers refused, the labels stored."""
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        args = ["gather_initial_prefs", env_id, "--n_initial_prefs", str(labels),
                "--labellers", str(people), "--overlap", str(overlap), "--log_dir", str(run_dir)]
        with (team_run(args, tempfile.TemporaryFile("w+")) as (proc, urls),
              headless_page() as first):
            first.context.add_init_script(RECORD_ANSWERS)
            pages = [first] + [first.context.new_page() for _ in range(people - 1)]
            for page, url in zip(pages, urls.values()):
                page.goto(url)
            last: list[str | None] = [None] * people
            ready_at: list[float | None] = [None] * people  # when the tab's pair could be answered
            given, started, deadline = 0, None, time.monotonic() + 600
            while given < labels and proc.poll() is None and time.monotonic() < deadline:
                idle = True
                for k, page in enumerate(pages):
                    shown = page.evaluate(READY, last[k])
                    if shown is None or given >= labels:
                        continue
                    now = time.monotonic()
                    started = started or now
                    ready_at[k] = ready_at[k] or now
                    if now - ready_at[k] < think_s:
                        continue
                    page.keyboard.press(KEYS[given % len(KEYS)])
                    last[k], ready_at[k], given, idle = shown, None, given + 1, False
                if idle:
                    time.sleep(0.005)
            elapsed = time.monotonic() - started if started else float("nan")
            proc.wait(120)
            swap, refused = [], 0
            for page in pages:
                swap += page.evaluate("window.labelling.swapMs")
                refused += sum(a["status"] != 200 for a in page.evaluate("window.answersSent"))
        with PreferenceStore(run_dir / "prefs.sqlite", create=False) as store:
            stored = len(store)
    return {"seconds": elapsed, "given": given, "swap": swap, "refused": refused,
            "stored": stored}


def main(argv: list[str] | None = None) -> int:
    p = ScriptParser(description=first_paragraph(__doc__))
    p.add_argument("--env", default="PongNoFrameskip-v4", help="env id")
    p.add_argument("--people", type=int, nargs="+", default=[1, 2, 3], help="team sizes, one run each")
    p.add_argument("--labels", type=int, default=120, help="answers per run")
    p.add_argument("--think_s", type=float, default=0.0,
                   help="seconds each person looks at a pair before answering (0: at once)")
    p.add_argument("--overlap", type=float, default=0.0, help="run.py's --overlap")
    args = p.parse_args(argv)
    missing = browser_missing()
    if missing:
        print(f"bench_web_team: {missing}", file=sys.stderr)
        return 2
    print(machine_header())
    print(f"{args.env}: {args.labels} answers per run, think {args.think_s} s, "
          f"--overlap {args.overlap}", flush=True)
    print(f"{'people':>6} {'answers':>7} {'stored':>6} {'refused':>7} {'seconds':>8} "
          f"{'labels/min':>10} {'next pair median ms':>19} {'max ms':>7}")
    for people in args.people:
        r = measure(args.env, people, args.labels, args.think_s, args.overlap)
        swap = r["swap"] or [float("nan")]
        print(f"{people:>6} {r['given']:>7} {r['stored']:>6} {r['refused']:>7} "
              f"{r['seconds']:>8.1f} {60 * r['given'] / r['seconds']:>10.0f} "
              f"{statistics.median(swap):>19.1f} {max(swap):>7.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
