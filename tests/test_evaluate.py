"""The evaluator: trained above untrained, every checkpoint of a run against its agent steps,
videos that show the game, one-line errors."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
TRAINED_PONG = ROOT / "models" / "pong_prefs_run8.pt"


def evaluate(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "experiments.evaluate", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=600)


def _untrained(path: Path, kind: str, n_actions: int, timesteps: int = 0) -> Path:
    from a2c.policies import make_policy

    torch.manual_seed(timesteps)
    torch.save({"policy": make_policy(kind, n_actions).state_dict(), "timesteps": timesteps}, path)
    return path


def test_a_trained_pong_policy_scores_above_an_untrained_one_and_its_video_shows_the_game(
        tmp_path):
    untrained = _untrained(tmp_path / "untrained.pt", "atari", 6)
    out = tmp_path / "eval.json"
    r = evaluate(str(TRAINED_PONG), str(untrained), "--env", "PongNoFrameskip-v4",
                 "--episodes", "1", "--grid", "greedy:30", "--videos", "1", "--out", str(out))
    assert r.returncode == 0, r.stderr
    cells = {Path(c["policy"]).name: c for c in json.loads(out.read_text())}
    trained, random = cells["pong_prefs_run8.pt"], cells["untrained.pt"]
    assert trained["mean"] > random["mean"] + 10, (trained["returns"], random["returns"])
    assert trained["agent_steps"] == 5_600_000 and len(trained["returns"]) == 1
    assert "| models/pong_prefs_run8.pt | 5,600,000 | greedy | 30 | 1 |" in r.stdout.replace(
        str(ROOT) + "/", "")
    from PIL import Image

    gif = Image.open(tmp_path / "eval_videos" / "pong_prefs_run8-greedy-noop30-ep0.gif")
    # One frame a step (Pillow merges identical neighbours, a few of them in Pong).
    assert trained["lengths"][0] * 0.9 < gif.n_frames <= trained["lengths"][0]
    gif.seek(gif.n_frames // 2)
    frame = np.asarray(gif.convert("L"))
    assert frame.std() > 5  # the court, paddles and ball, not a blank picture

    # a later evaluation's GIFs go beside its own figures, leaving the earlier ones as they were
    r = evaluate(str(untrained), "--env", "PongNoFrameskip-v4", "--episodes", "1", "--grid",
                 "greedy:0", "--videos", "1", "--max_steps", "40", "--out",
                 str(tmp_path / "eval-1.json"))
    assert r.returncode == 0, r.stderr
    assert [p.name for p in (tmp_path / "eval-1_videos").iterdir()] == [
        "untrained-greedy-noop0-ep0.gif"]
    assert (tmp_path / "eval_videos" / "pong_prefs_run8-greedy-noop30-ep0.gif").is_file()


def test_every_checkpoint_of_a_run_is_scored_at_its_agent_steps_into_json_and_tensorboard(
        tmp_path):
    from experiments.runlog import scalars

    run = tmp_path / "run"
    (run / "policy").mkdir(parents=True)
    (run / "settings.json").write_text(json.dumps({"env_id": "MovingDotNoFrameskip-v0"}))
    for steps in (1000, 2000):
        _untrained(run / "policy" / f"policy-{steps:012d}.pt", "moving_dot", 5, steps)
    # (no-op starts are Atari's: on MovingDot greedy:30 is greedy:0, one cell)
    r = evaluate(str(run), "--all_checkpoints", "--episodes", "3", "--grid", "sampled:0",
                 "greedy:30", "greedy:0")
    assert r.returncode == 0, r.stderr
    cells = json.loads((run / "eval.json").read_text())
    assert [(c["agent_steps"], c["actions"]) for c in cells] == [
        (1000, "sampled"), (1000, "greedy"), (2000, "sampled"), (2000, "greedy")]
    assert all(c["lengths"] == [250] * 3 for c in cells)  # MovingDot: 250 agent steps
    points = scalars(run / "tb" / "eval", "eval/greedy_noop0/mean_return")
    assert points[:, 1].tolist() == [1000, 2000]
    assert "level with a car" not in r.stdout  # Enduro's column, on Enduro only
    # Evaluated again: the earlier figures stay, the new ones go beside them.
    r = evaluate(str(run), "--episodes", "1", "--grid", "greedy:0")
    assert r.returncode == 0 and f"wrote {run / 'eval-1.json'}" in r.stdout, r.stdout + r.stderr
    assert json.loads((run / "eval.json").read_text()) == cells
    # --best_and_final names which is which
    from runtime.scalars import ScalarWriter

    writer = ScalarWriter(str(run / "tb"))
    for steps, ret in ((1100, 5.0), (1500, 1.0), (2500, 1.0)):
        writer.add_scalar("charts/episodic_return", ret, steps)
    writer.close()
    r = evaluate(str(run), "--best_and_final", "--best_window", "1", "--episodes", "1",
                 "--grid", "greedy:0")
    assert r.returncode == 0, r.stderr
    assert "policy-000000001000.pt (best) |" in r.stdout, r.stdout
    assert "policy-000000002000.pt (final) |" in r.stdout, r.stdout


def test_best_and_final_are_the_newest_checkpoint_and_the_one_behind_the_best_episodes(tmp_path):
    from experiments.evaluate import find_policies
    from runtime.scalars import ScalarWriter

    run = tmp_path / "run"
    (run / "policy").mkdir(parents=True)
    (run / "settings.json").write_text(json.dumps({"env_id": "MovingDotNoFrameskip-v0"}))
    for steps in (1000, 2000, 3000, 4000):
        (run / "policy" / f"policy-{steps:012d}.pt").write_bytes(b"")
    a2c = ScalarWriter(str(run / "tb"))
    for steps, ret in ((900, 1.0), (1500, 5.0), (2100, 9.0), (2500, 9.0), (3500, 2.0),
                       (4100, 3.0)):
        a2c.add_scalar("charts/episodic_return", ret, steps)
    a2c.close()
    files, env_id, _ = find_policies(run, False, best_window=2)
    assert [f.name for f in files] == ["policy-000000002000.pt", "policy-000000004000.pt"]
    assert env_id == "MovingDotNoFrameskip-v0"
    files, _, _ = find_policies(run, False, best_window=1)  # 2100: the first of the two 9s
    assert [f.name for f in files] == ["policy-000000002000.pt", "policy-000000004000.pt"]
    with pytest.raises(ValueError, match="fewer than 7 episodes"):
        find_policies(run, False, best_window=7)
    with pytest.raises(ValueError, match="needs a run directory"):
        find_policies(run / "policy", False, best_window=2)



def test_a_run_through_examples_ppo_is_played_from_the_weights_it_saved(tmp_path):
    from experiments.evaluate import find_policies
    from launch.rundir import PPO_POLICY_FILE

    run = tmp_path / "run"
    run.mkdir()
    (run / "settings.json").write_text(json.dumps({"env_id": "EnduroNoFrameskip-v4"}))
    with pytest.raises(ValueError, match="no policy checkpoint"):
        find_policies(run, False)
    (run / PPO_POLICY_FILE).write_bytes(b"")
    assert find_policies(run, False) == ([run / PPO_POLICY_FILE], "EnduroNoFrameskip-v4", run)
    for flags in ((True, None), (False, 10)):  # no checkpoints to choose among
        with pytest.raises(ValueError, match="one saved policy .*leave out --all_checkpoints"):
            find_policies(run, *flags)

def test_on_enduro_each_cell_measures_the_share_of_steps_level_with_a_car(tmp_path):
    from a2c.policies import make_policy
    from experiments.evaluate import Cell, play
    from pref_interface.labellers.alongside import alongside_share

    torch.manual_seed(0)
    weights = make_policy("atari", 9).state_dict()
    played = play("EnduroNoFrameskip-v4", weights, 2, False, 0, seed=3, max_steps=600, record=2)
    share = played.alongside
    assert played.cut == 2 and played.lengths == [600, 600]
    # the same frames judged one by one (the recorded ones are those the policy acted on)
    assert share == pytest.approx(np.mean([alongside_share(np.array(f)) for f in played.frames]))
    assert 0.0 < share < 1.0
    row = Cell("p", 0, "sampled", 0, played.returns, played.lengths, played.cut, share).row()
    assert row.endswith(f"| {share:.1%} |")
    assert row.startswith("| p | 0 | sampled |")
    assert play("MovingDotNoFrameskip-v0", make_policy("moving_dot", 5).state_dict(), 1, True, 0,
                seed=0, max_steps=10).alongside is None


def test_sampled_play_is_the_same_on_every_evaluation_with_one_seed():
    from a2c.policies import make_policy
    from experiments.evaluate import play

    weights = make_policy("moving_dot", 5).state_dict()

    def taken(seed: int, callers_seed: int) -> dict:
        torch.manual_seed(callers_seed)  # whatever the caller's RNG, the evaluation's seed decides
        return play("MovingDotNoFrameskip-v0", weights, 2, False, 0, seed, 50).action_shares

    assert taken(0, 1) == taken(0, 2) != taken(1, 1)
    torch.manual_seed(3)
    before = torch.get_rng_state()
    taken(0, 3)
    assert torch.equal(torch.get_rng_state(), before)  # the caller's generator is left as it was


def test_each_cell_names_the_action_its_policy_takes_least():
    from a2c.policies import make_policy
    from experiments.evaluate import Cell, play

    torch.manual_seed(0)
    policy = make_policy("moving_dot", 5)
    with torch.no_grad():  # a policy that has all but lost "left" (action 4)
        policy.policy.bias[4] = -8.0
    played = play("MovingDotNoFrameskip-v0", policy.state_dict(), 4, False, 0, seed=0,
                  max_steps=200)
    shares = played.action_shares
    assert list(shares) == ["noop", "down", "right", "up", "left"]
    assert sum(shares.values()) == pytest.approx(1.0)
    assert shares["left"] < 0.01 and min(shares["noop"], shares["up"]) > 0.1
    row = Cell("p", 0, "sampled", 0, played.returns, played.lengths, played.cut, None,
               shares).row()
    assert f"| left {shares['left']:.1%} | - |" in row


@pytest.mark.parametrize("args, message", [
    (["{tmp}/damaged.pt", "--env", "PongNoFrameskip-v4"], "cannot read policy checkpoint"),
    (["{tmp}/dot.pt", "--env", "PongNoFrameskip-v4"], "does not fit this environment"),
    (["{tmp}/dot.pt"], "give --env"),
    (["{tmp}/dot.pt", "--env", "MovingDotNoFrameskip-v0", "--grid", "best:3"], "ACTIONS:NOOPS"),
    (["{tmp}/nothing", "--env", "MovingDotNoFrameskip-v0"], "no policy checkpoint"),
    (["{tmp}/dot.pt", "--env", "MovingDotNoFrameskip-v0", "--seed", "-1"], "--seed must be in"),
])
def test_a_bad_policy_or_setting_is_one_line_with_status_2(args, message, tmp_path):
    (tmp_path / "damaged.pt").write_bytes(b"not a checkpoint")
    _untrained(tmp_path / "dot.pt", "moving_dot", 5)
    (tmp_path / "nothing").mkdir()
    r = evaluate(*[a.format(tmp=tmp_path) for a in args], "--episodes", "1",
                 "--out", str(tmp_path / "e.json"))
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], r.stderr
    assert lines[0].startswith("python -m experiments.evaluate: error:"), r.stderr
    assert not (tmp_path / "e.json").exists()


def _dot_run_with_predictor(d: Path) -> Path:
    """A MovingDot run directory as a run leaves it: settings, an (untrained) predictor and
    policy checkpoint."""
    from a2c.checkpoint import save_policy_weights
    from a2c.policies import make_policy
    from launch.cli import parse_args
    from launch.configs import trainer_config
    from launch.rundir import PREDICTOR_FILE, make_run_dir
    from reward_predictor.process import build_ensemble
    from reward_predictor.trainer import RewardPredictorTrainer

    run = parse_args(["train_policy_with_preferences", "MovingDotNoFrameskip-v0",
                      "--log_dir", str(d)])
    make_run_dir(run).release()
    torch.manual_seed(0)
    ensemble = build_ensemble(trainer_config(run, load_from=None, save=False))
    RewardPredictorTrainer(ensemble).save(str(d / "reward_predictor" / PREDICTOR_FILE))
    (d / "policy").mkdir()
    save_policy_weights(d / "policy" / "policy-000000000000.pt",
                        {"policy": make_policy("moving_dot", 5).state_dict(), "timesteps": 0})
    return d


def test_the_video_plots_the_predicted_reward_of_the_very_frame_beside_it(tmp_path):
    """Each step of the trace is the predictor's r̂ (every member's) for the observation the
    action was taken on, and the video frame of that step shows that observation."""
    sys.path.insert(0, str(ROOT))
    from run_checkpoint import load_predictor, play
    from runtime.reward_view import ZOOM

    run = _dot_run_with_predictor(tmp_path / "run")
    predictor = load_predictor(str(run), "MovingDotNoFrameskip-v0")
    seen, taken = [], []  # what r̂ was asked about, as the predictor got it

    class Recording:
        ensemble_size = predictor.ensemble_size

        def member_rewards(self, obs, actions):
            seen.append(obs.copy())
            taken.append(actions.copy())
            return predictor.member_rewards(obs, actions)

    weights = torch.load(run / "policy" / "policy-000000000000.pt")["policy"]
    returns, frames, traces = play("MovingDotNoFrameskip-v0", weights, 1, seed=3,
                                   record_first=True, predictor=Recording())
    obs = np.concatenate(seen)
    assert len(traces) == 1 and len(traces[0].members) == len(frames) == len(obs) == 250
    again = predictor.member_rewards(obs, np.concatenate(taken))
    np.testing.assert_allclose(np.array(traces[0].members), again.T, atol=1e-5)
    for t in (0, 100, 249):  # the game half of the frame is that step's observation, zoomed
        game = frames[t][:, :84 * ZOOM, 0]
        np.testing.assert_array_equal(game[::ZOOM, ::ZOOM], obs[t, -1])
    assert frames[100][:, 84 * ZOOM:].std() > 5  # the plot is drawn


def test_run_checkpoint_writes_the_side_by_side_video_and_refuses_another_envs_predictor(
        tmp_path):
    run = _dot_run_with_predictor(tmp_path / "run")
    gif = tmp_path / "dot.gif"
    r = subprocess.run([sys.executable, "run_checkpoint.py", "MovingDotNoFrameskip-v0",
                        str(run / "policy"), "--episodes", "1", "--reward_predictor", str(run),
                        "--video", str(gif)], cwd=ROOT, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert "r̂ summed" in r.stdout and "correlation with the game's reward" in r.stdout
    from PIL import Image

    assert Image.open(gif).size == (84 * 3 + 336, 84 * 3)
    r = subprocess.run([sys.executable, "run_checkpoint.py", "PongNoFrameskip-v4",
                        str(TRAINED_PONG), "--reward_predictor", str(run)], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "trained on MovingDotNoFrameskip-v0, not PongNoFrameskip-v4" in r.stderr


def test_watching_in_the_terminal_draws_the_game_and_rhat_as_bars_under_it():
    import io

    from pref_interface.labellers.watch import BARS, Watcher, sparkline
    from runtime.reward_view import RewardTrace

    assert sparkline(np.array([-1.0, 0.0, 1.0]), 1.0) == BARS[0] + BARS[4] + BARS[-1]
    out = io.StringIO()
    watcher = Watcher("terminal", fps=1000, out=out)
    trace = RewardTrace(3)
    frame = np.zeros((84, 84), np.uint8)
    frame[40:44, 40:44] = 255
    for t, (r, g) in enumerate([(-0.1, 0.0), (0.0, -1.0), (0.1, 1.0)]):
        trace.add(np.array([r, r, r]), g)
        watcher.show(frame, trace, f"step {t + 1}")
    watcher.close()
    text = out.getvalue()
    assert "▀" in text  # the game, in half-blocks
    assert "r̂    " + BARS[0] + BARS[4] + BARS[-1] in text
    assert "game  -+" in text and "step 3" in text


def test_run_checkpoint_plays_the_same_sampled_episode_again_with_the_same_seed():
    sys.path.insert(0, str(ROOT))
    from a2c.policies import make_policy
    from run_checkpoint import play

    weights = make_policy("moving_dot", 5).state_dict()  # near-uniform: every step a draw
    first, again, other = (play("MovingDotNoFrameskip-v0", weights, 1, seed=seed,
                                max_steps=60, record_first=True)[1] for seed in (4, 4, 5))
    assert all((a == b).all() for a, b in zip(first, again)) and len(first) == len(again)
    assert any((a != b).any() for a, b in zip(first, other))
