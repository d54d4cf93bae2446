"""experiments.alongside_labels: the labels it adds, its two stores and its runs' bookkeeping."""
import json

import numpy as np

from clips.clip import Preference
from experiments import alongside_labels
from launch.rundir import PREFS_FILE
from pref_interface.store import PreferenceStore
from tests.test_label_efficiency import pretrain
from tests.test_sorting import make_clip


class ByReturn:
    """A teacher preferring the clip of higher true return; a tie it cannot decide."""

    def label(self, left, right):
        a, b = left.true_return, right.true_return
        return None if a == b else float(a > b)


def test_labels_are_added_on_random_pairs_and_undecided_pairs_passed_over(tmp_path):
    with PreferenceStore(tmp_path / PREFS_FILE):
        pass
    clips = [make_clip(i, float(i % 3)) for i in range(30)]
    added = alongside_labels.add_labels(tmp_path / PREFS_FILE, clips, ByReturn(), 200, 0.25,
                                        np.random.default_rng(0))
    with PreferenceStore(tmp_path / PREFS_FILE, create=False) as store:
        labels = [store.get(i) for i in store.all_ids()]
    assert 100 < added < 200 and len(labels) == added  # a third of the pairs tie
    assert all(p.mu == float(p.left.true_return > p.right.true_return) for p in labels)
    assert 0.15 < np.mean([p.is_validation for p in labels]) < 0.35


def test_both_predictors_are_trained_once_on_their_stores_and_probed(tmp_path, monkeypatch,
                                                                     capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "settings.json").write_text(json.dumps({
        "mode": "train_policy_with_preferences", "env_id": "EnduroNoFrameskip-v4",
        "synthetic_prefs": True, "teacher": "alongside_hold"}))
    with PreferenceStore(run / PREFS_FILE) as store:
        for k in range(4):
            store.add(Preference(make_clip(2 * k, 0.0), make_clip(2 * k + 1, 1.0), 0.0))
    sweeps, stores = [], []

    def fake_sweep(command, trials, storage, runs_dir, **options):
        sweeps.append(command + [t.name for t in trials])
        stores.extend(t.setting_flags for t in trials)
        for t in trials:
            pretrain(runs_dir / t.name, epochs=30, of=30)
        return 0

    monkeypatch.setattr(alongside_labels, "driver_clips",
                        lambda *_: [make_clip(100 + i, float(i)) for i in range(10)])
    monkeypatch.setattr(alongside_labels, "make_teacher", lambda _: ByReturn())
    monkeypatch.setattr(alongside_labels, "run_sweep", fake_sweep)
    monkeypatch.setattr(alongside_labels, "probe", lambda run_dir, *_: {
        "r_hat": 0.3 if run_dir.name.startswith("base") else 0.8, "teacher": 0.9,
        "agreement": 0.7})
    out = tmp_path / "out"
    argv = [str(run), "--labels", "6", "--runs_dir", str(out)]
    assert alongside_labels.main(argv) == 0
    assert len(sweeps) == 1 and sweeps[0][:4] == ["pretrain_reward_predictor",
                                                  "EnduroNoFrameskip-v4", "--synthetic_prefs",
                                                  "--teacher"]
    assert sweeps[0][-2:] == ["base-seed0", "closer-seed0"]
    assert stores == [("--load_prefs_dir", str(out / f"{arm}-labels")) for arm in ("base", "closer")]
    text = capsys.readouterr().out
    assert "| base: 4 | 30.0% | 90.0% | 70.0% |" in text
    assert "closer: 6 labels on 10 clips" in text and "| closer: 10 | 80.0%" in text
    with PreferenceStore(out / "closer-labels" / PREFS_FILE, create=False) as store:
        added = [store.get(i) for i in store.all_ids()[4:]]
    assert all(p.mu == float(p.left.true_return > p.right.true_return) for p in added)
    with PreferenceStore(run / PREFS_FILE, create=False) as store:
        assert len(store) == 4  # the run's own store is only read
    assert alongside_labels.main(argv) == 0
    assert len(sweeps) == 1  # stores and predictors made already: nothing runs again
