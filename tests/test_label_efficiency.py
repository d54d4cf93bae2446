"""experiments.label_efficiency's bookkeeping: the first N labels, scores kept and reused."""
import json

from experiments import label_efficiency
from launch.rundir import PREDICTOR_FILE, PREFS_FILE
from pref_interface.clip import Preference
from pref_interface.store import PreferenceStore
from tests.test_sorting import make_clip


def test_each_size_is_trained_on_the_first_labels_scored_once_and_plotted(tmp_path, monkeypatch):
    with PreferenceStore(tmp_path / "pairs-gather" / PREFS_FILE) as store:
        ids = [store.add(Preference(make_clip(2 * k, 0.0), make_clip(2 * k + 1, 1.0), 0.0))
               for k in range(5)]
    commands, scored = [], []

    def fake_run_py(*args):  # pretraining: leave a predictor where run.py would
        commands.append(args)
        log_dir = args[args.index("--log_dir") + 1]
        (tmp_path / log_dir / "reward_predictor").mkdir(parents=True)
        (tmp_path / log_dir / "reward_predictor" / PREDICTOR_FILE).write_bytes(b"")

    def fake_agreement(run_dir, steps, n_envs, seed):
        scored.append(run_dir.name)
        return {"clip_agreement": 0.5 + len(scored) / 10, "clip_correlation": 0.1}

    monkeypatch.setattr(label_efficiency, "run_py", fake_run_py)
    monkeypatch.setattr(label_efficiency, "agreement", fake_agreement)
    argv = ["PongNoFrameskip-v4", "--queries", "pairs", "--labels", "2", "4",
            "--runs_dir", str(tmp_path), "--plot", str(tmp_path / "plot.png")]
    assert label_efficiency.main(argv) == 0
    assert [c[0] for c in commands] == ["pretrain_reward_predictor"] * 2  # the store was full
    with PreferenceStore(tmp_path / "pairs-2-labels" / PREFS_FILE, create=False) as store:
        assert store.all_ids() == ids[:2]
    rows = json.loads((tmp_path / "results.json").read_text())
    assert [(r["labels"], r["clip_agreement"]) for r in rows] == [(2, 0.6), (4, 0.7)]
    assert (tmp_path / "plot.png").stat().st_size > 0
    assert label_efficiency.main(argv) == 0  # kept scores are reused, nothing runs again
    assert len(commands) == 2 and scored == ["pairs-2-predictor", "pairs-4-predictor"]
    assert label_efficiency.main(argv + ["--probe_steps", "50"]) == 0  # another probe: scored anew
    assert len(scored) == 4 and len(commands) == 2
