"""A person labelling through the real program: keys typed into a terminal (tmux), clips in the
terminal or in a window (Xvfb), and what the preference store holds afterwards."""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from clips.clip import Clip, Preference
from pref_interface.store import PreferenceStore
from tests.helpers import dot_clip, wait_until

ROOT = Path(__file__).resolve().parent.parent
needs_tmux = pytest.mark.skipif(shutil.which("tmux") is None,
                                reason="tmux is not installed (apt-get install tmux)")
needs_xvfb = pytest.mark.skipif(
    shutil.which("Xvfb") is None or shutil.which("import") is None,
    reason="Xvfb and imagemagick's `import` are needed (apt-get install xvfb imagemagick)")


class Terminal:
    """A program running in a detached tmux pane of a fixed size, on a private tmux server."""

    def __init__(self, tmp: Path, command: list[str], env: dict[str, str],
                 size: tuple[int, int] = (100, 32)) -> None:
        self.socket, self.rc_file = str(tmp / "tmux.sock"), tmp / "rc"
        assigns = " ".join(f"{k}={v}" for k, v in env.items())
        unset = "" if "DISPLAY" in env else "-u DISPLAY"
        shell = (f"cd {shlex.quote(str(ROOT))} && env {unset} {assigns} {shlex.join(command)}; "
                 f"echo $? > {shlex.quote(str(self.rc_file))}; sleep 120")
        self.tmux("new-session", "-d", "-x", str(size[0]), "-y", str(size[1]), "-s", "t", shell)

    def tmux(self, *args: str) -> str:
        return subprocess.run(["tmux", "-S", self.socket, *args], capture_output=True, text=True,
                              check=True).stdout

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "t")

    def shown(self) -> str:
        return f"the screen:\n{self.screen()}"

    def send(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", "t", *keys)

    def wait_for(self, pattern: str, timeout: float = 30.0) -> str:
        def showing() -> str | None:
            screen = self.screen()
            return screen if re.search(pattern, screen) else None

        return wait_until(showing, timeout, f"{pattern!r} on the screen", poll_s=0.1,
                          explain=self.shown)

    def exit_status(self, timeout: float = 30.0) -> int:
        def written() -> str:
            return self.rc_file.read_text().strip() if self.rc_file.is_file() else ""

        return int(wait_until(written, timeout, "the program's exit status", poll_s=0.1,
                              explain=self.shown))

    def close(self) -> None:
        subprocess.run(["tmux", "-S", self.socket, "kill-server"], capture_output=True)


def gather_command(run_dir: Path, *extra: str) -> list[str]:
    return [sys.executable, "run.py", "gather_initial_prefs", "MovingDotNoFrameskip-v0",
            "--n_initial_prefs", "20", "--n_envs", "2", "--log_dir", str(run_dir), *extra]


def stored(run_dir: Path) -> list[Preference]:
    with PreferenceStore(run_dir / "prefs.sqlite", create=False) as store:
        return [store.get(i) for i in store.all_ids()]


@needs_tmux
def test_a_person_labels_in_the_terminal_and_every_answer_is_stored(tmp_path):
    run_dir = tmp_path / "run"
    term = Terminal(tmp_path, gather_command(run_dir, "--clip_player", "terminal",
                                             "--render_episodes"), {})
    try:
        screen = term.wait_for(r"pair 1 \|")
        assert "--render_episodes: no display" in screen  # and the run goes on without it
        assert "▀" in screen  # the clips play in the terminal...
        assert max(len(line.rstrip()) for line in screen.splitlines()
                   if "▀" in line or "━" in line) <= 80  # ...within 80 columns
        for n, key in enumerate(["L", "R", "E", "Enter"], start=2):
            term.send(key)
            term.wait_for(rf"pair {n} \|")
        screen = term.wait_for(r"incomparable \(not stored\)")
        term.send("x")
        screen = term.wait_for(r"'x' is not an answer: press L, R, E or Enter")
        assert "pair 5 |" in screen  # the invalid key did not use up the pair
        term.send("P")
        term.wait_for("replaying from the start")
        for n, key in enumerate(["l", "r", "e"], start=6):
            term.send(key)
            term.wait_for(rf"pair {n} \|")
        term.send("C-d")
        assert term.exit_status() == 0
        screen = " ".join(term.screen().split())
        assert "labelling stopped (Ctrl-D): 6 labels stored" in screen
        # the summary says the run's labels are not all in, and how to go on
        assert "run stopped with 6 of its" in screen and "resume: python run.py --resume" in screen
    finally:
        term.close()
    prefs = stored(run_dir)
    assert [p.mu for p in prefs] == [1.0, 0.0, 0.5, 1.0, 0.0, 0.5]
    assert {p.source for p in prefs} == {"human"}


def screenshot(display: str, path: Path) -> np.ndarray:
    subprocess.run(["import", "-display", display, "-window", "root", str(path)], check=True,
                   capture_output=True)
    import matplotlib.image

    return matplotlib.image.imread(str(path))[..., :3].mean(-1)  # grey in [0, 1]


def black_squares(grey: np.ndarray, side: int = 84 * 4, slack: int = 20) -> list[tuple[int, int]]:
    """Column spans (start, end) of the black squares about `side` pixels wide (a clip at zoom
    x4): a span counts when at least side - 40 rows hold a dark run of that width there."""
    counts: dict[tuple[int, int], int] = {}
    for row in grey < 0.1:
        edges = np.flatnonzero(np.diff(np.concatenate([[0], row.astype(np.int8), [0]])))
        for start, end in zip(edges[::2], edges[1::2]):
            if abs((end - start) - side) <= slack:
                counts[(int(start), int(end))] = counts.get((int(start), int(end)), 0) + 1
    return sorted(span for span, n in counts.items() if n >= side - 40)


@needs_tmux
@needs_xvfb
def test_with_a_display_the_pair_plays_in_a_window_and_episodes_in_another(tmp_path, xvfb):
    run_dir = tmp_path / "run"
    term = Terminal(tmp_path, gather_command(run_dir, "--render_episodes"), {"DISPLAY": xvfb})
    try:
        term.wait_for(r"pair 1 \|")
        assert "▀" not in term.screen()  # auto: a display exists, so the clips go to a window

        def squares_shown() -> list[tuple[int, int]]:
            return black_squares(screenshot(xvfb, tmp_path / "shot.png"))

        def three_squares() -> list[tuple[int, int]] | None:
            squares = squares_shown()
            return squares if len(squares) >= 3 else None

        squares = wait_until(three_squares, 20, "three black squares on the display", poll_s=0.5,
                             explain=lambda: f"found {squares_shown()}")
        clips = [s for s in squares if s[0] < 760]
        episodes = [s for s in squares if s[0] >= 760]
        assert len(clips) == 2 and len(episodes) == 1, squares  # two clips, one episode view
        term.send("L")
        term.wait_for(r"pair 2 \|")
        term.send("C-d")
        assert term.exit_status() == 0
    finally:
        term.close()
    assert [p.mu for p in stored(run_dir)] == [1.0]


@needs_xvfb
def test_render_episodes_works_when_training_on_the_original_rewards(tmp_path, xvfb):
    run_dir = tmp_path / "run"
    r = subprocess.run([sys.executable, "run.py", "train_policy_with_original_rewards",
                        "MovingDotNoFrameskip-v0", "--million_timesteps", "0.003", "--n_envs", "2",
                        "--render_episodes", "--log_dir", str(run_dir)], cwd=ROOT,
                       env={**os.environ, "DISPLAY": xvfb}, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert "episode viewer stopped" not in r.stderr and "no display" not in r.stderr


def clip(x: int) -> Clip:
    return dot_clip(x)


def test_show_prefs_changes_and_deletes_labels(tmp_path):
    path = tmp_path / "prefs.sqlite"
    with PreferenceStore(path) as store:
        for k, mu in enumerate([1.0, 0.5, 0.0]):
            store.add(Preference(clip(10 * k), clip(60), mu, "human"))
    # Piped keys, one a line: change the first to "right better", move on, delete the second.
    r = subprocess.run([sys.executable, "show_prefs.py", str(tmp_path), "--clip_player",
                        "terminal"], cwd=ROOT, input="x\nR\nn\nD\nD\nq\n", capture_output=True,
                       text=True, timeout=60, env={k: v for k, v in os.environ.items()
                                                   if k != "DISPLAY"})
    assert r.returncode == 0, r.stderr
    assert "'x' means nothing here" in r.stdout and "id 1 changed to right better" in r.stdout
    with PreferenceStore(path, create=False) as store:
        assert store.all_ids() == [1, 3]
        assert [store.get(i).mu for i in (1, 3)] == [0.0, 0.0]


@pytest.mark.parametrize("make", [lambda p: None, lambda p: p.write_text("not a database")])
def test_show_prefs_says_in_one_line_when_the_store_is_missing_or_corrupt(tmp_path, make):
    path = tmp_path / "prefs.sqlite"
    make(path)
    r = subprocess.run([sys.executable, "show_prefs.py", str(path)], cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("show_prefs.py: error:"), r.stderr


def test_a_run_whose_stdin_ends_before_any_label_says_how_to_label(tmp_path):
    """No terminal, no display, stdin at its end: the run stops, saying where labels can come from."""
    env = {k: v for k, v in os.environ.items() if k != "DISPLAY"}
    r = subprocess.run([sys.executable, "run.py", "train_policy_with_preferences",
                        "MovingDotNoFrameskip-v0", "--n_envs", "2", "--log_dir", str(tmp_path / "run")],
                       cwd=ROOT, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert ("no labels to train the reward predictor on: stopping; the answers were read from "
            "stdin") in r.stderr
    assert "--synthetic_prefs" in r.stderr


def test_answers_that_end_while_gathering_leave_labelling_off_in_training(tmp_path):
    """Piped answers end during gathering: training goes on with the labels held, says that
    labelling is off rather than how to answer, and shows no pair."""
    env = {k: v for k, v in os.environ.items() if k != "DISPLAY"}
    r = subprocess.run([sys.executable, "run.py", "train_policy_with_preferences",
                        "MovingDotNoFrameskip-v0", "--n_envs", "2", "--n_initial_prefs", "10",
                        "--n_initial_epochs", "1", "--million_timesteps", "0.002",
                        "--log_dir", str(tmp_path / "run")],
                       cwd=ROOT, env=env, input="L\nR\nL\nR\n", capture_output=True, text=True,
                       timeout=180)
    assert r.returncode == 0, r.stderr
    training = r.stderr[r.stderr.index("training the policy on r̂"):]
    assert "labelling is off: its input ended (Ctrl-D)" in training, r.stderr
    assert "answer here" not in training and "labelling beside it" not in training, r.stderr
    # No labelling process in training: no pair is shown, no clip is cut for one.
    assert "pair 1" not in training and "labelling stopped" not in training, r.stderr
    assert "clips dropped" not in training, r.stderr
    assert len(stored(tmp_path / "run")) == 4
