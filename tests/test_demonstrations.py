"""Demonstrations: the file, the mix into labelling's pool, and the flags."""
import multiprocessing as mp
import os
import queue
import shutil
import subprocess
import sys

import numpy as np
import pytest

from clips.clip import CLIP_LENGTH, FRAME_SHAPE, STACK, Clip, Preference
from clips.demonstrations import (DemonstrationMix, DemonstrationsError, load_demonstrations,
                                  save_demonstrations)

ENV = "MovingDotNoFrameskip-v0"


def _clips(n: int, seed: int = 0, value: int | None = None) -> list[Clip]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        frames = (np.full((CLIP_LENGTH + STACK - 1, *FRAME_SHAPE), value, np.uint8)
                  if value is not None else
                  rng.integers(0, 256, (CLIP_LENGTH + STACK - 1, *FRAME_SHAPE), dtype=np.uint8))
        dones = np.zeros(CLIP_LENGTH, bool)
        dones[i % CLIP_LENGTH] = i % 3 == 0
        out.append(Clip.pack(frames, rng.integers(0, 5, CLIP_LENGTH),
                             rng.normal(size=CLIP_LENGTH).astype(np.float32), dones))
    return out


def test_a_saved_file_gives_back_the_same_clips(tmp_path):
    clips = _clips(5)
    path = tmp_path / "demos"  # no .npz: written where it was asked
    save_demonstrations(path, ENV, clips)
    loaded = load_demonstrations(path, ENV)
    assert path.is_file() and len(loaded) == 5
    for a, b in zip(clips, loaded):
        assert a.key == b.key
        np.testing.assert_array_equal(a.frames(), b.frames())
        np.testing.assert_array_equal(a.true_rewards, b.true_rewards)
        np.testing.assert_array_equal(a.dones, b.dones)


def test_a_file_that_cannot_be_used_is_one_line_naming_it(tmp_path):
    good = tmp_path / "good.npz"
    save_demonstrations(good, ENV, _clips(2))
    text = tmp_path / "notes.txt"
    text.write_text("not an archive")
    partial = tmp_path / "partial.npz"
    np.savez(partial, frames=np.zeros((2, 28, 84, 84), np.uint8))
    shapes = tmp_path / "shapes.npz"
    np.savez(shapes, frames=np.zeros((2, 28, 80, 80), np.uint8),
             actions=np.zeros((2, 25), np.int64), true_rewards=np.zeros((2, 25), np.float32),
             dones=np.zeros((2, 25), bool), env_id=np.array(ENV))
    # Of the right shapes, but an action MovingDot does not have (it has 5), or a NaN reward:
    # refused here, not when the predictor trains on the stored labels
    bad_action, nan_reward = tmp_path / "action.npz", tmp_path / "nan.npz"
    with np.load(good) as f:
        arrays = {k: f[k] for k in f.files}
    np.savez(bad_action, **{**arrays, "actions": arrays["actions"] + 7})
    np.savez(nan_reward, **{**arrays, "true_rewards": np.full_like(arrays["true_rewards"],
                                                                   np.nan)})
    short = tmp_path / "short.npz"  # whole clips, but not of a run's 25 steps
    np.savez(short, **{**arrays, "frames": arrays["frames"][:, :13],
                       **{k: arrays[k][:, :10] for k in ("actions", "true_rewards", "dones")}})
    one_array, cut = tmp_path / "one.npy", tmp_path / "cut.npz"
    np.save(one_array, np.zeros(3))
    cut.write_bytes(good.read_bytes()[:len(good.read_bytes()) // 2])  # a recording stopped mid-write
    for path, env, words in [(tmp_path / "none.npz", None, "No such file"),
                             (one_array, None, "not a NumPy archive"),
                             (cut, None, "is damaged"),
                             (bad_action, ENV, r"actions must be whole numbers in \[0, 4\]"),
                             (nan_reward, None, "not a finite number"),
                             (text, None, "not a NumPy archive"),
                             (partial, None, "no actions, true_rewards, dones, env_id"),
                             (shapes, None, r"got frames \(2, 28, 80, 80\)"),
                             (short, None, "clips of 10 steps; a run's clips are 25 steps long"),
                             (good, "PongNoFrameskip-v4", f"holds clips of {ENV}, not Pong")]:
        with pytest.raises(DemonstrationsError, match=words) as e:
            load_demonstrations(path, env)
        assert str(path) in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(DemonstrationsError):
        save_demonstrations(tmp_path / "empty.npz", ENV, [])


def test_the_mix_keeps_its_share_and_takes_every_demonstration_before_one_again():
    demos = _clips(7)
    mix = DemonstrationMix(demos, 0.2, 0.5, np.random.default_rng(0))
    taken = [c for arrived in [1, 3, 0, 2, 10, 4] * 10 for c in mix.after(arrived)]
    assert len(taken) == 200 // 4  # a fifth of all clips: one demonstration per 4 of the agent's
    first = [c.key for c, _ in taken[:7]]
    assert len(set(first)) == 7  # all of them once, in a shuffled order, before any repeats
    assert first != [c.key for c in demos]
    splits = {}
    for clip, split in taken:  # each keeps one split, whenever it comes back
        assert splits.setdefault(clip.key, split) == split
    assert set(splits.values()) == {False, True}


def test_the_mix_follows_how_often_a_demonstration_beats_the_agent():
    demos, agent = _clips(2), _clips(2, seed=1)
    mix = DemonstrationMix(demos, 0.5, 0.0, np.random.default_rng(0))
    mix.labelled(Preference(demos[0], agent[0], 1.0))  # the demonstration preferred
    mix.labelled(Preference(agent[1], demos[1], 0.5))  # a tie
    mix.labelled(Preference(agent[0], agent[1], 1.0))  # no demonstration: not counted
    mix.labelled(Preference(demos[0], demos[1], 0.0))  # two demonstrations: not counted
    assert mix.scalars() == {"demonstrations/labels": 2.0, "demonstrations/preferred": 0.75}


def test_labelling_draws_pairs_from_the_agents_clips_and_the_demonstrations(tmp_path):
    from launch.loop import Channels
    from pref_interface.config import LabellingConfig
    from pref_interface.labelling import LabellingStats
    from pref_interface.process import Labelling

    demos_path = tmp_path / "demos.npz"
    demos = _clips(4, value=255)  # white clips: the oracle sees their rewards, the test their frames
    save_demonstrations(demos_path, ENV, demos)
    clips: queue.Queue = queue.Queue()
    labelling = Labelling(LabellingConfig(synthetic=True, seed=0, max_pairs_per_clip=None,
                                          demonstrations=str(demos_path),
                                          demonstration_share=0.25, stop_after_labels=60),
                          Channels(None, clips), stats=LabellingStats.create(
                              mp.get_context("spawn")), store_path=str(tmp_path / "prefs.sqlite"))
    for clip in _clips(30, seed=2, value=0):
        clips.put(clip)
    labelling.take_clips()
    assert len(labelling.buffer) == 40  # 30 of the agent's and 10 demonstrations
    pairs = labelling.draw_pairs()
    for pair in pairs:
        labelling.commit(labelling.label(pair))
    white = [(p[1].frames()[0, 0, 0] == 255) + (p[3].frames()[0, 0, 0] == 255) for p in pairs]
    mixed = sum(w == 1 for w in white)
    assert mixed > 0 and labelling.demos.n_labels == mixed
    # The store says which clip of each label was a demonstration.
    named = {(True, False): "left", (False, True): "right", (True, True): "both"}
    expected = [named.get((p[1].frames()[0, 0, 0] == 255, p[3].frames()[0, 0, 0] == 255))
                for p in pairs]
    assert [row[9] for row in labelling.store.label_rows()] == expected
    for _ in range(3):  # more rounds: the demonstrations come back, each in its own split
        for clip in _clips(30, seed=3, value=0):
            clips.put(clip)
        labelling.take_clips()
    splits: dict[bytes, set[bool]] = {}
    for clip_id, clip in labelling.buffer._clips.items():
        splits.setdefault(clip.key, set()).add(labelling.buffer.is_validation(clip_id))
    demo_splits = [splits[c.key] for c in demos]
    assert all(len(s) == 1 for s in demo_splits)
    # the agent's same 30 clips, sent again, are drawn anew: some land in both splits
    assert any(len(s) == 2 for s in splits.values())
    counted = labelling.demos.scalars()
    labelling.close()
    # Resumed on the same store, the counts go on from its labels instead of from 0.
    again = Labelling(LabellingConfig(synthetic=True, seed=0, demonstrations=str(demos_path)),
                      Channels(None, queue.Queue()), stats=LabellingStats.create(
                          mp.get_context("spawn")), store_path=str(tmp_path / "prefs.sqlite"))
    assert again.demos.scalars() == counted
    again.close()


@pytest.mark.parametrize("flags, words", [
    (["--demonstrations", "{tmp}/none.npz"], "--demonstrations: .*No such file"),
    (["--demonstrations", "{tmp}/pong.npz"], "holds clips of PongNoFrameskip-v4, not"),
    (["--demonstrations", "{tmp}/dot.npz", "--demonstration_share", "1"], "must be in \\(0, 1\\)"),
])
def test_bad_demonstrations_are_a_usage_error_before_the_run(flags, words, tmp_path):
    from launch.cli import UsageError, parse_args

    save_demonstrations(tmp_path / "pong.npz", "PongNoFrameskip-v4", _clips(1))
    save_demonstrations(tmp_path / "dot.npz", ENV, _clips(1))
    args = ["train_policy_with_preferences", ENV, "--log_dir", str(tmp_path / "run"),
            *[f.format(tmp=tmp_path) for f in flags]]
    with pytest.raises(UsageError, match=words):
        parse_args(args)
    assert not (tmp_path / "run").exists()
    from launch.configs import labelling_config

    run = parse_args(args[:4] + ["--demonstrations", str(tmp_path / "dot.npz"),
                                 "--demonstration_share", "0.3"])  # a good file passes
    config = labelling_config(run)  # and reaches labelling
    assert (config.demonstrations, config.demonstration_share) == (str(tmp_path / "dot.npz"), 0.3)


def test_the_keys_held_become_the_games_action():
    from demonstrate import action_for
    from envs import action_names

    enduro = action_names("EnduroNoFrameskip-v4")
    for keys, name in [(set(), "noop"), ({" "}, "fire"), ({" ", "left"}, "leftfire"),
                       ({"down", "right"}, "downright"), ({"left", "right"}, "noop"),
                       ({"up", " "}, "fire"),  # Enduro has no up: fire alone
                       ({"down", "left", " "}, "downleft"),  # nor a braking fire
                       ({"a", "shift"}, "noop")]:
        assert enduro[action_for(keys, enduro)] == name, keys
    dot = action_names(ENV)
    assert dot[action_for({"up", " "}, dot)] == "up"  # MovingDot has no fire
    pong = action_names("PongNoFrameskip-v4")  # its paddle moves up with RIGHT, down with LEFT
    assert [pong[action_for(keys, pong)] for keys in ({"up"}, {"down", " "}, {"left"})] == [
        "right", "leftfire", "left"]


def test_a_persons_play_is_cut_into_clips_with_their_actions(tmp_path):
    from demonstrate import play_yourself
    from envs import action_names

    names = action_names(ENV)
    shown = []

    def show(frame, done):
        shown.append(done)
        return len(shown) <= 60  # the person stops after 60 steps

    clips = play_yourself(ENV, lambda: {"up"} if len(shown) % 2 else {"left"}, show, steps=100)
    assert len(clips) == 2 and shown[:2] == [0.0, 0.01]
    assert [names[a] for a in clips[0].actions[:4]] == ["up", "left", "up", "left"]
    save_demonstrations(tmp_path / "mine.npz", ENV, clips)
    assert len(load_demonstrations(tmp_path / "mine.npz", ENV)) == 2


@pytest.mark.skipif(not shutil.which("Xvfb"), reason="needs Xvfb (apt-get install xvfb)")
def test_the_window_follows_the_keys_and_stops_on_escape(xvfb, tmp_path):
    script = """
import numpy as np
from matplotlib.backend_bases import KeyEvent
from demonstrate import PlayWindow
w = PlayWindow("MovingDotNoFrameskip-v0", fps=1000)
canvas = w.fig.canvas
def key(kind, k):
    canvas.callbacks.process(kind, KeyEvent(kind, canvas, k))
key("key_press_event", "up"); key("key_press_event", " ")
assert w.held() == {"up", " "} and w.show(np.zeros((84, 84), "uint8"), 0.5)
key("key_release_event", "up")
assert w.held() == {" "}
key("key_press_event", "escape")
assert not w.show(np.zeros((84, 84), "uint8"), 0.6)
w.close()
print("ok")
"""
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=120, env={**os.environ, "DISPLAY": xvfb})
    assert r.stdout.strip() == "ok", r.stderr


def test_demonstrate_refuses_bad_input_in_one_line(tmp_path):
    no_display = {k: v for k, v in os.environ.items() if k != "DISPLAY"}
    (tmp_path / "taken.npz").write_bytes(b"")
    for args, words in [(["NoSuchGame-v4", str(tmp_path / "a.npz")], "NoSuchGame"),
                        ([ENV, str(tmp_path / "taken.npz")], "exists already"),
                        ([ENV, "/proc/d.npz"], "cannot write into /proc"),  # before the play
                        ([ENV, str(tmp_path / "b.npz"), "--steps", "3"], "at least 25")]:
        r = subprocess.run([sys.executable, "demonstrate.py", *args], capture_output=True,
                           text=True, timeout=120, env=no_display)
        assert r.returncode == 2 and words in r.stderr, r.stderr
        assert r.stderr.strip().splitlines()[-1].startswith("demonstrate.py: error:")


def test_a_scripted_drivers_play_is_recorded_with_its_actions(tmp_path, capsys):
    from experiments import record_demonstrations
    from experiments.alongside_teachers import ENV_ID

    out = tmp_path / "follower.npz"
    assert record_demonstrations.main([str(out), "--episodes", "1", "--steps", "60"]) == 0
    clips = load_demonstrations(out, ENV_ID)
    assert len(clips) == 2 and all(len(c) == CLIP_LENGTH for c in clips)
    assert clips[0].actions.any()  # the follower's actions, not zeros
    assert "level with a car in" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        record_demonstrations.main([str(tmp_path / "x.npz"), "--driver", "flyer"])
    assert e.value.code == 2 and "unknown driver 'flyer'" in capsys.readouterr().err


def test_a_run_says_it_labels_demonstrations_beside_the_agents_clips(tmp_path, capsys):
    from launch.cli import parse_args
    from launch.session import start_run

    save_demonstrations(tmp_path / "dot.npz", ENV, _clips(1))
    run = parse_args(["train_policy_with_preferences", ENV, "--synthetic_prefs", "--log_dir",
                      str(tmp_path / "run"), "--demonstrations", str(tmp_path / "dot.npz"),
                      "--demonstration_share", "0.3"])
    _, session, _ = start_run(run)
    session.release_run_dir()
    err = capsys.readouterr().err
    assert (f"demonstrations: {tmp_path / 'dot.npz'} make up 30% of the clips labelling draws "
            "its pairs from") in err, err


def test_the_store_keeps_which_clips_are_demonstrations_through_export_and_show_prefs(tmp_path):
    from pref_interface.store import PreferenceStore, StoreError
    from show_prefs import Browser

    agent, demo = _clips(2, value=0), _clips(1, value=255)[0]
    with PreferenceStore(tmp_path / "a.sqlite") as a:
        a.add(Preference(agent[0], agent[1], 0.5))  # before any: the store keeps its columns
        assert a.label_rows()[0][9] is None and not a._has_column("demonstration")
        a.add(Preference(demo, agent[0], 1.0, demonstration="left"))
        a.add(Preference(agent[1], demo, 0.0, demonstration="right"))
        with pytest.raises(ValueError, match="demonstration must be one of"):
            a.add(Preference(agent[1], demo, 0.0, demonstration="yes"))
        assert [p.demonstration for p in a.latest(3)] == [None, "left", "right"]
        browser = Browser(a, "terminal", None, None)  # type: ignore[arg-type]
        try:  # paging through the labels names the side too
            assert browser.status(2, a.get(2))[1].endswith("demonstration: left")
            assert "demonstration" not in browser.status(1, a.get(1))[1]
        finally:
            browser.player.close("")
        a.export_npz(tmp_path / "x.npz")
    with np.load(tmp_path / "x.npz", allow_pickle=False) as z:
        assert z["demonstration"].tolist() == ["", "left", "right"]
    with PreferenceStore(tmp_path / "b.sqlite") as b:
        assert b.import_npz(tmp_path / "x.npz") == 3
        assert [row[9] for row in b.label_rows()] == [None, "left", "right"]
    bad = tmp_path / "bad.npz"  # a side that is none of the three: the file adds nothing
    with np.load(tmp_path / "x.npz", allow_pickle=False) as z:
        np.savez(bad, **{k: z[k] for k in z.files if k != "demonstration"},
                 demonstration=np.array(["", "left", "middle"]))
    with PreferenceStore(tmp_path / "c.sqlite") as c:
        with pytest.raises(StoreError, match="demonstration must be one of"):
            c.import_npz(bad)
        assert len(c) == 0

    def show_prefs(*args: str) -> list[str]:
        r = subprocess.run([sys.executable, "show_prefs.py", str(tmp_path / "a.sqlite"), *args],
                           cwd=os.path.dirname(os.path.dirname(__file__)), capture_output=True,
                           text=True, timeout=60, stdin=subprocess.DEVNULL)
        assert r.returncode == 0, r
        return r.stdout.splitlines()

    table = show_prefs("--table")
    assert table[0].split()[-1] == "demonstration"
    assert [line.split()[-1] for line in table[1:]] == ["-", "left", "right"]
    assert show_prefs("--list")[-1] == "2 labels (66.7%) compare a demonstration (--demonstrations)"


@pytest.mark.parametrize("args, words", [
    (["{tmp}/d.npz", "--driver", "following:2"], "P is a probability"),
    (["{tmp}/d.npz", "--driver", "policy:{tmp}/none.pt"], "no policy checkpoint"),
    (["{tmp}/there.npz"], "exists already"),
    (["{tmp}/d.npz", "--seed", "-1"], "--seed must be in [0, "),
    (["{tmp}/d.npz", "--seed", "2147483647", "--episodes", "2"],
     "(2 envs take seed to seed + 1)"),  # the last episode's seed, before the first is driven
])
def test_recording_refuses_bad_input_in_one_line_before_it_drives(tmp_path, args, words):
    (tmp_path / "there.npz").write_bytes(b"kept")
    r = subprocess.run([sys.executable, "-m", "experiments.record_demonstrations",
                        *(a.format(tmp=tmp_path) for a in args)],
                       cwd=os.path.dirname(os.path.dirname(__file__)), capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and words in r.stderr, r.stderr
    assert not (tmp_path / "d.npz").exists() and (tmp_path / "there.npz").read_bytes() == b"kept"


@pytest.mark.parametrize("args, words", [
    (["--seed", "-1"], "--seed must be in [0, "),
    (["--steps", "10"], "--steps must be at least 25"),
])
def test_playing_refuses_bad_input_in_one_line_and_makes_no_folder(tmp_path, capsys, args, words):
    from demonstrate import main

    with pytest.raises(SystemExit) as e:
        main(["MovingDot-v0", str(tmp_path / "new" / "d.npz"), *args])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and words in err, err
    assert not (tmp_path / "new").exists()
