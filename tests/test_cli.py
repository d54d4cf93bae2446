"""The command line: smoke runs, one-line errors with exit status 2, clean Ctrl-C."""
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from easyprocess import EasyProcess

from experiments.runlog import scalars
from tests.helpers import wait_until

ROOT = Path(__file__).resolve().parent.parent


def run(*args, timeout=120) -> EasyProcess:
    """`python ARGS...` in the repository, waited for; its output comes back stripped."""
    p = EasyProcess([sys.executable, *args], cwd=str(ROOT)).call(timeout=timeout)
    assert not p.timeout_happened, f"python {' '.join(args)}: still running after {timeout} s"
    return p


def test_original_rewards_smoke_run_writes_the_run_directory_and_resumes(tmp_path):
    d = tmp_path / "run"
    r = run("run.py", "train_policy_with_original_rewards", "MovingDotNoFrameskip-v0",
            "--million_timesteps", "0.002", "--n_envs", "4", "--ensemble_size", "5",
            "--log_dir", str(d))
    assert r.return_code == 0, r.stderr
    assert ("note: --ensemble_size: not used by train_policy_with_original_rewards on "
            "MovingDotNoFrameskip-v0") in r.stderr
    assert (d / "command.txt").read_text().strip().endswith(f"--log_dir {d}")
    assert '"n_envs": 4' in (d / "settings.json").read_text()
    assert list((d / "policy").glob("policy-*.pt"))
    assert list((d / "tb").glob("events.out.tfevents.*"))
    # The summary at the end: what the run did and what to type next.
    summary = r.stderr[r.stderr.index("run finished"):]
    assert "agent steps    2,000" in summary and f"run directory  {d}" in summary, summary
    assert "(mean of the last 100 episodes; random -2.5, scripted 21.8)" in summary
    assert f"run_checkpoint.py MovingDotNoFrameskip-v0 {d}/policy" in summary
    assert "resume:" not in summary and "labels" not in summary  # finished; no labels here
    w = run("run_checkpoint.py", "MovingDotNoFrameskip-v0", str(d / "policy"), "--episodes", "2",
            "--video", str(tmp_path / "videos" / "ep.gif"),  # its folder is made
            "--save_weights", str(tmp_path / "dot.pt"))
    assert w.return_code == 0, w.stderr
    assert "policy after 2,000 agent steps" in w.stdout
    assert "mean return" in w.stdout and (tmp_path / "videos" / "ep.gif").stat().st_size > 1000
    w = run("run_checkpoint.py", "MovingDotNoFrameskip-v0", str(tmp_path / "dot.pt"),
            "--episodes", "1")
    assert w.return_code == 0 and "policy after 2,000 agent steps" in w.stdout, w.stderr

    # --resume from the last checkpoint, as a run saved before two of today's settings existed
    import json

    import torch

    first = json.loads((d / "settings.json").read_text())
    for newer in ("device", "reward_predictor_device"):
        del first[newer]
    (d / "settings.json").write_text(json.dumps(first))
    # While another process holds the directory (its run still going or saving), a resume is
    # refused in one line and writes nothing; the run's own end let the directory go.
    from launch.rundir import RunDirLock

    held = RunDirLock(d)
    r = run("run.py", "--resume", str(d), "--million_timesteps", "0.004")
    held.release()
    assert r.return_code == 2 and "\n" not in r.stderr, r.stderr
    assert f"is in use by pid {os.getpid()}" in r.stderr, r.stderr
    assert len((d / "command.txt").read_text().splitlines()) == 1
    r = run("run.py", "--resume", str(d), "--million_timesteps", "0.004", "--ent_coef", "0.02")
    assert r.return_code == 0, r.stderr
    newest = sorted((d / "policy").glob("policy-*.pt"))[-1]
    assert torch.load(newest, weights_only=True)["timesteps"] == 4000
    # The log's first line counts from the checkpoint, not from 0 (no rate over a false jump).
    assert next(line for line in (r.stdout + r.stderr).splitlines()
                if line.startswith("agent steps")).startswith("agent steps 2,000/4,000"), r.stderr
    assert len((d / "command.txt").read_text().splitlines()) == 2
    starts = [line.split("\t") for line in (d / "machines.txt").read_text().splitlines()]
    assert len(starts) == 2 and all(len(s) == 3 and s[2] == "policy on cpu, predictor on cpu"
                                    for s in starts)
    # The flags given on resuming are the run's settings from now on (a later --resume keeps
    # them); settings newer than the run are written with the defaults it ran with.
    assert json.loads((d / "settings.json").read_text()) == {
        **first, "million_timesteps": 0.004, "ent_coef": 0.02, "device": "cpu",
        "reward_predictor_device": "cpu"}


@pytest.mark.parametrize("args,reason", [
    (["no_such_mode", "MovingDotNoFrameskip-v0"], "unknown mode 'no_such_mode'"),
    (["train_policy_with_original_rewards", "NoSuchGame-v4"], "unknown env 'NoSuchGame-v4'"),
    (["train_policy_with_original_rewards", "MovingDot-v0", "--million_timesteps", "0"],
     "--million_timesteps must be positive"),
    (["train_policy_with_original_rewards", "MovingDot-v0", "--million_timesteps", "-2"],
     "--million_timesteps must be positive"),
    (["train_policy_with_original_rewards", "MovingDot-v0", "--n_envs", "0"],
     "--n_envs must be positive"),
    (["train_policy_with_original_rewards", "MovingDot-v0", "--load_policy_ckpt_dir", "/nope"],
     "/nope does not exist"),
    (["train_policy_with_original_rewards", "MovingDot-v0", "--bogus_flag"],
     "unrecognized arguments: --bogus_flag"),
    (["train_policy_with_preferences", "MovingDot-v0", "--reward_predictor_device", "tpu"],
     "unknown device 'tpu'"),
    (["train_policy_with_preferences", "MovingDot-v0", "--reward_predictor_device", "cuda:99"],
     "--reward_predictor_device cuda:99"),
    (["train_policy_with_original_rewards", "MovingDot-v0", "--device", "cuda:99"],
     "--device cuda:99"),
    (["train_policy_with_preferences", "MovingDot-v0", "--min_predictor_labels_per_step", "-1"],
     "--min_predictor_labels_per_step must not be negative"),
    (["train_policy_with_preferences", "MovingDot-v0", "--max_predictor_labels_per_step", "-1"],
     "--max_predictor_labels_per_step must not be negative"),
    (["train_policy_with_preferences", "MovingDot-v0", "--max_pairs_per_clip", "-1"],
     "--max_pairs_per_clip must not be negative"),
    (["train_policy_with_preferences", "MovingDot-v0", "--max_clips", "1"],
     "--max_clips must be at least 2"),
    (["train_policy_with_original_rewards"], "required: env_id"),
    (["train_policy_with_original_rewards", "MovingDot-v0", "--lr", "nan"],
     "--lr: must be a finite number"),
    (["train_policy_with_original_rewards", "MovingDot-v0", "--million_timesteps", "inf"],
     "--million_timesteps: must be a finite number"),
    (["train_policy_with_original_rewards", "MovingDot-v0", "--seed", "-1"], "--seed must be in [0,"),
    (["train_policy_with_original_rewards", "MovingDot-v0", "--seed", "2147483647"],
     "--seed must be in [0,"),
    (["train_policy_with_preferences", "MovingDot-v0", "--clip_player", "web", "--web_port",
      "99999"], "--web_port must be in [0, 65535]"),
    (["train_policy_with_preferences", "MovingDot-v0", "--batchnorm", "--no_batchnorm"],
     "not allowed with argument --batchnorm"),
    (["train_policy_with_original_rewards", "MovingDot-v0", "--n_env", "4"],  # a prefix: no flag
     "did you mean --n_envs?"),
    (["train_policy_with_original_rewards", "MovingDot-v0", "--run_name", "../x"],
     "--run_name is a plain name"),
    (["gather_initial_prefs", "MovingDot-v0", "--labellers", "ann,bob", "--leave_out", "carl"],
     "--leave_out carl: not among --labellers"),
    (["train_policy_with_preferences", "MovingDot-v0", "--label_schedule", "annealed",
      "--max_labels", "5", "--n_initial_prefs", "6"], "is below --n_initial_prefs 6"),
])
def test_bad_input_is_one_line_on_stderr_with_status_2(args, reason, tmp_path):
    r = run("run.py", *args, "--log_dir", str(tmp_path / "x"))
    assert r.return_code == 2
    assert "\n" not in r.stderr and r.stderr.startswith("run.py: error:"), r.stderr
    assert reason in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "x").exists()


def test_a_label_budget_below_the_initial_labels_is_refused_only_where_a_schedule_spends_it(
        tmp_path):
    """Gathering takes its --n_initial_prefs whatever the schedule; training would spend them all
    of --max_labels before its schedule began."""
    from launch.cli import UsageError, parse_args

    budget = ["--label_schedule", "annealed", "--max_labels", "5", "--n_initial_prefs", "6",
              "--log_dir", str(tmp_path / "x")]
    assert parse_args(["gather_initial_prefs", "MovingDot-v0", *budget]).settings.max_labels == 5
    with pytest.raises(UsageError, match="below --n_initial_prefs 6"):
        parse_args(["train_policy_with_preferences", "MovingDot-v0", *budget])
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("args,reason", [
    (["MovingDotNoFrameskip-v0", "/nope/policy"], "no policy checkpoint directory or file"),
    (["NoSuchGame-v4", "/nope/policy"], "unknown env 'NoSuchGame-v4'"),
    (["MovingDotNoFrameskip-v0", "{policy}", "--video", "{tmp}/ep.mp4"], "must name a .gif"),
    (["MovingDotNoFrameskip-v0", "{policy}", "--save_weights", "{tmp}/dot.pth"],
     "must name a .pt"),
    (["MovingDotNoFrameskip-v0", "{policy}", "--episodes", "0"], "must be positive"),
    (["MovingDotNoFrameskip-v0", "{policy}/policy-000000000008.pt"],  # a damaged file
     "not a torch checkpoint"),
    (["MovingDotNoFrameskip-v0", "{policy}", "--save_weights",
      "{policy}/policy-000000000800.pt"], "exists already"),
    (["MovingDotNoFrameskip-v0", "{policy}", "--video", "{policy}/policy-000000000800.pt"],
     "must name a .gif"),
    (["MovingDotNoFrameskip-v0", "{policy}", "--reward_predictor", "{tmp}/rp.txt"],
     "--reward_predictor: give a run directory"),
    (["PongNoFrameskip-v4", "{policy}"], "does not fit this environment's network"),  # MovingDot's
    (["MovingDotNoFrameskip-v0", "{policy}", "--seed", "-3"], "--seed must be in [0,"),
    # Pong's policy fits SpaceInvaders' network (six actions each): the file names its game
    (["SpaceInvadersNoFrameskip-v4", "{tmp}/pong.pt"], "is a policy for PongNoFrameskip-v4"),
    # no display, and the output captured: nowhere to draw (terminal codes would fill the pipe)
    (["MovingDotNoFrameskip-v0", "{policy}", "--watch"], "there is no display"),
])
def test_run_checkpoint_bad_input_is_one_line_on_stderr_with_status_2(args, reason, tmp_path,
                                                                     capsys, monkeypatch):
    """In this process (a subprocess each would import torch ten times over): an exception that
    escaped main() would fail the test as a traceback would; tests/test_evaluate.py runs the
    command itself to its status 2."""
    import run_checkpoint

    monkeypatch.delenv("DISPLAY", raising=False)
    policy = tmp_path / "policy"
    policy.mkdir()
    (policy / "policy-000000000008.pt").write_bytes(b"not a checkpoint")
    (tmp_path / "rp.txt").write_text("not a predictor")
    if "{policy}" in args:  # a newer, good checkpoint, so that only the flag is wrong
        from a2c.a2c import A2C, A2CConfig
        from a2c.checkpoint import save_policy
        from a2c.policies import make_policy
        net = make_policy("moving_dot", 5)
        save_policy(policy, net, A2C(net, A2CConfig()).optimizer, timesteps=800, updates=10)
        kept = (policy / "policy-000000000800.pt").read_bytes()
    if "{tmp}/pong.pt" in args:
        from a2c.checkpoint import save_policy_weights
        from a2c.policies import make_policy
        save_policy_weights(tmp_path / "pong.pt", {"policy": make_policy("atari", 6).state_dict(),
                                                   "timesteps": 8, "env_id": "PongNoFrameskip-v4"})
    assert run_checkpoint.main([a.format(policy=policy, tmp=tmp_path) for a in args]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("run_checkpoint.py: error:") and reason in err, err
    assert not list(tmp_path.glob("dot.*")) and not list(tmp_path.glob("ep.*"))
    if "{policy}" in args:  # never overwritten
        assert (policy / "policy-000000000800.pt").read_bytes() == kept


def test_a_run_directory_is_taken_as_where_a_new_run_s_policy_starts(tmp_path):
    """--start_policy and --load_policy_ckpt_dir given a run directory: its policy/."""
    import re

    from a2c.a2c import A2C, A2CConfig
    from a2c.checkpoint import save_policy, save_policy_weights
    from a2c.policies import make_policy
    from launch.cli import UsageError, parse_args

    done = tmp_path / "done"
    net = make_policy("moving_dot", 5)
    save_policy(done / "policy", net, A2C(net, A2CConfig()).optimizer, timesteps=8, updates=1)
    (done / "settings.json").write_text("{}")
    for flag in ("--start_policy", "--load_policy_ckpt_dir"):
        run = parse_args(["train_policy_with_original_rewards", "MovingDot-v0", flag, str(done),
                          "--log_dir", str(tmp_path / "new")])
        assert getattr(run.settings, flag[2:]) == str(done / "policy")
    import run_checkpoint  # and played from, as the evaluator plays a run directory

    assert run_checkpoint.main(["MovingDot-v0", str(done), "--episodes", "1", "--max_steps",
                                "10"]) == 0
    # a run through examples.ppo keeps its policy's weights alone: a start, not a checkpoint
    ppo, empty = tmp_path / "ppo", tmp_path / "empty"
    for d in (ppo, empty):
        d.mkdir()
        (d / "settings.json").write_text("{}")
    save_policy_weights(ppo / "ppo_policy.pt", {"policy": net.state_dict(), "timesteps": 8})
    run = parse_args(["train_policy_with_original_rewards", "MovingDot-v0", "--start_policy",
                      str(ppo), "--log_dir", str(tmp_path / "new")])
    assert run.settings.start_policy == str(ppo / "ppo_policy.pt")
    for flag, d, words in (("--load_policy_ckpt_dir", ppo, "(its policy's weights alone: "
                                                          "--start_policy)"),
                           ("--load_policy_ckpt_dir", empty, "holds no policy yet"),
                           ("--start_policy", empty, "holds no policy yet")):
        with pytest.raises(UsageError, match=re.escape(words)):
            parse_args(["train_policy_with_original_rewards", "MovingDot-v0", flag, str(d),
                        "--log_dir", str(tmp_path / "new")])


def test_a_run_resumes_under_either_of_moving_dots_names_and_not_under_another_game(tmp_path):
    import json
    import shutil

    from launch.cli import UsageError, parse_args

    d = tmp_path / "run"  # a MovingDotNoFrameskip-v0 run
    shutil.copytree(Path(__file__).parent / "fixtures" / "run_29d3a96", d)
    run = parse_args(["train_policy_with_preferences", "MovingDot-v0", "--resume", str(d),
                      "--million_timesteps", "0.006"])
    assert run.resumed and run.settings.million_timesteps == 0.006
    assert run.settings.env_id == "MovingDotNoFrameskip-v0"  # the run keeps its own name
    with pytest.raises(UsageError, match="this run's env_id is MovingDotNoFrameskip-v0"):
        parse_args(["train_policy_with_preferences", "PongNoFrameskip-v4", "--resume", str(d)])
    with pytest.raises(UsageError, match="PongNoFrameskip-v4 is not a mode; the run goes on with "
                                         "its own, train_policy_with_preferences "
                                         "MovingDotNoFrameskip-v0"):
        parse_args(["--resume", str(d), "PongNoFrameskip-v4"])  # an env id alone, read as a mode
    # A settings file edited by hand with a value of the wrong kind is named, not a traceback.
    settings = json.loads((d / "settings.json").read_text())
    (d / "settings.json").write_text(json.dumps({**settings, "n_envs": "16"}))
    with pytest.raises(UsageError, match=r"settings.json is damaged \(n_envs is '16', not int\)"):
        parse_args(["--resume", str(d)])
    (d / "settings.json").write_text(json.dumps(settings))
    # Its label store is read now: a damaged one is a mistake said before anything starts.
    (d / "prefs.sqlite").write_bytes(b"not a database" * 100)
    with pytest.raises(UsageError, match="--resume: .* is not a readable preference store"):
        parse_args(["--resume", str(d), "--million_timesteps", "0.006"])


def test_a_weights_file_written_by_run_checkpoint_names_the_game_it_was_checked_on(tmp_path):
    """A file from before policies named their game gets the name `run_checkpoint.py` checked."""
    import torch

    import run_checkpoint
    from a2c.checkpoint import save_policy_weights
    from a2c.policies import make_policy

    save_policy_weights(tmp_path / "old.pt", {"policy": make_policy("moving_dot", 5).state_dict(),
                                              "timesteps": 8})
    assert run_checkpoint.main(["MovingDotNoFrameskip-v0", str(tmp_path / "old.pt"), "--episodes",
                                "1", "--max_steps", "10", "--save_weights",
                                str(tmp_path / "new.pt")]) == 0
    assert torch.load(tmp_path / "new.pt", weights_only=True)["env_id"] == "MovingDotNoFrameskip-v0"
    # MovingDot's two names are one game
    assert run_checkpoint.main(["MovingDot-v0", str(tmp_path / "new.pt"), "--episodes", "1",
                                "--max_steps", "10"]) == 0


def test_a_run_directory_that_cannot_be_made_is_one_line(tmp_path):
    (tmp_path / "afile").write_text("")
    r = run("run.py", "train_policy_with_original_rewards", "MovingDot-v0", "--log_dir",
            str(tmp_path / "afile" / "run"))
    assert r.return_code == 2, r.stderr
    assert "\n" not in r.stderr and "cannot make the run directory" in r.stderr, r.stderr


def test_another_games_policy_or_a_weights_file_is_refused_before_the_run(tmp_path):
    """A policy checkpoint that does not fit the env's network, or the weights alone, is a
    one-line error of the preflight check; nothing is written."""
    from a2c.a2c import A2C, A2CConfig
    from a2c.checkpoint import save_policy, save_policy_weights
    from a2c.policies import make_policy

    pong = make_policy("atari", 6)
    save_policy(tmp_path / "pong", pong, A2C(pong, A2CConfig()).optimizer, timesteps=8, updates=1)
    (tmp_path / "weights").mkdir()
    save_policy_weights(tmp_path / "weights" / "policy-000000000008.pt",
                        {"policy": make_policy("moving_dot", 5).state_dict(), "timesteps": 8})
    for ckpt, message in (("pong", "does not fit this environment"),
                          ("weights", "weights alone")):
        r = run("run.py", "train_policy_with_original_rewards", "MovingDot-v0",
                "--load_policy_ckpt_dir", str(tmp_path / ckpt), "--log_dir", str(tmp_path / "r"))
        assert r.return_code == 2 and "\n" not in r.stderr and message in r.stderr, r.stderr
        assert not (tmp_path / "r").exists()
    # --start_policy: another game's weights, or with --load_policy_ckpt_dir as well
    save_policy_weights(tmp_path / "pong.pt", {"policy": pong.state_dict(), "timesteps": 8})
    for flags, message in ((["--start_policy", str(tmp_path / "pong.pt")],
                            "does not fit this environment"),
                           (["--start_policy", str(tmp_path / "pong.pt"), "--load_policy_ckpt_dir",
                             str(tmp_path / "pong")], "give one")):
        r = run("run.py", "train_policy_with_original_rewards", "MovingDot-v0", *flags,
                "--log_dir", str(tmp_path / "r"))
        assert r.return_code == 2 and "\n" not in r.stderr and message in r.stderr, r.stderr
        assert not (tmp_path / "r").exists()


def test_a_run_stopped_before_its_first_checkpoint_resumes_from_the_policy_it_started_from(
        tmp_path):
    """A preference run spends its gathering and pretraining without a policy checkpoint of its
    own: stopped there, it goes on from --load_policy_ckpt_dir's policy, not a fresh one."""
    from a2c.a2c import A2C, A2CConfig
    from a2c.checkpoint import save_policy
    import json

    from a2c.policies import make_policy
    from launch.cli import parse_args

    net = make_policy("moving_dot", 5)
    save_policy(tmp_path / "start" / "policy", net, A2C(net, A2CConfig()).optimizer, timesteps=8,
                updates=1)
    (tmp_path / "start" / "settings.json").write_text("{}")
    new = parse_args(["train_policy_with_preferences", "MovingDot-v0", "--synthetic_prefs",
                      "--load_policy_ckpt_dir", str(tmp_path / "start"),
                      "--log_dir", str(tmp_path / "run")])
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "settings.json").write_text(json.dumps(new.settings.to_json()))
    resumed = parse_args(["--resume", str(tmp_path / "run")])
    assert resumed.policy_ckpt_dir == new.policy_ckpt_dir == str(tmp_path / "start" / "policy")


def test_a_loaded_store_is_copied_whole_and_copied_again_by_a_resume_stopped_before(tmp_path,
                                                                                  monkeypatch):
    """--load_prefs_dir's labels reach the run's store whole or not at all: a run stopped while
    copying them has no store, and its resume makes the copy then."""
    import json

    import numpy as np

    from launch.cli import parse_args
    from launch.phases import copy_prefs
    from pref_interface.store import PreferenceStore, stored_labels
    from tests.helpers import moving_dot_pref

    rng = np.random.default_rng(0)
    (tmp_path / "labels").mkdir()
    with PreferenceStore(tmp_path / "labels" / "prefs.sqlite") as store:
        for k in range(6):
            store.add(moving_dot_pref(rng, is_validation=k == 0))
    new = parse_args(["train_policy_with_preferences", "MovingDot-v0", "--synthetic_prefs",
                      "--load_prefs_dir", str(tmp_path / "labels"),
                      "--log_dir", str(tmp_path / "run")])
    (tmp_path / "run").mkdir()  # stopped before the copy was whole: no store yet
    (tmp_path / "run" / "settings.json").write_text(json.dumps(new.settings.to_json()))
    resumed = parse_args(["--resume", str(tmp_path / "run")])
    assert resumed.prefs_path == new.prefs_path == str(tmp_path / "labels" / "prefs.sqlite")
    backup_to = PreferenceStore.backup_to

    def disk_full(self, path):  # part of the copy written, then the disk is full
        Path(path).write_bytes(b"SQLite format 3\x00" + bytes(100))
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(PreferenceStore, "backup_to", disk_full)
    with pytest.raises(OSError):
        copy_prefs(resumed)
    assert os.listdir(tmp_path / "run") == ["settings.json"]  # no store, no half copy
    monkeypatch.setattr(PreferenceStore, "backup_to", backup_to)
    assert copy_prefs(resumed) == str(tmp_path / "run" / "prefs.sqlite")
    assert stored_labels(tmp_path / "run" / "prefs.sqlite") == 6
    assert sorted(os.listdir(tmp_path / "run")) == ["prefs.sqlite", "settings.json"]
    # once copied, a resume goes on from the run's own store, whatever the loaded one holds now
    assert parse_args(["--resume", str(tmp_path / "run")]).prefs_path is None


@pytest.mark.parametrize("resumed, predictor, pretrained", [
    (False, None, True),  # a new run pretrains its own predictor
    (False, "loaded", False),  # a loaded predictor is not pretrained
    (True, "loaded", False),  # nor when the run is resumed (stopped while gathering)
    (True, "own", True),  # a resumed run finishes its own pretraining, however the path reads
])
def test_only_the_runs_own_predictor_is_pretrained(resumed, predictor, pretrained, tmp_path,
                                                   monkeypatch):
    import dataclasses

    from launch import phases
    from launch.cli import parse_args
    from launch.rundir import epochs_pretrained

    run = parse_args(["train_policy_with_preferences", "MovingDot-v0", "--synthetic_prefs",
                      "--log_dir", str(tmp_path / "run")])
    (tmp_path / "run" / "reward_predictor").mkdir(parents=True)
    paths = {None: None, "loaded": str(tmp_path / "elsewhere" / "reward_predictor.pt"),
             "own": str(tmp_path / "run" / "." / "reward_predictor" / "reward_predictor.pt")}
    run = dataclasses.replace(run, resumed=resumed, reward_ckpt_path=paths[predictor])
    calls = []
    monkeypatch.setattr(phases, "stored_labels", lambda path: 10**6)  # nothing to gather
    monkeypatch.setattr(phases, "pretrain_phase",
                        lambda run, ctx, session, prefs: calls.append(prefs) or (0, "pretrained"))
    code, prefs, path = phases.prepare_predictor(run, None, None)
    assert code == 0 and prefs == str(tmp_path / "run" / "prefs.sqlite")
    assert (calls == [prefs]) == pretrained and path == ("pretrained" if pretrained else paths[predictor])
    assert epochs_pretrained(tmp_path / "run") == run.settings.n_initial_epochs


def test_a_run_directory_goes_unguarded_where_the_filesystem_has_no_flock(tmp_path,
                                                                          monkeypatch):
    import errno
    import fcntl

    from launch.rundir import LOCK_FILE, RunDirLock, run_dir_holder

    def no_flock(*args):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_flock)
    lock = RunDirLock(tmp_path)  # taken, unguarded: the run goes on, and says who runs it
    assert (tmp_path / LOCK_FILE).read_text().startswith(f"pid {os.getpid()} on ")
    assert run_dir_holder(tmp_path) is None  # no error where nobody can be seen holding it
    lock.release()


def test_a_run_directory_that_cannot_be_written_is_one_line_and_not_left_held(tmp_path,
                                                                              monkeypatch):
    import errno

    import runtime.machine
    from launch.cli import UsageError, parse_args
    from launch.rundir import run_dir_holder
    from launch.session import start_run

    def disk_full():
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(runtime.machine, "processor", disk_full)
    d = tmp_path / "run"
    argv = ["train_policy_with_original_rewards", "MovingDot-v0", "--log_dir", str(d)]
    with pytest.raises(UsageError, match="cannot make the run directory .*No space left"):
        start_run(parse_args(argv))
    assert run_dir_holder(d) is None
    # nothing half made is left: not a directory without settings that a new run would refuse
    # and `--resume` would not know, nor the one it was made in
    assert os.listdir(tmp_path) == []
    assert parse_args(argv).dir == d


def test_existing_run_directory_is_never_overwritten(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    (d / "keep.txt").write_text("mine")
    r = run("run.py", "train_policy_with_original_rewards", "MovingDot-v0", "--log_dir", str(d))
    assert r.return_code == 2 and "already exists" in r.stderr
    assert os.listdir(d) == ["keep.txt"]


def _ignore_sigint():
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a shell does for a script's `cmd &`


@pytest.mark.parametrize("started_in_background", [False, True])
def test_ctrl_c_saves_a_checkpoint_leaves_no_process_and_exits_130(tmp_path,
                                                                    started_in_background):
    d = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "run.py", "train_policy_with_original_rewards",
                             "MovingDotNoFrameskip-v0", "--log_dir", str(d)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True,
                            preexec_fn=_ignore_sigint if started_in_background else None)
    wait_until(lambda: list(d.glob("tb/events*")), 60, "the run's event file", poll_s=0.5)
    # Ctrl-C mid-training: once A2C has stepped and logged its speed
    wait_until(lambda: len(scalars(d / "tb", "charts/SPS")), 60, "A2C's first logged speed",
               poll_s=0.5)
    os.killpg(proc.pid, signal.SIGINT)  # what the terminal does on Ctrl-C
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert list((d / "policy").glob("policy-*.pt"))
    assert "run stopped by Ctrl-C" in err and f"python run.py --resume {d}" in err, err
    wait_until(lambda: not alive_in_session(proc.pid), 5, "no process left of the run",
               poll_s=0.1, explain=lambda: f"alive: {alive_in_session(proc.pid)}")


def alive_in_session(sid: int) -> list[str]:
    """`ps` lines (pid, state) of the session's processes that are not zombies: those are dead,
    and this container's init does not reap them."""
    ps = subprocess.run(["ps", "-o", "pid=,stat=", "-g", str(sid)], capture_output=True, text=True)
    return [line for line in ps.stdout.splitlines() if "Z" not in line.split()[1]]


@pytest.mark.parametrize("name", ["moving_dot", "pong_prefs", "pong_true", "enduro_prefs",
                                  "enduro_true"])
def test_each_milestone_command_is_a_valid_run(name, tmp_path):
    """`python -m experiments.milestone NAME` must not die on a flag that run.py refuses."""
    from experiments.milestones import MILESTONES
    from launch.cli import parse_args

    m = MILESTONES[name]
    parse_args([m.mode, m.env_id, *m.flags, "--seed", "0", "--log_dir", str(tmp_path / name)])


def test_a_milestone_run_that_reached_its_steps_is_not_reported_as_going_on(tmp_path, capsys,
                                                                           monkeypatch):
    """A run with no level to reach ends at its agent steps: the report gives them from its
    newest checkpoint (its last episode may end earlier) and no longer says "so far"."""
    import json

    from experiments import milestone
    from runtime.scalars import ScalarWriter

    monkeypatch.setattr(milestone, "plot", lambda *args: None)
    d = milestone.run_dir("enduro_true", 0, tmp_path)
    (d / "policy").mkdir(parents=True)
    (d / "settings.json").write_text(json.dumps({"million_timesteps": 0.001}))
    a2c = ScalarWriter(str(d / "tb"))
    for step in (300, 600, 900):
        a2c.add_scalar("charts/episodic_return", 0.0, step)
        a2c.add_scalar("charts/SPS", 100.0, step)
    a2c.close()

    def row() -> str:
        milestone.report(milestone.MILESTONES["enduro_true"], "enduro_true", [0], tmp_path)
        return capsys.readouterr().out.splitlines()[-1]

    (d / "policy" / "policy-000000000960.pt").touch()
    assert row().startswith("| 0 | - | 960 so far | - |")
    (d / "policy" / "policy-000000001000.pt").touch()
    assert row().startswith("| 0 | - | 1,000 | - | ") and "so far" not in row()
    # A run with labels and no level (Enduro from preferences) gives its count at its steps.
    labels = ScalarWriter(str(d / "tb" / "labels"))
    labels.add_scalar("labels/total", 40.0, 500)
    labels.add_scalar("labels/total", 55.0, 990)
    labels.close()
    assert row().startswith("| 0 | - | 1,000 | 55 | ")


def test_a_milestone_figure_names_each_curve_by_its_own_seed(tmp_path, monkeypatch):
    """A seed with no run yet (seed 1 of 0 1 2) leaves no gap in the figure's legend: seed 2's
    curve is called seed 2."""
    import json

    from experiments import milestone
    from runtime.scalars import ScalarWriter

    plotted = []
    monkeypatch.setattr(milestone, "plot", lambda dirs, labels, *rest: plotted.append(labels))
    for seed in (0, 2):
        d = milestone.run_dir("enduro_true", seed, tmp_path)
        (d / "tb").mkdir(parents=True)
        (d / "settings.json").write_text(json.dumps({"million_timesteps": 0.001}))
        w = ScalarWriter(str(d / "tb"))
        w.add_scalar("charts/episodic_return", 0.0, 300)
        w.close()
    milestone.report(milestone.MILESTONES["enduro_true"], "enduro_true", [0, 1, 2], tmp_path)
    assert plotted == [["seed 0", "seed 2"]]


def test_a_milestone_figure_goes_where_out_says(tmp_path, monkeypatch):
    """The figure goes beside the runs, or where `--out` says; never over the docs' figures."""
    from experiments import milestone

    drawn, swept = [], []
    monkeypatch.setattr(milestone, "plot", lambda dirs, names, out, *rest: drawn.append(out))
    monkeypatch.setattr(milestone, "run_sweep",
                        lambda command, trials, storage, runs_dir, **kw: swept.append(
                            [runs_dir / t.name for t in trials]) or 0)
    d = milestone.run_dir("moving_dot", 0, tmp_path)
    (d / "tb").mkdir(parents=True)
    (d / "settings.json").write_text('{"million_timesteps": 0.001}')
    milestone.main(["moving_dot", "--seeds", "0", "--runs_dir", str(tmp_path),
                    "--out", str(tmp_path / "md.png")])
    milestone.main(["moving_dot", "--seeds", "0", "--runs_dir", str(tmp_path), "--report_only"])
    assert drawn == [str(tmp_path / "md.png"), str(tmp_path / "moving_dot.png")]
    assert swept == [[d]]  # the seed's run goes through the sweep, in its own directory


def test_the_supervising_process_wires_a_preference_run_without_importing_torch(tmp_path):
    """Its settings, channels, counters and shared weights come from torch-free modules; torch
    is imported in the children that compute (its memory is wasted on a process that only waits)."""
    script = f"""
import multiprocessing as mp, sys
from launch import cli, configs
from launch.session import Session
from launch.loop import Channels
from launch.supervisor import Supervisor
run = cli.parse_args(["train_policy_with_preferences", "PongNoFrameskip-v4",
    "--synthetic_prefs", "--dropout", "0.5", "--batchnorm", "--log_dir", {str(tmp_path / 'r')!r}])
ctx = mp.get_context("spawn")
from a2c.config import A2CStats
from pref_interface.labelling import LabellingStats
from reward_predictor.config import TrainerStats
from reward_predictor.pace import labels_per_member
from reward_predictor.shared import SharedWeights
sup = Supervisor(ctx)
ch = Channels.for_run(ctx, Session(run, ctx), sup.stop_event, SharedWeights(ctx))
configs.a2c_config(run), configs.trainer_config(run, None), configs.labelling_config(run)
A2CStats(ctx), TrainerStats.create(ctx), LabellingStats.create(ctx), ch.a2c_observers(run.settings.env_id)
labels_per_member(0.1, "ensemble", 3)
print("torch" in sys.modules)
"""
    r = run("-c", script)
    assert r.return_code == 0, r.stderr
    assert r.stdout.strip() == "False"


def test_a_bad_predictor_checkpoint_is_a_one_line_error_from_the_preflight_check(tmp_path):
    bad = tmp_path / "reward_predictor.pt"
    bad.write_bytes(b"not a checkpoint")
    r = run("run.py", "train_policy_with_preferences", "MovingDotNoFrameskip-v0",
            "--synthetic_prefs", "--load_reward_predictor_ckpt_dir", str(bad),
            "--log_dir", str(tmp_path / "r"))
    assert r.return_code == 2
    assert "\n" not in r.stderr and "reward predictor checkpoint" in r.stderr, r.stderr
    assert not (tmp_path / "r").exists()


def test_an_environments_settings_apply_unless_a_flag_is_given(tmp_path):
    from launch import cli

    def parsed(*argv: str):
        return cli.parse_args([*argv, "--log_dir", str(tmp_path / "never")]).settings

    dot = parsed("train_policy_with_preferences", "MovingDotNoFrameskip-v0", "--ent_coef", "0.02")
    assert dot.n_initial_epochs == 20 and dot.million_timesteps == 0.3 and dot.ent_coef == 0.02
    assert dot.n_initial_prefs == 500  # not set for MovingDot: the paper's applies
    pong = parsed("train_policy_with_preferences", "PongNoFrameskip-v4", "--no_batchnorm")
    assert pong.dropout == 0.5 and pong.min_predictor_labels_per_step == 0.1
    assert not pong.batchnorm
    # Pong's rate decays to 0 at its run's end: at the end of a longer run too, unless given
    longer = cli.parse_args(["train_policy_with_preferences", "PongNoFrameskip-v4",
                             "--million_timesteps", "10", "--log_dir", str(tmp_path / "never")])
    assert longer.settings.lr_zero_million_timesteps == 10 and not longer.idle_flags
    cut = cli.parse_args(["train_policy_with_preferences", "PongNoFrameskip-v4",
                          "--million_timesteps", "10", "--lr_zero_million_timesteps", "6",
                          "--log_dir", str(tmp_path / "never")])
    assert cut.idle_flags == ["A2C's learning rate reaches 0 at 6M agent steps "
                              "(--lr_zero_million_timesteps), before the run's end at 10M: the "
                              "policy learns nothing after it"]
    other = parsed("train_policy_with_preferences", "BreakoutNoFrameskip-v4")
    assert other.n_initial_prefs == 500 and other.label_schedule == "none"  # the flags' defaults
    assert other.dropout == 0.5 and other.batchnorm  # and App. A.2's predictor, as every game's
    assert not parsed("train_policy_with_preferences", "BreakoutNoFrameskip-v4", "--dropout",
                      "0").dropout


def test_the_pace_has_a_ceiling_never_below_its_floor(tmp_path):
    """MovingDot's predictor has a ceiling; a floor given above it raises it (A2C and the trainer
    would otherwise wait for each other); Pong's has none."""
    from launch import cli
    from reward_predictor.pace import ceiling_of_pace

    def parsed(*argv: str):
        return cli.parse_args([*argv, "--log_dir", str(tmp_path / "never")]).settings

    dot = parsed("train_policy_with_preferences", "MovingDotNoFrameskip-v0")
    assert ceiling_of_pace(dot) == dot.max_predictor_labels_per_step > 0
    dot = parsed("train_policy_with_preferences", "MovingDotNoFrameskip-v0",
                 "--min_predictor_labels_per_step", "0.5")
    assert ceiling_of_pace(dot) == 0.5
    assert ceiling_of_pace(parsed("train_policy_with_preferences", "PongNoFrameskip-v4")) == 0.0


def test_the_status_line_shows_a_dash_before_the_first_episode_ends():
    from types import SimpleNamespace

    from launch.supervisor import a2c_status

    def value(v):
        return SimpleNamespace(value=v)

    # A resumed run before A2C has loaded its checkpoint: no rate, and no episode count yet.
    stats = SimpleNamespace(timesteps=value(1200), steps_per_sec=value(0.0), episodes=value(0),
                            recent_return=value(float("nan")), dead_since=value(-1),
                            revivals=value(0))
    assert a2c_status(stats) == "steps 1.2k | -/s | ep - | return -"
    stats.steps_per_sec = value(300.0)
    assert a2c_status(stats) == "steps 1.2k | 300/s | ep 0 | return -"
    stats.recent_return = value(-20.5)
    assert a2c_status(stats).endswith("return -20.5")
    stats.dead_since = value(3_920_000)  # a checkpoint found a layer with no unit alive
    assert a2c_status(stats).endswith("return -20.5 | policy dead")
    stats.dead_since, stats.revivals = value(-1), value(1)  # put back to a live checkpoint
    assert a2c_status(stats).endswith("return -20.5 | revived 1×")


def test_help_shows_every_flags_default(capsys):
    """The parser that reads a command line has no defaults (a flag not given is left to the
    environment's settings or the saved run), so --help is answered by the one that has them."""
    from launch.cli import given_flags

    with pytest.raises(SystemExit) as stop:
        given_flags(["train_policy_with_preferences", "PongNoFrameskip-v4", "-h"])
    assert stop.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "RMSProp learning rate (default: 0.0007)" in out
    assert "parallel environments (default: 16)" in out
    # a boolean's default once, on its flag: not read as the default of its off switch
    assert "(App. A) (default: True) --no_adaptive_l2 train the predictor without L2 " \
        "regularisation --implied_pairs" in out
    assert "(default: None)" not in out  # the mode, the env, a setting left unset


@pytest.mark.parametrize("flag, hint", [("--synthetic-prefs", "--synthetic_prefs"),
                                        ("--lr_zero", "--lr_zero_million_timesteps"),
                                        ("--n_env", "--n_envs"),
                                        ("--n_initial", "--n_initial_epochs, --n_initial_prefs")])
def test_a_misspelt_flag_names_the_nearest_one(flag, hint):
    from launch.cli import UsageError, given_flags

    with pytest.raises(UsageError, match=f"unrecognized arguments: {flag} \\(did you mean {hint}\\?\\)"):
        given_flags(["train_policy_with_preferences", "MovingDot-v0", flag])


def test_each_setting_keeps_its_own_check_and_the_defaults_pass_them():
    from dataclasses import replace

    from launch.settings import DEFAULTS, invalid_setting

    assert invalid_setting(DEFAULTS) is None
    assert invalid_setting(replace(DEFAULTS, oversampling=0)) == \
        "--oversampling must be at least 1, got 0"
    assert invalid_setting(replace(DEFAULTS, dropout=1.0)) == "--dropout must be in [0, 1), got 1.0"
    assert invalid_setting(replace(DEFAULTS, lr_zero_million_timesteps=None)) is None  # unset
    assert invalid_setting(replace(DEFAULTS, lr_zero_million_timesteps=0.0)).startswith(
        "--lr_zero_million_timesteps must be positive")
    sage = invalid_setting(replace(DEFAULTS, teacher="sage"))
    assert "--teacher is not a teacher" in sage and sage.count("'sage'") == 1, sage


def test_a_renamed_setting_keeps_its_old_flag_and_older_runs_settings(tmp_path):
    """--max_clips was --max_segs: the old flag still parses (hidden from --help), and a run
    saved under the old name resumes with its value."""
    import json

    from launch.cli import load_settings, parse_args
    from launch.settings import DEFAULTS, build_parser

    run = parse_args(["train_policy_with_preferences", "MovingDot-v0", "--max_segs", "77"])
    assert run.settings.max_clips == 77
    assert "--max_segs" not in build_parser().format_help()
    saved = {**DEFAULTS.to_json(), "mode": "train_policy_with_preferences",
             "env_id": "MovingDot-v0", "max_segs": 123}
    del saved["max_clips"]
    (tmp_path / "settings.json").write_text(json.dumps(saved))
    assert load_settings(tmp_path).max_clips == 123


def test_resuming_a_directory_whose_settings_name_no_run_is_one_line(tmp_path):
    from launch.cli import UsageError, parse_args

    (tmp_path / "settings.json").write_text("{}")
    with pytest.raises(UsageError, match="names no mode or env id"):
        parse_args(["--resume", str(tmp_path)])


def test_a_milestone_with_no_runs_to_report_or_a_negative_seed_is_one_line(tmp_path, capsys):
    from experiments import milestone

    assert milestone.main(["moving_dot", "--report_only", "--runs_dir", str(tmp_path)]) == 1
    out, err = capsys.readouterr()
    assert out == ""  # no table head with nothing under it
    assert err.startswith("python -m experiments.milestone: no run of moving_dot"), err
    assert err.count("\n") == 1, err
    with pytest.raises(SystemExit) as stop:
        milestone.main(["moving_dot", "--report_only", "--seeds", "-1"])
    assert stop.value.code == 2 and "--seeds must be 0 or more" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stop:  # a flag for running, where nothing runs
        milestone.main(["moving_dot", "--report_only", "--extra", "--lr 1e-3", "--cpus_per_trial",
                        "1"])
    assert stop.value.code == 2 and ("--report_only runs nothing: --extra, --cpus_per_trial would "
                                     "be ignored") in capsys.readouterr().err


def test_ctrl_c_while_a_policy_plays_ends_in_one_line_with_status_130(tmp_path):
    """run_checkpoint.py (with or without --watch): the episodes played so far keep their lines,
    and the stop is a line, not a traceback."""
    from a2c.checkpoint import save_policy_weights
    from a2c.policies import make_policy

    save_policy_weights(tmp_path / "dot.pt", {"policy": make_policy("moving_dot", 5).state_dict(),
                                              "timesteps": 8, "env_id": "MovingDotNoFrameskip-v0"})
    proc = subprocess.Popen([sys.executable, "-u", "run_checkpoint.py", "MovingDotNoFrameskip-v0",
                             str(tmp_path / "dot.pt"), "--episodes", "100000"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        while "episode 1:" not in proc.stdout.readline():
            assert proc.poll() is None, proc.stderr.read()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130 and err.strip() == "stopped by Ctrl-C", err


def test_every_scripts_parser_takes_no_shortened_flag_and_errs_in_one_line(capsys):
    from runtime.script_args import ScriptParser

    p = ScriptParser(prog="some_script.py")
    p.add_argument("--seeds", type=int, nargs="+")
    for bad in (["--seed", "1"], ["--seeds", "x"]):
        with pytest.raises(SystemExit) as e:
            p.parse_args(bad)
        err = capsys.readouterr().err
        assert e.value.code == 2 and err.count("\n") == 1, err
        assert err.startswith("some_script.py: error: ")


def test_a_list_flag_given_twice_takes_both_lists():
    """`--seeds 0 1 --seeds 2` runs three seeds (argparse alone keeps the last list); once given,
    a flag's list replaces its default rather than adding to it."""
    from runtime.script_args import ScriptParser

    p = ScriptParser(prog="some_script.py")
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument_group("sweep").add_argument("--grid", nargs="*", default=[])
    assert p.parse_args([]).seeds == [0]
    assert p.parse_args(["--seeds", "3"]).seeds == [3]
    a = p.parse_args(["--seeds", "0", "1", "--seeds", "2", "--grid", "lr=1,2", "--grid", "x=3"])
    assert a.seeds == [0, 1, 2] and a.grid == ["lr=1,2", "x=3"]
    assert p.parse_args([]).seeds == [0]  # the default itself is never extended


def test_an_output_that_cannot_be_written_is_refused_before_the_work(tmp_path):
    """A figure, video or table that could not be kept is a one-line error up front, not a
    traceback after the episodes are played; a folder that takes it is left as it was."""
    from runtime.outputs import prepare_output

    with pytest.raises(ValueError, match=r"^--video: cannot write into /proc \("):
        prepare_output("/proc/x.gif", "--video")
    assert prepare_output(tmp_path / "new" / "x.gif", "--video") == tmp_path / "new" / "x.gif"
    assert list((tmp_path / "new").iterdir()) == []


def test_a_run_file_is_written_whole_or_not_at_all(tmp_path, monkeypatch):
    """settings.json, pretraining.json, a wrapped agent's progress and sweep.json go through one
    writer: a write stopped before its rename leaves the file as it was (it is never written in
    place), and no temporary file beside it."""
    import json
    import os

    from runtime.outputs import write_json

    path = tmp_path / "settings.json"
    write_json(path, {"seed": 1})

    def stopped(*_args):
        raise OSError("stopped before the rename")

    with monkeypatch.context() as m:
        m.setattr(os, "replace", stopped)
        with pytest.raises(OSError):
            write_json(path, {"seed": 3})
    assert json.loads(path.read_text()) == {"seed": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["settings.json"]
    write_json(path, {"seed": 2})
    assert json.loads(path.read_text()) == {"seed": 2}
    assert [p.name for p in tmp_path.iterdir()] == ["settings.json"]
