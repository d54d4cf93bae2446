"""The human labeller (§2.2.2, App. A.2): a person watches two clips and says which is better.

It runs inside the preference-interface process and implements the same `Labeller` protocol as
the synthetic oracle. The keys come as tokens on the `answers` queue, filled by the `KeyReader`
thread of the process that owns the terminal (see `pref_interface.keys`):

    L  left is better (mu 1.0)     R  right is better (mu 0.0)     E  equally good (mu 0.5)
    Enter  incomparable (None: not stored)     P  replay the pair     Ctrl-D  stop labelling

Lower case is accepted; any other key shows a one-line hint and leaves the pair up.
"""
from __future__ import annotations

import math
import queue
from typing import Any

from pref_interface.keys import ANSWER_KEYS, ENTER, EOF, REPLAY_KEY, answer_of
from pref_interface.player import FPS, ClipPlayer, Playback, clip_frames, make_player
from pref_interface.process import InterfaceStats, LabellingStopped
from pref_interface.segment import Segment

KEYS_HELP = "L left better, R right better, E equal, Enter incomparable, P replay, ^D stop"
ANSWER_NAMES = {"L": "left better", "R": "right better", "E": "equally good"}


def describe_token(token: str) -> str:
    """A key as the hint names it: printable text quoted, control keys by their escape."""
    return repr(token) if token.isprintable() else repr(token.encode("unicode_escape").decode())


def invalid_key_hint(token: str) -> str:
    return f"{describe_token(token)} is not an answer: press L, R, E or Enter (P replays)"


class HumanLabeller:
    """Asks a person about each pair; see the module doc for the keys.

    Args:
        answers: the queue of key tokens (read here; an EOF token is put back so that every
            later labeller of the run also stops).
        player: "window" or "terminal", or a ready `ClipPlayer` (tests).
        stop_event: set when the run stops: `label` then returns None at once.
        stats: the interface's counters, for "labelled so far" and "not yet taken by the trainer".
        val_accuracy: the trainer's validation accuracy (an `mp.Value('d')`, NaN before the
            first validation), or None when no predictor trains (gathering the first labels).
        target: labels wanted in this phase (gather_initial_prefs), or None.
        has_trainer: a predictor trainer takes the labels (show how many it has not taken yet).
        keep_typed_ahead: let keys typed before a pair appeared answer it (piped answers);
            False drops them, so a double key press never labels a pair nobody has seen.
    """

    source = "human"

    def __init__(self, answers: Any, player: str | ClipPlayer = "terminal",
                 stop_event: Any | None = None, stats: InterfaceStats | None = None,
                 val_accuracy: Any | None = None, target: int | None = None,
                 has_trainer: bool = False, keep_typed_ahead: bool = False,
                 fps: float = FPS) -> None:
        self.answers = answers
        self._player_spec = player
        self.player: ClipPlayer | None = None if isinstance(player, str) else player
        self.stop_event, self.stats, self.val_accuracy = stop_event, stats, val_accuracy
        self.target, self.has_trainer, self.fps = target, has_trainer, fps
        self.keep_typed_ahead = keep_typed_ahead
        self.n_pairs = 0
        self.last = ""
        self.stopped_by_person = False

    # ---- the Labeller protocol ----------------------------------------------------------------

    def label(self, left: Segment, right: Segment) -> float | None:
        """Play the pair until the person answers; mu, or None (incomparable, or the run is
        stopping). Raises LabellingStopped on Ctrl-D / end of input."""
        if self.player is None:
            self.player = make_player(self._player_spec)
        if not self.keep_typed_ahead:
            self._discard_typed_ahead()
        self.n_pairs += 1
        playback = Playback(self.player, clip_frames(left.frames), clip_frames(right.frames),
                            self.fps)
        hint = ""
        while True:
            token = playback.next_token(self.answers, lambda: self.status_lines(hint),
                                        self.stop_event)
            if token is None:
                return None
            key = answer_of(token)
            if key == EOF:
                self._stop()
            elif key == REPLAY_KEY:
                playback.restart()
                hint = "replaying from the start"
            elif key == ENTER:
                self.last = f"pair {self.n_pairs}: incomparable (not stored)"
                return None
            elif key in ANSWER_KEYS:
                self.last = f"pair {self.n_pairs}: {ANSWER_NAMES[key]} (stored)"
                return ANSWER_KEYS[key]
            else:
                hint = invalid_key_hint(token)

    def close(self) -> None:
        """Leave the player (the terminal block stays on screen, the window closes)."""
        if self.player is not None:
            message = None
            if self.stopped_by_person:
                n = self.stats.labels_total.value if self.stats is not None else None
                message = ("labelling stopped (Ctrl-D)" +
                           (f": {n} label{'s' * (n != 1)} stored in this run" if n is not None
                            else ""))
            self.player.close(message)
            self.player = None

    # ---- the prompt -----------------------------------------------------------------------------

    def status_lines(self, hint: str = "") -> list[str]:
        """What the prompt shows: progress and predictor accuracy, the keys, then the last answer
        or a hint."""
        parts = [f"pair {self.n_pairs}"]
        if self.stats is not None:
            done = self.stats.labels_total.value
            parts.append(f"labelled {done}/{self.target}" if self.target else f"labelled {done}")
            if self.has_trainer:
                parts.append(f"{self.stats.labels_in_flight} not yet taken by the trainer")
        if self.val_accuracy is not None:
            acc = self.val_accuracy.value
            parts.append("predictor val acc " + ("-" if math.isnan(acc) else f"{acc:.0%}"))
        return [" | ".join(parts), KEYS_HELP, "> " + (hint or self.last)]

    # ---- helpers --------------------------------------------------------------------------------

    def _discard_typed_ahead(self) -> None:
        """Keys typed before this pair appeared belong to no pair the person saw: drop them,
        except Ctrl-D."""
        while True:
            try:
                token = self.answers.get_nowait()
            except queue.Empty:
                return
            if token == EOF:
                self._stop()

    def _stop(self) -> None:
        self.answers.put(EOF)  # sticky: a later phase's labeller stops too
        self.stopped_by_person = True
        raise LabellingStopped("the person stopped labelling")
