"""The human labelling mode, piece by piece: keys, the labeller, the terminal player, episodes."""
from __future__ import annotations

import io
import os
import queue
import termios
import threading
from types import SimpleNamespace

import numpy as np
import pytest

from clips.clip import Clip
from pref_interface.config import LabellingConfig
from pref_interface.labellers.episodes import EpisodeObserver, chain_observers, make_episode_observers
from pref_interface.labellers.human import HumanLabeller
from pref_interface.labellers.keys import ENTER, EOF, KeyReader, answer_of, line_token, split_keys
from pref_interface.labellers.player import (
    TerminalBlock,
    TerminalPlayer,
    grey_to_256,
    half_block_rows,
    render_pair,
    shrink,
    terminal_clip_size,
    visible_width,
)
from pref_interface.labelling import LabellingStopped
from pref_interface.process import make_labeller
from tests.helpers import NonBlockingOnly, dot_clip, wait_until


def clip(value: int, steps: int = 25) -> Clip:
    return dot_clip(0, steps, value, moving=True)


class RecordingPlayer:
    """A ClipPlayer that remembers what it was asked to show."""

    def __init__(self):
        self.loaded, self.draws, self.closed = [], [], None
        self.on_load = None  # called once a pair is on screen

    def load(self, left, right):
        self.loaded.append((left, right))
        if self.on_load is not None:
            self.on_load()

    def draw(self, t, status):
        self.draws.append((t, list(status)))

    def close(self, message=None):
        self.closed = message or ""


def labeller(tokens=(), **kw) -> tuple[HumanLabeller, queue.Queue, RecordingPlayer]:
    answers: queue.Queue = queue.Queue()
    for token in tokens:
        answers.put(token)
    player = RecordingPlayer()
    kw.setdefault("keep_typed_ahead", True)
    return HumanLabeller(answers, player, fps=200.0, **kw), answers, player


# ---- keys ------------------------------------------------------------------------------------

def test_a_cbreak_read_splits_into_keys_and_keeps_escape_sequences_whole():
    assert split_keys("lR\x1b[Ax\r\n") == ["l", "R", "\x1b[A", "x", ENTER, ENTER]
    assert split_keys("\x04") == [EOF]


def test_piped_lines_are_tokens_and_an_empty_line_is_enter():
    assert [line_token(s) for s in ("L\n", " r \r\n", "\n", "maybe\n")] == ["L", "r", ENTER, "maybe"]


@pytest.mark.parametrize("token, answer", [("L", "L"), ("l", "L"), ("r", "R"), ("E", "E"),
                                           ("p", "P"), (ENTER, ENTER), (EOF, EOF), ("x", None),
                                           ("\x1b[A", None), ("LR", None)])
def test_answer_keys_accept_lower_case_and_nothing_else(token, answer):
    assert answer_of(token) == answer


def test_key_reader_reads_piped_lines_then_eof():
    r, w = os.pipe()
    answers: queue.Queue = queue.Queue()
    reader = KeyReader(answers, os.fdopen(r, "rb")).start()
    os.write(w, b"L\n\nx\n")
    os.close(w)
    got = [answers.get(timeout=5) for _ in range(4)]
    assert got == ["L", ENTER, "x", EOF] and not reader.is_tty
    reader.stop()


def test_key_reader_puts_a_terminal_in_cbreak_mode_keeps_ctrl_c_and_restores_it():
    master, slave = os.openpty()
    stream = os.fdopen(slave, "rb", buffering=0)
    before = termios.tcgetattr(slave)
    answers: queue.Queue = queue.Queue()
    reader = KeyReader(answers, stream).start()
    lflag = termios.tcgetattr(slave)[3]
    assert not lflag & termios.ICANON and not lflag & termios.ECHO
    assert lflag & termios.ISIG  # Ctrl-C still raises SIGINT in every process of the run
    os.write(master, b"lR")  # no Enter needed
    assert [answers.get(timeout=5), answers.get(timeout=5)] == ["l", "R"]
    os.write(master, b"\x04")  # Ctrl-D
    assert answers.get(timeout=5) == EOF
    wait_until(lambda: termios.tcgetattr(slave)[3] == before[3], 5,
               "the terminal's settings restored at EOF", poll_s=0.02)
    reader.stop()
    stream.close()
    os.close(master)


# ---- the labeller ------------------------------------------------------------------------------

def test_each_key_gives_its_label_and_enter_gives_incomparable():
    lab, _, player = labeller(["L", "R", "E", ENTER, "l", "r", "e"])
    got = [lab.label(clip(255), clip(128)) for _ in range(7)]
    assert got == [1.0, 0.0, 0.5, None, 1.0, 0.0, 0.5]
    assert lab.source == "human" and len(player.loaded) == 7
    left, _ = player.loaded[0]
    assert left.shape == (25, 84, 84)  # the newest frame of each of the 25 stacks


def test_an_invalid_key_shows_a_hint_and_does_not_consume_the_pair():
    lab, _, player = labeller(["x", "L"])
    assert lab.label(clip(255), clip(128)) == 1.0
    assert len(player.loaded) == 1
    assert any("'x' is not an answer" in status[-1] for _, status in player.draws)


def test_a_key_that_is_no_answer_is_named_as_the_person_knows_it():
    from pref_interface.labellers.human import describe_token

    assert describe_token("\x1b[D") == "the left arrow"  # not its escape sequence
    assert describe_token("\x1b[H") == "'\\x1b[H'" and describe_token("x") == "'x'"


def test_replay_restarts_the_pair_without_answering_it():
    lab, _, player = labeller(["P", "R"])
    assert lab.label(clip(255), clip(128)) == 0.0
    assert any("replaying" in status[-1] for _, status in player.draws)


def test_ctrl_d_stops_labelling_and_stays_for_every_later_labeller():
    lab, answers, player = labeller([EOF], stats=None)
    with pytest.raises(LabellingStopped):
        lab.label(clip(255), clip(128))
    assert answers.get_nowait() == EOF  # put back: a later phase's labeller stops too
    lab.close()
    assert player.closed.startswith("labelling stopped")


def test_keys_typed_before_a_pair_appears_are_dropped_but_ctrl_d_is_not():
    lab, answers, player = labeller(["L", "R"], keep_typed_ahead=False)
    player.on_load = lambda: answers.put("E")  # the person answers once the pair is shown
    assert lab.label(clip(255), clip(128)) == 0.5
    assert player.draws[0][1][-1] == "> 2 keys typed before this pair dropped"  # said once
    player.on_load = lambda: answers.put("L")
    assert lab.label(clip(255), clip(128)) == 1.0
    assert "dropped" not in player.draws[-1][1][-1]
    lab2, _, _ = labeller(["L", EOF], keep_typed_ahead=False)
    with pytest.raises(LabellingStopped):
        lab2.label(clip(255), clip(128))


def test_a_stopping_run_ends_the_question_without_a_label():
    stop = threading.Event()
    stop.set()
    lab, _, _ = labeller([], stop_event=stop)
    assert lab.label(clip(255), clip(128)) is None


def test_prompt_shows_labels_so_far_the_trainers_backlog_and_val_accuracy():
    from reward_predictor.config import VAL_TIES_ONLY, TrainerStats

    def trainer(accuracy: float) -> TrainerStats:
        return TrainerStats(*(SimpleNamespace(value=v) for v in (0, accuracy, 0)))

    stats = SimpleNamespace(labels_total=SimpleNamespace(value=7), labels_in_flight=2,
                            labels_stored=SimpleNamespace(value=9))
    lab, _, _ = labeller([], stats=stats, trainer_status=trainer(0.714).val_accuracy_text,
                         has_trainer=True)
    head = lab.status_lines()[0]
    assert "labelled 7 (9 held)" in head and "2 queued for the trainer" in head
    assert "val acc 71%" in head and len(head) <= 80
    lab, _, _ = labeller([], stats=stats, target=10,
                         trainer_status=trainer(np.nan).val_accuracy_text)
    # gathering: the store's count (earlier starts' labels too) against the phase's target
    assert "labelled 9/10" in lab.status_lines()[0] and "val acc -" in lab.status_lines()[0]
    lab, _, _ = labeller([], stats=stats, trainer_status=trainer(VAL_TIES_ONLY).val_accuracy_text)
    assert lab.status_lines()[0].endswith("val acc - (ties only)")
    assert all(len(line) <= 80 for line in lab.status_lines("'x' is not an answer: press L"))


def test_closing_says_what_was_stored_after_the_last_answer_was_drawn():
    """The prompt's counts were drawn before the last answer was stored: the closing line says
    where they stand."""
    stats = SimpleNamespace(labels_total=SimpleNamespace(value=2), labels_in_flight=0,
                            labels_stored=SimpleNamespace(value=20))
    lab, _, player = labeller(["L"], stats=stats, target=20)
    lab.label(clip(255), clip(128))
    lab.close()
    assert player.closed == "labelling ended: 2 labels stored while gathering, 20/20 held"
    lab, _, player = labeller([EOF], stats=stats, has_trainer=True)
    with pytest.raises(LabellingStopped):
        lab.label(clip(255), clip(128))
    lab.close()
    assert player.closed == "labelling stopped (Ctrl-D): 2 labels stored while training, 20 held"


def test_make_labeller_gives_a_person_only_with_an_answers_queue():
    config = LabellingConfig(synthetic=False)
    with pytest.raises(ValueError):
        make_labeller(config)
    assert isinstance(make_labeller(config, queue.Queue()), HumanLabeller)
    assert make_labeller(LabellingConfig(synthetic=True)).source == "synthetic"


# ---- the terminal player -----------------------------------------------------------------------

def test_two_clips_fit_in_80_columns_and_a_standard_24_line_terminal():
    size = terminal_clip_size(200, 60, status_lines=3)
    left = np.full((84, 84), 255, np.uint8)
    right = np.zeros((84, 84), np.uint8)
    lines = render_pair(left, right, 0.5, 1.0, size, truecolor=True)
    assert all(visible_width(line) <= 80 for line in lines)
    assert "▀" in lines[0] and lines[0].count("\x1b[") >= 2
    assert terminal_clip_size(80, 24, 3) // 2 + 1 + 3 <= 24


def test_a_bright_pixel_maps_to_a_bright_colour_upper_pixel_foreground():
    frame = np.zeros((2, 2), np.uint8)
    frame[0, 0] = 255  # upper pixel of the first cell
    row = half_block_rows(frame, truecolor=True)[0]
    assert row.startswith("\x1b[38;2;255;255;255;48;2;0;0;0m▀")
    row256 = half_block_rows(frame, truecolor=False)[0]
    assert row256.startswith("\x1b[38;5;231;48;5;16m▀")  # 231 white, 16 black
    codes = grey_to_256(np.arange(256))
    brightness = np.where(codes == 231, 255, np.where(codes == 16, 0, (codes - 232) * 10 + 8))
    assert np.all(np.diff(brightness) >= 0)  # brighter grey, brighter colour


def test_shrink_keeps_the_mean_brightness():
    frame = np.random.default_rng(0).integers(0, 256, (84, 84), dtype=np.uint8)
    small = shrink(frame, 38)
    assert small.shape == (38, 38) and abs(small.mean() - frame.mean()) < 2


def test_the_terminal_player_redraws_in_place_within_80_columns(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setenv("LINES", "60")
    out = io.StringIO()
    player = TerminalPlayer(out, truecolor=False)
    player.load(clip(255).frames()[3:], clip(100).frames()[3:])
    player.draw(0, ["pair 1", "keys", "> "])
    first = out.getvalue()
    player.draw(1, ["pair 1", "keys", "> "])
    second = out.getvalue()[len(first):]
    height = first.count("\n") + 1
    assert second.startswith(f"\x1b[?25l\r\x1b[{height - 1}A")  # back to the block's top line
    assert all(visible_width(line) <= 80 for line in first.split("\n"))
    player.close()
    assert out.getvalue().endswith("\x1b[?25h")


def test_a_terminal_block_skips_identical_redraws():
    out = io.StringIO()
    block = TerminalBlock(out)
    block.draw(["a", "b"])
    n = len(out.getvalue())
    block.draw(["a", "b"])
    assert len(out.getvalue()) == n


# ---- --render_episodes -------------------------------------------------------------------------

def fake_rollout(start: int, T: int, n_envs: int, done_at: list[int]):
    obs = np.zeros((T + 1, n_envs, 4, 84, 84), np.uint8)
    for t in range(T + 1):
        obs[t, :, -1] = (start + t) % 256  # env 0's newest frame tells its global step
    dones = np.zeros((T, n_envs), bool)
    for t in done_at:
        dones[t, 0] = True
    return SimpleNamespace(obs=obs, dones=dones)


def test_episode_observer_sends_env0s_whole_episode_and_never_blocks():
    q = NonBlockingOnly(queue.Queue(maxsize=1))  # the agent must never wait on the viewer
    observer = make_episode_observers(q, n_envs=2)[0]
    observer(fake_rollout(0, 5, 2, done_at=[]))
    observer(fake_rollout(5, 5, 2, done_at=[2]))  # the episode is steps 0..7
    episode = q.get_nowait()
    assert episode.dtype == np.uint8 and episode.shape == (8, 84, 84)
    assert list(episode[:, 0, 0]) == list(range(8))
    observer(fake_rollout(10, 5, 2, done_at=[0, 3]))  # two more episodes: one fits, one dropped
    assert observer.sender.sent == 2 and observer.sender.dropped == 1
    assert list(q.get_nowait()[:, 0, 0]) == [8, 9, 10]


def test_observer_factories_chain():
    q: queue.Queue = queue.Queue(maxsize=1)
    observers = chain_observers([lambda n: ["clips"], lambda n: make_episode_observers(q, n)], 4)
    assert observers[0] == "clips" and isinstance(observers[1], EpisodeObserver)
