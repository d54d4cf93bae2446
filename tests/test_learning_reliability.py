"""experiments.learning_reliability: its seeds as one sweep stopped at the learned level, counted
from their run directories."""
from experiments import learning_reliability
from tests.test_sweep import fake_run


def test_the_seeds_run_as_one_sweep_and_each_ended_run_is_counted(tmp_path, monkeypatch, capsys):
    swept = {}

    def fake_sweep(command, trials, storage, runs_dir, stop_at, **options):
        swept.update(names=[t.name for t in trials], stop_at=stop_at, storage=storage)
        fake_run(runs_dir / "seed0", [10.0] * 64)  # learned
        fake_run(runs_dir / "seed1", [0.0] * 3, ended=True)  # at its agent steps without
        return 0  # seed2: never started

    monkeypatch.setattr(learning_reliability, "run_sweep", fake_sweep)
    assert learning_reliability.main(["--seeds", "0", "1", "2", "--out_dir", str(tmp_path)]) == 0
    assert swept == {"names": ["seed0", "seed1", "seed2"], "storage": tmp_path / "sweep",
                     "stop_at": (learning_reliability.LEARNED_LEVEL, 64)}
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.startswith("1 of 2 runs reached +7.5; agent steps to it: 6,400 to 6,400")
    assert last.endswith("(1 not ended)")
