"""The labelling page in headless Chromium, driven by Playwright (tests and benchmarks only).

Debian's `chromium` is used as it is (`.ci/run` installs it): Playwright's own browser download is
not needed. The flags keep Chromium off the network, which this tool never needs.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterator

CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update",
                  "--disable-sync"]
URL_LINE = re.compile(r"label in your browser: (http://\S+)")
# An init script: each answer a tab posts, {pair, key, status}, in its `window.answersSent`, once
# its reply is in; `window.answersPending` counts those still waiting for one.
RECORD_ANSWERS = """(() => {
  const fetch0 = window.fetch;
  window.answersSent = [];
  window.answersPending = 0;
  window.fetch = async (url, options) => {
    if (!(options && options.method === "POST" && String(url).startsWith("/answer"))) {
      return fetch0(url, options);
    }
    const body = JSON.parse(options.body);
    window.answersPending += 1;
    let status = null;
    try {
      const response = await fetch0(url, options);
      status = response.status;
      return response;
    } finally {
      window.answersSent.push({pair: body.pair, key: body.key, status});
      window.answersPending -= 1;
    }
  };
})();"""
TEAM_URL_LINE = re.compile(r"^(\S+) labels in their browser: (http://\S+)", re.MULTILINE)


def chromium_path() -> str | None:
    """The system's Chromium, or None."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


def browser_missing() -> str | None:
    """Why the page cannot be driven here (for a skip reason), or None when it can."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pipenv install --dev)"
    return None if chromium_path() else "no chromium here (apt-get install chromium)"


@contextmanager
def headless_page(width: int = 1000, height: int = 900) -> Iterator:
    """A Playwright page in a fresh headless Chromium."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path(), headless=True,
                                    args=CHROMIUM_FLAGS)
        try:
            # bypass_csp: Playwright's waits evaluate strings, which the page's policy forbids
            context = browser.new_context(viewport={"width": width, "height": height},
                                          bypass_csp=True)
            yield context.new_page()
        finally:
            browser.close()


def start_labelling_run(args: list[str], log: IO[str], timeout_s: float = 120.0
                        ) -> tuple[subprocess.Popen, str]:
    """Start `run.py` with `--clip_player web` (stdin closed: the page answers) and wait until
    it prints the page's address; returns the process and the address. Its output goes to
    `log`, a file opened for reading and writing."""
    proc, urls = _start_run(args, log, timeout_s, 0)
    return proc, urls[""]


def start_team_run(args: list[str], log: IO[str], timeout_s: float = 120.0
                   ) -> tuple[subprocess.Popen, dict[str, str]]:
    """`start_labelling_run` for a run with `--labellers` in `args`: waits until every person's
    address is printed; returns the process and the addresses by name."""
    from pref_interface.labellers.team import parse_labellers

    n = len(parse_labellers(args[args.index("--labellers") + 1]))
    return _start_run(args, log, timeout_s, n)


def _start_run(args: list[str], log: IO[str], timeout_s: float, people: int
               ) -> tuple[subprocess.Popen, dict[str, str]]:
    """The run and its addresses: {"": url} for one person, else `people` names' urls."""
    root = Path(__file__).resolve().parents[3]
    proc = subprocess.Popen([sys.executable, str(root / "run.py"), *args, "--clip_player", "web"],
                            cwd=root, stdin=subprocess.DEVNULL, stdout=log,
                            stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        log.seek(0)
        text = log.read()
        if people:
            urls = dict(TEAM_URL_LINE.findall(text))
            if len(urls) >= people:
                return proc, urls
        else:
            match = URL_LINE.search(text)
            if match:
                return proc, {"": match.group(1)}
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.kill()
    log.seek(0)
    raise RuntimeError(f"run.py printed no page address:\n{log.read()[-2000:]}")


@contextmanager
def labelling_run(args: list[str], log: IO[str], timeout_s: float = 120.0
                  ) -> Iterator[tuple[subprocess.Popen, str]]:
    """`start_labelling_run` for a `with` block: the run is stopped (SIGTERM) on the way out if
    it is still going, and `log` closed."""
    with _running(start_labelling_run, args, log, timeout_s) as started:
        yield started


@contextmanager
def team_run(args: list[str], log: IO[str], timeout_s: float = 120.0
             ) -> Iterator[tuple[subprocess.Popen, dict[str, str]]]:
    """`start_team_run` for a `with` block, stopped as `labelling_run` is."""
    with _running(start_team_run, args, log, timeout_s) as started:
        yield started


@contextmanager
def _running(start, args: list[str], log: IO[str], timeout_s: float) -> Iterator:
    try:
        proc, where = start(args, log, timeout_s)
        try:
            yield proc, where
        finally:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(60)
    finally:
        log.close()
