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
                 "--episodes", "2", "--grid", "greedy:30", "--videos", "1", "--out", str(out))
    assert r.returncode == 0, r.stderr
    cells = {Path(c["policy"]).name: c for c in json.loads(out.read_text())}
    trained, random = cells["pong_prefs_run8.pt"], cells["untrained.pt"]
    assert trained["mean"] > random["mean"] + 10, (trained["returns"], random["returns"])
    assert trained["agent_steps"] == 5_600_000 and len(trained["returns"]) == 2
    assert "| models/pong_prefs_run8.pt | 5,600,000 | greedy | 30 | 2 |" in r.stdout.replace(
        str(ROOT) + "/", "")
    from PIL import Image

    gif = Image.open(tmp_path / "eval_videos" / "pong_prefs_run8-greedy-noop30-ep0.gif")
    # One frame a step (Pillow merges identical neighbours, a few of them in Pong).
    assert trained["lengths"][0] * 0.9 < gif.n_frames <= trained["lengths"][0]
    gif.seek(gif.n_frames // 2)
    frame = np.asarray(gif.convert("L"))
    assert frame.std() > 5  # the court, paddles and ball, not a blank picture


def test_every_checkpoint_of_a_run_is_scored_at_its_agent_steps_into_json_and_tensorboard(
        tmp_path):
    from experiments.runlog import scalars

    run = tmp_path / "run"
    (run / "policy").mkdir(parents=True)
    (run / "settings.json").write_text(json.dumps({"env_id": "MovingDotNoFrameskip-v0"}))
    for steps in (1000, 2000):
        _untrained(run / "policy" / f"policy-{steps:012d}.pt", "moving_dot", 5, steps)
    r = evaluate(str(run), "--all_checkpoints", "--episodes", "3", "--grid", "sampled:0",
                 "greedy:0")
    assert r.returncode == 0, r.stderr
    cells = json.loads((run / "eval.json").read_text())
    assert [(c["agent_steps"], c["actions"]) for c in cells] == [
        (1000, "sampled"), (1000, "greedy"), (2000, "sampled"), (2000, "greedy")]
    assert all(c["lengths"] == [250] * 3 for c in cells)  # MovingDot: 250 agent steps
    points = scalars(run / "tb" / "eval", "eval/greedy_noop0/mean_return")
    assert points[:, 1].tolist() == [1000, 2000]


@pytest.mark.parametrize("args, message", [
    (["{tmp}/damaged.pt", "--env", "PongNoFrameskip-v4"], "cannot read policy checkpoint"),
    (["{tmp}/dot.pt", "--env", "PongNoFrameskip-v4"], "does not fit the env"),
    (["{tmp}/dot.pt"], "give --env"),
    (["{tmp}/dot.pt", "--env", "MovingDotNoFrameskip-v0", "--grid", "best:3"], "ACTIONS:NOOPS"),
    (["{tmp}/nothing", "--env", "MovingDotNoFrameskip-v0"], "no policy checkpoint"),
])
def test_a_bad_policy_or_setting_is_one_line_with_status_2(args, message, tmp_path):
    (tmp_path / "damaged.pt").write_bytes(b"not a checkpoint")
    _untrained(tmp_path / "dot.pt", "moving_dot", 5)
    (tmp_path / "nothing").mkdir()
    r = evaluate(*[a.format(tmp=tmp_path) for a in args], "--episodes", "1",
                 "--out", str(tmp_path / "e.json"))
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("evaluate: error:") and message in lines[0], (
        r.stderr)
    assert not (tmp_path / "e.json").exists()
