"""experiments.plot_runs: a mistake in its arguments is one line before any figure is drawn."""
import pytest

from experiments import plot_runs
from runtime.scalars import ScalarWriter


@pytest.mark.parametrize("args, words", [
    (["--window", "0"], "--window must be at least 1"),
    (["--out", "{tmp}/f.txt"], "is not a .png, .svg or .pdf file"),
    (["--out", "{tmp}/folder.png"], "is a folder"),
    (["--out", "/proc/f.png"], "cannot write into /proc"),
    (["--labels", "a", "b"], "one --labels name per run directory"),
])
def test_bad_input_is_one_line(tmp_path, capsys, monkeypatch, args, words):
    monkeypatch.chdir(tmp_path)  # where the default --out would go
    run = tmp_path / "run"
    (tmp_path / "folder.png").mkdir()
    w = ScalarWriter(str(run / "tb"))
    w.add_scalar("charts/episodic_return", 1.0, 100)
    w.close()
    with pytest.raises(SystemExit) as e:
        plot_runs.main([str(run), *(a.format(tmp=tmp_path) for a in args)])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and words in err, err
    assert err.startswith("python -m experiments.plot_runs: error: ")
    assert not [f for f in tmp_path.rglob("*") if f.is_file() and f.suffix in (".png", ".txt")]


def test_a_figure_is_drawn_into_a_new_folder(tmp_path):
    run = tmp_path / "run"
    w = ScalarWriter(str(run / "tb"))
    for step in range(100, 1100, 100):
        w.add_scalar("charts/episodic_return", step / 100, step)
    w.close()
    assert plot_runs.main([str(run), "--window", "2", "--out", str(tmp_path / "new" / "f.png")]) == 0
    assert (tmp_path / "new" / "f.png").stat().st_size > 0
