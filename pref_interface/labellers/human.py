"""The human labeller (§2.2.2, App. A.2): a person watches two clips and says which is better.

It runs inside the labelling process and implements the same `Labeller` protocol as
the synthetic oracle. The keys come as tokens on the `answers` queue, filled by the `KeyReader`
thread of the process that owns the terminal (see `pref_interface.labellers.keys`):

    L  left is better (mu 1.0)     R  right is better (mu 0.0)     E  equally good (mu 0.5)
    Enter  incomparable (None: not stored)     P  replay the pair     Ctrl-D  stop labelling

Lower case is accepted; any other key shows a one-line hint and leaves the pair up.
"""
from __future__ import annotations

import queue
from typing import Any, Callable

from clips.clip import Clip, LabelEdit
from pref_interface.labellers.keys import (
    ANSWER_KEYS,
    ENTER,
    EOF,
    REPLAY_KEY,
    PairAnswer,
    PairWithdrawn,
    ReinsertClip,
    ReopenLabel,
    answer_of,
    until_withdrawn,
)
from pref_interface.labellers.player import FPS, ClipPlayer, Playback, make_player
from pref_interface.labellers.teachers import Labeller
from pref_interface.labelling import HISTORY_LENGTH, LabellingStats, LabelEditor, LabellingStopped

KEYS_HELP = "L left better, R right better, E equal, Enter incomparable, P replay, ^D stop"
ANSWER_NAMES = {"L": "left better", "R": "right better", "E": "equally good"}
KEY_OF_MU = {mu: key for key, mu in ANSWER_KEYS.items()}


ARROWS = {f"\x1b{mode}{key}": f"the {name} arrow" for mode in "[O"  # normal, application mode
          for key, name in zip("ABCD", ("up", "down", "right", "left"))}


def describe_token(token: str) -> str:
    """A key as the hint names it: an arrow by its name, printable text quoted, other control
    keys by their escape sequence, quoted."""
    if token in ARROWS:
        return ARROWS[token]
    return repr(token) if token.isprintable() else f"'{token.encode('unicode_escape').decode()}'"


def invalid_key_hint(token: str) -> str:
    return f"{describe_token(token)} is not an answer: press L, R, E or Enter (P replays)"


class HumanLabeller(Labeller):
    """Asks a person about each pair; see the module doc for the keys.

    Args:
        answers: the queue of key tokens (read here; an EOF token is put back so that every
            later labeller of the run also stops).
        player: "window" or "terminal", or a ready `ClipPlayer` (tests).
        stop_event: set when the run stops: `label` then returns None at once.
        stats: labelling's counters, for "labelled so far" and "queued for the trainer".
        trainer_status: the trainer's part of the prompt, e.g. "val acc 71%"
            (`TrainerStats.val_accuracy_text`), or None when no predictor trains (gathering the
            first labels).
        target: the labels the store is to hold when this phase ends (gather_initial_prefs: its
            count is then the store's, earlier starts' labels too), or None.
        has_trainer: a predictor trainer takes the labels (show how many it has not taken yet).
        keep_typed_ahead: let keys typed before a pair appeared answer it (piped answers);
            False drops them, so a double key press never labels a pair nobody has seen.
        labels: the stored labels, for the page's edits (`LabelEdit`, `ReopenLabel` tokens).
        reinsert: with `--queries sort`, `reinsert(is_validation, clip_id) -> message`, which
            the page's `ReinsertClip` tokens call; `show_order(sorters)` reaches the page.
    """

    source = "human"

    def __init__(self, answers: Any, player: str | ClipPlayer = "terminal",
                 stop_event: Any | None = None, stats: LabellingStats | None = None,
                 trainer_status: Callable[[], str] | None = None, target: int | None = None,
                 has_trainer: bool = False, keep_typed_ahead: bool = False,
                 fps: float = FPS, labels: LabelEditor | None = None,
                 reinsert: Callable[[bool, int], str] | None = None) -> None:
        self.answers = answers
        self._player_spec = player
        self.player: ClipPlayer | None = None if isinstance(player, str) else player
        self.stop_event, self.stats, self.trainer_status = stop_event, stats, trainer_status
        self.target, self.has_trainer, self.fps = target, has_trainer, fps
        self.keep_typed_ahead = keep_typed_ahead
        self.labels = labels
        self.reinsert = reinsert
        self._upcoming: tuple[Clip, Clip] | None = None
        self.n_pairs = 0
        self.last = ""
        self.stopped_by_person = False
        self._dropped = 0  # keys typed before a pair was shown, dropped since the last pair
        self.unanswered_at_stop = False  # the last pair asked was withdrawn at the stop unanswered

    # ---- the Labeller protocol ----------------------------------------------------------------

    def label(self, left: Clip, right: Clip) -> float | None:
        """Play the pair until the person answers; mu, or None (incomparable, or the run is
        stopping). Raises LabellingStopped on Ctrl-D / end of input."""
        self._make_player()
        if not self.keep_typed_ahead:
            self._discard_typed_ahead()
        if self._dropped:  # said once, under the pair they did not answer
            self.last = (f"{self.last}; " if self.last else "") + \
                f"{self._dropped} key{'s' * (self._dropped != 1)} typed before this pair dropped"
            self._dropped = 0
        self.n_pairs += 1
        upcoming, self._upcoming = self._upcoming, None
        return self._ask(left, right, upcoming=upcoming)

    def upcoming(self, left: Clip, right: Clip) -> None:
        """The pair that comes after the one about to be asked: a player that can (the page)
        loads it ahead, so it shows the moment the person answers."""
        self._upcoming = left, right

    def show_order(self, sorters: dict) -> None:
        """The sorted clips of each split (`--queries sort`), for a player that draws them."""
        show = getattr(self._make_player(), "show_order", None)
        if show is not None:
            show(sorters)

    def idle(self) -> None:
        """Between pairs: apply the page's edits and re-insertions now. Keys typed meanwhile
        answer no pair and are dropped, as the next pair would drop them; piped answers
        (`keep_typed_ahead`) are left for the pairs they are meant for."""
        if not self.keep_typed_ahead:
            self._discard_typed_ahead()

    def _make_player(self) -> ClipPlayer:
        if self.player is None:
            self.player = make_player(self._player_spec)
        return self.player

    def stored(self, label_id: int) -> None:
        """Labelling stored the last answer as label `label_id`: refresh the page's list. A pair
        shown swapped (the store says so) is listed, changed and asked again as the person saw
        it, also after the run's phase or the run itself started again."""
        self._show_history()

    def _swapped(self, ids: list[int]) -> set[int]:
        return self.labels.shown_swapped(ids) if self.labels is not None else set()

    @staticmethod
    def _as_seen(mu: float | None, swapped: bool) -> float | None:
        """A stored answer as the person saw the pair, or the reverse (the same flip)."""
        return 1.0 - mu if mu is not None and swapped else mu

    def _ask(self, left: Clip, right: Clip, again: int | None = None,
             upcoming: tuple[Clip, Clip] | None = None) -> float | None:
        """Play a pair until it is answered; `again`: the stored label being answered anew;
        `upcoming`: the pair asked next (see `upcoming`)."""
        self.unanswered_at_stop = False
        frames = left.step_frames(), right.step_frames()
        preload = getattr(self.player, "preload", None) if upcoming else None

        def play() -> Playback:
            playback = Playback(self.player, *frames, self.fps)
            if preload is not None:
                preload(*(clip.step_frames() for clip in upcoming))
            return playback

        playback = play()
        hint = f"label {again}: answer it again (incomparable deletes it)" if again else ""
        while True:
            token = playback.next_token(self.answers, lambda: self.status_lines(hint),
                                        self.stop_event)
            if token is None:
                return self._answer_taken_before_the_stop()
            if isinstance(token, (LabelEdit, ReinsertClip)):
                hint = self._apply(token)
                continue
            if isinstance(token, ReopenLabel):
                hint = self._reopen(token.label_id) if again is None else hint
                if self.stop_event is not None and self.stop_event.is_set():
                    return None  # stopped while the label was asked again: not shown back
                playback = play()  # back to this pair
                continue
            if isinstance(token, PairWithdrawn):
                continue  # a pair withdrawn at a stop, answered before its word came
            if isinstance(token, PairAnswer):
                if token.pair_id != getattr(self.player, "pair_id", None):
                    continue  # for a pair already answered (another tab, or the terminal)
                token = token.key
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

    def _answer_taken_before_the_stop(self) -> float | None:
        """The run is stopping: the page's pair is withdrawn, and an answer the page took for
        it before (the person saw it taken) is still returned, to be stored;
        `unanswered_at_stop` says there was none. Other requests are dropped, as at any stop."""
        self.unanswered_at_stop = True
        withdraw = getattr(self.player, "withdraw", None)
        if withdraw is None:  # the terminal: no answer was confirmed to the person
            return None
        pair_id = self.player.pair_id
        withdraw()
        for token in until_withdrawn(self.answers, pair_id):
            if isinstance(token, PairAnswer) and token.pair_id == pair_id:
                self.unanswered_at_stop = False
                key = answer_of(token.key)
                if key in ANSWER_KEYS:
                    self.last = f"pair {self.n_pairs}: {ANSWER_NAMES[key]} (stored)"
                return ANSWER_KEYS.get(key)  # incomparable: None
        return None

    def _apply(self, token: LabelEdit | ReinsertClip) -> str:
        """A request from the page not tied to the pair shown; what the prompt says about it."""
        if isinstance(token, LabelEdit):
            return self._edit(token)
        if self.reinsert is None:
            return "clips are not sorted in this run (--queries sort)"
        return self.reinsert(token.is_validation, token.clip_id)

    def _edit(self, edit: LabelEdit) -> str:
        """Apply a change to a stored label, its answer as the person sees the pair; what the
        prompt says about it."""
        swapped = edit.label_id in self._swapped([edit.label_id])
        stored = LabelEdit(edit.label_id, self._as_seen(edit.mu, swapped))
        if self.labels is None or not self.labels.edit(stored):
            return f"label {edit.label_id} is not in the store"
        self._show_history()
        return f"label {edit.label_id}: " + ("deleted" if edit.mu is None else
                                             f"now {ANSWER_NAMES[KEY_OF_MU[edit.mu]]}")

    def _reopen(self, label_id: int) -> str:
        """Ask a stored label's pair again and replace the label by the answer."""
        pref = self.labels.get(label_id) if self.labels is not None else None
        if pref is None:
            return f"label {label_id} is not in the store"
        left, right = (pref.right, pref.left) if pref.shown_swapped else (pref.left, pref.right)
        mu = self._ask(left, right, again=label_id)
        if self.unanswered_at_stop:
            return ""  # the run is stopping unanswered: the label stays as it was
        return self._edit(LabelEdit(label_id, mu))

    def _show_history(self) -> None:
        show = getattr(self.player, "show_history", None)
        if show is not None and self.labels is not None:
            recent = self.labels.recent(HISTORY_LENGTH)
            swapped = self._swapped([i for i, _ in recent])
            show([(i, self._as_seen(mu, i in swapped)) for i, mu in recent])

    def close(self) -> None:
        """Leave the player (the terminal block stays on screen, the window closes) with a line
        of what was stored: the block's counts were drawn before the last answer was."""
        if self.player is not None:
            message = None
            if self.stats is not None:  # its counters are this phase's
                n, held = self.stats.labels_total.value, self.stats.labels_stored.value
                stored = (f"{n} label{'s' * (n != 1)} stored while "
                          f"{'gathering' if self.target else 'training'}, " +
                          (f"{held}/{self.target} held" if self.target else f"{held} held"))
                message = ("labelling stopped (Ctrl-D): " if self.stopped_by_person
                           else "labelling ended: ") + stored
            elif self.stopped_by_person:
                message = "labelling stopped (Ctrl-D)"
            self.player.close(message)
            self.player = None

    # ---- the prompt -----------------------------------------------------------------------------

    def status_lines(self, hint: str = "") -> list[str]:
        """What the prompt shows: progress and predictor accuracy, the keys, then the last answer
        or a hint."""
        parts = [f"pair {self.n_pairs}"]
        if self.stats is not None:
            if self.target:
                parts.append(f"labelled {self.stats.labels_stored.value}/{self.target}")
            else:  # this phase's answers, and the store's count where earlier ones are in it
                total, held = self.stats.labels_total.value, self.stats.labels_stored.value
                parts.append(f"labelled {total}" + (f" ({held} held)" if held > total else ""))
            if self.has_trainer:
                parts.append(f"{self.stats.labels_in_flight} queued for the trainer")
        if self.trainer_status is not None:
            parts.append(self.trainer_status())
        return [" | ".join(parts), KEYS_HELP, "> " + (hint or self.last)]

    # ---- helpers --------------------------------------------------------------------------------

    def _discard_typed_ahead(self) -> None:
        """Keys typed before this pair appeared belong to no pair the person saw: drop them,
        except Ctrl-D and the page's requests about stored labels (an edit, a re-insertion, or
        undo / show again, which asks that label's pair now)."""
        while True:
            try:
                token = self.answers.get_nowait()
            except queue.Empty:
                return
            if token == EOF:
                self._stop()
            if isinstance(token, (LabelEdit, ReinsertClip)):  # not tied to a pair: still wanted
                self.last = self._apply(token)
            elif isinstance(token, ReopenLabel):
                self._make_player()
                self.last = self._reopen(token.label_id)
            elif isinstance(token, str):
                self._dropped += 1

    def _stop(self) -> None:
        self.answers.put(EOF)  # sticky: a later phase's labeller stops too
        self.stopped_by_person = True
        raise LabellingStopped("the person stopped labelling")
