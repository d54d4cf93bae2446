"""experiments.label_efficiency's bookkeeping: the first N labels, scores kept and reused."""
import json

from clips.clip import Preference
from experiments import label_efficiency
from launch.rundir import PREDICTOR_FILE, PREFS_FILE, record_epochs_pretrained
from pref_interface.store import PreferenceStore
from tests.test_sorting import make_clip


def pretrain(run_dir, epochs, of):
    """Leave what run.py's pretraining leaves: settings, a predictor, the epochs done."""
    (run_dir / "reward_predictor").mkdir(parents=True, exist_ok=True)
    (run_dir / "settings.json").write_text(json.dumps({"n_initial_epochs": of}))
    (run_dir / "reward_predictor" / PREDICTOR_FILE).write_bytes(b"")
    record_epochs_pretrained(run_dir, epochs)


def test_a_pretraining_stopped_part_way_is_run_again(tmp_path):
    run_dir = tmp_path / "pairs_2-seed0"
    assert not label_efficiency.pretrained(run_dir)
    pretrain(run_dir, epochs=2, of=3)
    assert not label_efficiency.pretrained(run_dir)
    record_epochs_pretrained(run_dir, 3)
    assert label_efficiency.pretrained(run_dir)


def test_each_size_is_trained_on_the_first_labels_scored_once_and_plotted(tmp_path, monkeypatch):
    with PreferenceStore(tmp_path / "pairs_gather-seed0" / PREFS_FILE) as store:
        ids = [store.add(Preference(make_clip(2 * k, 0.0), make_clip(2 * k + 1, 1.0), 0.0))
               for k in range(5)]
    sweeps, scored = [], []

    def fake_sweep(command, trials, storage, runs_dir, **options):
        sweeps.append((command[0], [t.name for t in trials]))
        for t in trials:
            pretrain(runs_dir / t.name, epochs=3, of=3)
        return 0

    def fake_agreement(run_dir, steps, n_envs, seed):
        scored.append(run_dir.name)
        return {"clip_agreement": 0.5 + len(scored) / 10, "clip_correlation": 0.1}

    monkeypatch.setattr(label_efficiency, "run_sweep", fake_sweep)
    monkeypatch.setattr(label_efficiency, "agreement", fake_agreement)
    argv = ["PongNoFrameskip-v4", "--queries", "pairs", "--labels", "2", "4",
            "--runs_dir", str(tmp_path), "--plot", str(tmp_path / "plot.png")]
    assert label_efficiency.main(argv) == 0
    # the store was full: no gathering, one sweep of both sizes' pretraining
    assert sweeps == [("pretrain_reward_predictor", ["pairs_2-seed0", "pairs_4-seed0"])]
    with PreferenceStore(tmp_path / "pairs-2-labels" / PREFS_FILE, create=False) as store:
        assert store.all_ids() == ids[:2]
    rows = json.loads((tmp_path / "results.json").read_text())
    assert [(r["labels"], r["clip_agreement"]) for r in rows] == [(2, 0.6), (4, 0.7)]
    assert (tmp_path / "plot.png").stat().st_size > 0
    assert label_efficiency.main(argv) == 0  # kept scores are reused, nothing runs again
    assert len(sweeps) == 1 and scored == ["pairs_2-seed0", "pairs_4-seed0"]
    assert label_efficiency.main(argv + ["--probe_steps", "50"]) == 0  # another probe: scored anew
    assert len(scored) == 4 and len(sweeps) == 1  # from the predictors trained already


def test_a_store_short_of_labels_is_gathered_first(tmp_path, monkeypatch):
    sweeps = []

    def fake_sweep(command, trials, storage, runs_dir, **options):
        sweeps.append([w for t in trials for w in t.run_argv(command, runs_dir / t.name)])
        return 1  # the gathering failed: nothing is pretrained

    monkeypatch.setattr(label_efficiency, "run_sweep", fake_sweep)
    argv = ["PongNoFrameskip-v4", "--queries", "sort", "--labels", "2", "6",
            "--runs_dir", str(tmp_path)]
    assert label_efficiency.main(argv) == 1
    assert sweeps == [["gather_initial_prefs", "PongNoFrameskip-v4", "--synthetic_prefs",
                       "--queries", "sort", "--n_initial_prefs", "6", "--seed", "0", "--log_dir",
                       str(tmp_path / "sort_gather-seed0")]]


def test_a_teacher_in_extra_labels_the_gathered_clips(tmp_path, monkeypatch):
    sweeps = []

    def fake_sweep(command, trials, storage, runs_dir, **options):
        sweeps.append(command)
        return 1

    monkeypatch.setattr(label_efficiency, "run_sweep", fake_sweep)
    argv = ["EnduroNoFrameskip-v4", "--queries", "pairs", "--labels", "4", "--epochs", "3",
            "--extra", "--teacher alongside_near", "--runs_dir", str(tmp_path)]
    assert label_efficiency.main(argv) == 1
    assert sweeps == [["gather_initial_prefs", "EnduroNoFrameskip-v4", "--synthetic_prefs",
                       "--teacher", "alongside_near", "--n_initial_epochs", "3"]]


def test_a_teachers_run_is_scored_against_its_teacher():
    from types import SimpleNamespace

    from experiments.probe_predictor import run_teacher

    def run(teacher):
        return SimpleNamespace(settings=SimpleNamespace(teacher=teacher))

    assert run_teacher(run("alongside_near:near=2")).measure == "the near alongside score"
    assert run_teacher(run("oracle")) is None
    assert label_efficiency.target([]) == "the true reward"
    assert label_efficiency.target([{"target": "the near alongside score"}]) == \
        "the near alongside score"
