"""Reading the person's answers from the terminal, in the process that owns it.

Children started with multiprocessing's spawn have stdin on /dev/null, so the process that asks
(labelling) cannot read the keyboard itself. Instead the main process (run.py, or
show_prefs.py) runs a `KeyReader` thread that turns what is typed into *tokens* and puts them on a
queue the asking process reads:

    main process: stdin --KeyReader--> answers queue --> HumanLabeller (labelling process)

A token is one key ("L", "r", "\\n" for Enter, an escape sequence for an arrow key...) when stdin
is a terminal (read in cbreak mode: no echo, no line editing, but Ctrl-C still raises SIGINT), or
one line without its newline when stdin is a pipe or file. `EOF` (Ctrl-D, or the end of the input)
is the last token: after it the reader stops and the terminal is restored.

The labelling page (`pref_interface.labellers.web`) puts tokens of its own on the same queue: `PairAnswer`
(an answer tied to the pair it was shown with), `ReopenLabel`, `ReinsertClip` and
`clip.LabelEdit`.
"""
from __future__ import annotations

import codecs
import os
import queue
import select
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, BinaryIO, Iterator

ENTER = "\n"
EOF = "\x04"  # Ctrl-D in cbreak mode; also sent at the end of piped input
ESC = "\x1b"

ANSWER_KEYS = {"L": 1.0, "R": 0.0, "E": 0.5}  # mu: the probability that the left clip is better
REPLAY_KEY = "P"


@dataclass(frozen=True)
class PairAnswer:
    """An answer from the labelling page: `key` ("L", "R", "E" or ENTER) for the pair `pair_id`
    only; the labeller drops it when that pair is no longer the one shown. `labeller`: who
    answered, when several people label (`--labellers`)."""

    pair_id: str
    key: str
    labeller: str | None = None


# As a run stops: the longest the page's word that it withdrew its pairs (`PairWithdrawn`) is
# awaited; it comes at once while the run's main process, which serves the page, lives.
WITHDRAWAL_WAIT_S = 5.0


@dataclass(frozen=True)
class PairWithdrawn:
    """The page took the pair `pair_id` off (the run is stopping): an answer the page took for it
    came before this on the queue, and none comes after."""

    pair_id: str


def until_withdrawn(answers: Any, pair_id: str, wait_s: float = WITHDRAWAL_WAIT_S) -> Iterator[Any]:
    """The tokens on `answers` until the page's word that `pair_id` is withdrawn
    (`PairWithdrawn`), waiting `wait_s` at most in all."""
    deadline = time.monotonic() + wait_s
    while (left := deadline - time.monotonic()) > 0:
        try:
            token = answers.get(timeout=left)
        except queue.Empty:
            return
        if isinstance(token, PairWithdrawn) and token.pair_id == pair_id:
            return
        yield token


@dataclass(frozen=True)
class ReopenLabel:
    """Show a stored label's pair again; the answer replaces the label (incomparable deletes it)."""

    label_id: int


@dataclass(frozen=True)
class ReinsertClip:
    """Take a sorted clip (`--queries sort`) out of its split's order and insert it again."""

    is_validation: bool
    clip_id: int


def split_keys(text: str) -> list[str]:
    """Split what one read() of a cbreak terminal gave into keys; an escape sequence (arrow key,
    function key) stays one token so it is reported once, not as three stray characters."""
    tokens: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == ESC and i + 1 < len(text) and text[i + 1] in "[O":
            j = i + 2
            while j < len(text) and not ("@" <= text[j] <= "~"):  # CSI final byte ends it
                j += 1
            tokens.append(text[i:j + 1])
            i = j + 1
        else:
            tokens.append(ENTER if ch == "\r" else ch)
            i += 1
    return tokens


def line_token(line: str) -> str:
    """The token of one line of piped input: Enter for an empty line, else the line stripped."""
    text = line.rstrip("\r\n").strip()
    return text if text else ENTER


def answer_of(token: str) -> str | None:
    """"L", "R", "E" (any case), "P" (replay), ENTER, EOF, or None for anything else."""
    if token in (ENTER, EOF):
        return token
    key = token.strip().upper()
    return key if key in ANSWER_KEYS or key == REPLAY_KEY else None


class KeyReader:
    """A daemon thread that reads stdin and puts each token on `answers` (see the module doc).

    When `stream` is a terminal it is put in cbreak mode for as long as the reader runs (echo and
    line editing off; ISIG stays on, so Ctrl-C still sends SIGINT to every process of the run) and
    its settings are restored by `stop()`, at EOF, and at interpreter exit.
    """

    def __init__(self, answers: Any, stream: BinaryIO | None = None) -> None:
        self.answers = answers
        self.stream = stream if stream is not None else sys.stdin.buffer
        self.fd = self.stream.fileno()
        self.is_tty = os.isatty(self.fd)
        self._saved: list | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="key-reader", daemon=True)
        self._lock = threading.Lock()

    def start(self) -> "KeyReader":
        if self.is_tty:
            import atexit
            import termios
            import tty

            self._saved = termios.tcgetattr(self.fd)
            tty.setcbreak(self.fd)  # clears ECHO and ICANON only: ISIG (Ctrl-C) keeps working
            atexit.register(self.restore)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop reading (within 0.1 s) and restore the terminal."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(1.0)
        self.restore()

    def restore(self) -> None:
        """Put the terminal back as it was, and make the cursor visible (a player hides it)."""
        with self._lock:
            if self._saved is None:
                return
            import termios

            try:
                termios.tcsetattr(self.fd, termios.TCSADRAIN, self._saved)
                os.write(self.fd, b"\x1b[?25h")
            except (termios.error, OSError):
                pass
            self._saved = None

    def _put(self, token: str) -> None:
        self.answers.put(token)

    def _run(self) -> None:
        try:
            if self.is_tty:
                self._read_keys()
            else:
                self._read_lines()
        except (OSError, ValueError):
            pass  # stdin went away: same as EOF
        if not self._stop.is_set():
            self._put(EOF)
        self.restore()

    def _read_keys(self) -> None:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        for data in self._chunks():
            for token in split_keys(decoder.decode(data)):
                if token == EOF:
                    return
                self._put(token)

    def _read_lines(self) -> None:
        pending = b""
        for data in self._chunks():
            pending += data
            *lines, pending = pending.split(b"\n")
            for line in lines:
                self._put(line_token(line.decode("utf-8", errors="replace")))
        if pending and not self._stop.is_set():  # a last line without its newline
            self._put(line_token(pending.decode("utf-8", errors="replace")))

    def _chunks(self):
        """Raw reads of stdin until its end or `stop()`. Unbuffered reads, polled with select, so
        the thread never sits inside the stream object: it can stop, and interpreter shutdown
        never waits for a lock this thread holds."""
        while not self._stop.is_set():
            ready, _, _ = select.select([self.fd], [], [], 0.1)
            if not ready:
                continue
            data = os.read(self.fd, 4096)
            if not data:
                return
            yield data
