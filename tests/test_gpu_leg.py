"""A long run's leg on a lent GPU machine and back (experiments.gpu_leg), played here on the CPU:
packed without its history, resumed elsewhere and stopped with SIGTERM, sent back in parts within
the device's limits, unpacked into the run directory, and resumed here again."""
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from experiments import gpu_leg
from pref_interface.store import PreferenceStore

ROOT = Path(__file__).resolve().parent.parent
CPU = ["--device", "cpu", "--reward_predictor_device", "cpu", "--torch_threads", "1",
       "--env_threads", "1", "--reward_predictor_threads", "1"]  # in place of the GPU's


def labels(run_dir: Path) -> int:
    with PreferenceStore(run_dir / "prefs.sqlite", create=False) as store:
        return len(store)


def steps(checkpoint: Path) -> int:
    return torch.load(checkpoint, weights_only=True)["timesteps"]


@pytest.mark.slow  # 25-30 s; a maintainers' tool for the project's lent GPU (README, Tests)
def test_a_leg_elsewhere_comes_back_into_the_run_directory(tmp_path, capsys):
    run = tmp_path / "runs" / "dot"
    shutil.copytree(ROOT / "tests" / "fixtures" / "run_29d3a96", run)  # 4,000 steps, 21 labels
    settings = (run / "settings.json").read_text()
    n_labels, n_commands = labels(run), len((run / "command.txt").read_text().splitlines())

    here = tmp_path / "checkout"
    (here / ".gpu").mkdir(parents=True)
    (here / ".gpu" / "other_run.tar").write_bytes(b"an earlier leg's pack")
    assert gpu_leg.pack(run, None, 20, root=here) == 0
    assert "experiments.gpu_leg leg dot --seconds 20" in capsys.readouterr().out
    assert [p.name for p in (here / ".gpu").iterdir()] == ["dot.tar"]  # only this leg travels
    assert (here / ".gpu" / "dot.tar").stat().st_size < 4 * 2**20

    out = tmp_path / "out"
    # 12 s of a run set for 0.1M steps: stopped by SIGTERM, which saves everything
    assert gpu_leg.leg("dot", 12, out, [*CPU, "--million_timesteps", "0.1",
                                        "--policy_ckpt_interval", "10"],
                       root=here, work=tmp_path / "device") == 0
    parts = sorted(out.iterdir())
    assert parts and all(p.stat().st_size <= gpu_leg.PART_BYTES for p in parts)

    assert gpu_leg.unpack(run, out) == 0
    assert (run / "settings.json").read_text() == settings  # the next resume runs as before
    assert len((run / "command.txt").read_text().splitlines()) == n_commands + 1
    assert len((run / "machines.txt").read_text().splitlines()) == 1  # the leg's machine
    newest = sorted((run / "policy").glob("policy-*.pt"))[-1]
    assert steps(newest) > 4000 and labels(run) > n_labels
    # the leg's other checkpoints came back as weights alone (they play, they do not resume)
    leg_ckpts = [torch.load(p, weights_only=True) for p in (run / "policy").glob("policy-*.pt")
                 if 4000 < steps(p) < steps(newest)]
    assert leg_ckpts and all(set(c) == {"policy", "timesteps"} for c in leg_ckpts)
    assert "optimizer" in torch.load(newest, weights_only=True)
    assert list((run / "tb").glob("events.out.tfevents.*"))

    # resumed here from what came back: from the leg's newest checkpoint, with its labels
    after_leg = labels(run)
    r = subprocess.run([sys.executable, "run.py", "--resume", str(run), "--million_timesteps",
                        str((steps(newest) + 2000) / 1e6)],
                       cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr
    assert steps(sorted((run / "policy").glob("policy-*.pt"))[-1]) == steps(newest) + 2000
    assert labels(run) >= after_leg
    assert json.loads((run / "settings.json").read_text())["device"] == "cpu"


def test_unpack_without_parts_is_a_one_line_error(tmp_path, capsys):
    assert gpu_leg.unpack(tmp_path / "dot", tmp_path) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_the_legs_checkpoints_that_fit_are_evenly_spaced():
    ten = list(range(10))
    assert gpu_leg.evenly(ten, 20) == ten and gpu_leg.evenly(ten, 0) == []
    assert gpu_leg.evenly(ten, 1) == [9] and gpu_leg.evenly(ten, 2) == [0, 9]
    assert gpu_leg.evenly(ten, 4) == [0, 3, 6, 9]


def test_the_printed_leg_command_parses_with_run_py_flags_after_it(monkeypatch, tmp_path):
    seen = {}
    monkeypatch.setattr(gpu_leg, "leg", lambda *a: seen.setdefault("args", a) and 0)
    gpu_leg.main(["leg", "dot", "--seconds", "20", "--out", str(tmp_path), "--", *CPU])
    assert seen["args"] == ("dot", 20, tmp_path, CPU)


def fresh_copy(tmp_path: Path) -> Path:
    (tmp_path / "checkout").mkdir()
    run = tmp_path / "runs" / "dot"
    shutil.copytree(ROOT / "tests" / "fixtures" / "run_29d3a96", run)
    return run


@pytest.mark.slow  # about 20 s
def test_a_run_stopped_before_its_first_checkpoint_starts_on_the_device(tmp_path):
    run = fresh_copy(tmp_path)  # as if stopped while gathering its first labels: no store yet
    for gone in ("policy", "reward_predictor"):
        shutil.rmtree(run / gone)
    for store in run.glob("prefs.sqlite*"):
        store.unlink()
    here, out = tmp_path / "checkout", tmp_path / "out"
    assert gpu_leg.pack(run, None, 60, root=here) == 0
    assert gpu_leg.leg("dot", 60, out, CPU, root=here, work=tmp_path / "device") == 0
    assert gpu_leg.unpack(run, out) == 0
    # it gathered its first labels, pretrained and trained to its 4,000 steps there
    assert labels(run) >= 12
    assert steps(sorted((run / "policy").glob("policy-*.pt"))[-1]) == 4000
    assert (run / "reward_predictor").is_dir()


@pytest.mark.slow  # about 10 s
def test_a_leg_stops_early_when_what_it_sends_back_would_pass_the_limit(tmp_path, capsys):
    run = fresh_copy(tmp_path)
    here, out = tmp_path / "checkout", tmp_path / "out"
    assert gpu_leg.pack(run, None, 120, root=here) == 0
    started = time.time()
    assert gpu_leg.leg("dot", 120, out, [*CPU, "--million_timesteps", "1"], root=here,
                       work=tmp_path / "device", full_bytes=1) == 0
    assert time.time() - started < 60
    assert "stopping it early" in capsys.readouterr().out
    assert gpu_leg.unpack(run, out) == 0  # what it saved as it stopped came back
