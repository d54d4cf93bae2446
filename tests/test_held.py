"""experiments.held: a Pong run's milestone conditions, each measured and judged."""
import json
import shutil
from pathlib import Path

import pytest
import torch

from experiments import held
from experiments.milestones import MILESTONES, Milestone
from tests.test_reproduction import fake_run

ROOT = Path(__file__).resolve().parent.parent
PONG = MILESTONES["pong_prefs"]


def pong_run(d: Path, returns, monkeypatch, labels=100) -> Path:
    """A fake Pong run from preferences: an episode every 100k agent steps, `labels` more labels
    with each."""
    fake_run(d, 3, returns, starts=1, monkeypatch=monkeypatch, labels=labels)
    (d / "settings.json").write_text(json.dumps({"seed": 3, "mode": PONG.mode,
                                                 "env_id": PONG.env_id}))
    return d


def test_reached_within_the_budget_and_held_through_the_episodes_after(tmp_path, monkeypatch):
    m = Milestone(PONG.env_id, PONG.mode, [], 19.0, 2, "", (6e5, 450))

    def judged(name, returns, labels=100):
        reached, found = held.training_conditions(pong_run(tmp_path / name, returns, monkeypatch,
                                                           labels), m)
        return reached, [(c.measured, c.met) for c in found]

    assert judged("a", [-21, 19, 20, 18, 19]) == (True, [
        ("at 0.30M, 300 labels", True), ("+18.5 over 2 episodes, to 0.50M", True)])
    # touched, then lost: the episodes after it average 16, below 19 - 2
    assert judged("b", [-21, 19, 20, 17, 15])[1][1] == ("+16.0 over 2 episodes, to 0.50M", False)
    # reached, but with more labels than the budget allows
    assert judged("c", [-21, 19, 20], labels=200) == (True, [
        ("at 0.30M, 600 labels", False), ("no episode after", False)])
    assert judged("d", [-21, -20]) == (False, [("not yet, at 0.20M steps", False)])
    # no count of labels yet where it was reached: not within the budget
    assert judged("e", [19, 20, 19], labels=None)[1][0] == ("at 0.20M, labels unknown", False)


def test_the_episodes_after_the_level_are_counted_as_they_are_averaged(tmp_path):
    # Episodes that end in the same second share one agent step in TensorBoard: those after the
    # one that reached the level count even at its step.
    from runtime.scalars import ScalarWriter

    run = tmp_path / "run"
    (run / "tb").mkdir(parents=True)
    (run / "settings.json").write_text(json.dumps({"mode": PONG.mode, "env_id": PONG.env_id}))
    writer = ScalarWriter(str(run / "tb"))
    for step, ret in [(100, -21.0), (200, 19.0), (200, 20.0), (200, 18.0), (300, 16.0)]:
        writer.add_scalar("charts/episodic_return", ret, step)
    writer.close()
    m = Milestone(PONG.env_id, PONG.mode, [], 19.0, 2, "", (6e6, None))
    _, (_, after) = held.training_conditions(run, m)
    assert after.measured == "+17.0 over 2 episodes, to 0.00M"


def test_the_final_policy_is_judged_on_greedy_and_sampled_play(tmp_path):
    # A policy that reached +19 against a fresh one, over the first 300 steps of one episode
    # each (cut, counted as they stand), against a level of 0: greedy at least 0, sampled -2.
    from a2c.checkpoint import save_policy_weights
    from a2c.policies import make_policy

    m = Milestone(PONG.env_id, PONG.mode, [], 0.0, 10, "", (6e6, 3300))
    torch.manual_seed(0)
    good, fresh = tmp_path / "good", tmp_path / "fresh"
    (good / "policy").mkdir(parents=True)
    shutil.copy(ROOT / "models" / "pong_prefs_seed2.pt", good / "policy" / "policy-000006000000.pt")
    (fresh / "policy").mkdir(parents=True)
    save_policy_weights(fresh / "policy" / "policy-000000000000.pt",
                        {"policy": make_policy("atari", 6).state_dict(), "timesteps": 0})
    assert [c.met for c in held.policy_conditions(good, m, 1, 300)] == [True, True]
    judged = list(held.policy_conditions(fresh, m, 1, 300))
    assert not judged[0].met and judged[0].name == "final policy (0.00M), greedy"
    assert "1 cut at 300 steps" in judged[0].measured


def test_a_run_with_a_dead_checkpoint_is_not_held(tmp_path, monkeypatch, capsys):
    from a2c.checkpoint import save_policy_weights
    from a2c.policies import make_policy

    run = pong_run(tmp_path / "run", [-21, 19, 20, 19, 20], monkeypatch)
    (run / "policy").mkdir()
    shutil.copy(ROOT / "models" / "pong_prefs_seed2.pt", run / "policy" / "policy-000000500000.pt")
    dead = make_policy("atari", 6)
    with torch.no_grad():
        dead.torso[0].bias.fill_(-1e3)
    save_policy_weights(run / "policy" / "policy-000000400000.pt",
                        {"policy": dead.state_dict(), "timesteps": 400_000})
    assert held.main([str(run), "--episodes", "1", "--max_steps", "50"]) == 1
    out = capsys.readouterr().out
    assert "| policy network alive | at every kept checkpoint | 1 of 2 alive; dead at 0.40M | NO |" in out
    assert out.rstrip().splitlines()[-1].startswith("not held: ")
    assert "policy network alive" in out.rstrip().splitlines()[-1]


@pytest.mark.parametrize("settings, words", [
    ({"mode": "train_policy_with_preferences", "env_id": "MovingDotNoFrameskip-v0"},
     "a held level is defined only for the milestones pong_prefs, pong_true"),
    (None, "is not a run directory"),
    ("{half-written", "settings.json is damaged"),
])
def test_a_run_without_a_held_level_is_refused_in_one_line(tmp_path, capsys, settings, words):
    if settings is not None:
        (tmp_path / "settings.json").write_text(
            settings if isinstance(settings, str) else json.dumps(settings))
    assert held.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("python -m experiments.held: error: ") and words in err and err.count("\n") == 1


def test_a_run_below_the_level_is_judged_without_playing_its_policy(tmp_path, monkeypatch, capsys):
    run = pong_run(tmp_path / "run", [-21, -20], monkeypatch)
    (run / "policy").mkdir()
    shutil.copy(ROOT / "models" / "pong_prefs_seed2.pt", run / "policy" / "policy-000000200000.pt")
    assert held.main([str(run)]) == 1
    out = capsys.readouterr().out
    assert "| final policy" not in out and "| 1 of 1 alive | yes |" in out
    assert "(so far: the newest checkpoint is at 0.20M of the milestone's 6M agent steps)" in out
    assert out.rstrip().endswith("not held: reached +19 (mean of 10)")


def test_the_pong_milestones_report_judges_each_seed(tmp_path, monkeypatch, capsys):
    from experiments import milestone

    monkeypatch.setattr(milestone, "plot", lambda *args: None)
    run = pong_run(milestone.run_dir("pong_prefs", 4, tmp_path), [-21, -20], monkeypatch)
    (run / "policy").mkdir()
    shutil.copy(ROOT / "models" / "pong_prefs_seed2.pt", run / "policy" / "policy-000000200000.pt")
    milestone.report(PONG, "pong_prefs", [4], tmp_path)
    out = capsys.readouterr().out
    assert "pong_prefs-seed4: PongNoFrameskip-v4, milestone pong_prefs" in out
    assert out.rstrip().endswith("not held: reached +19 (mean of 10)")


def test_the_milestones_report_refuses_a_missing_folder_or_a_bad_figure_in_one_line(tmp_path,
                                                                                  capsys):
    from experiments import milestone

    for args, words in ((["--runs_dir", str(tmp_path / "missing")], "is not a folder of runs"),
                        (["--runs_dir", str(tmp_path), "--out", str(tmp_path / "f.txt")],
                         "is not a .png, .svg or .pdf file")):
        with pytest.raises(SystemExit) as e:
            milestone.main(["moving_dot", "--report_only", *args])
        err = capsys.readouterr().err
        assert e.value.code == 2 and words in err, err
