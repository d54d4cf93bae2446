"""One game's reproduction report: a row per run and the figure of every seed."""
import json

from experiments import reproduction
from runtime.scalars import ScalarWriter


def fake_run(d, seed, returns, starts, labels=None, machines=("AMD EPYC, 2 cores, avx2",)):
    (d / "tb").mkdir(parents=True)
    (d / "settings.json").write_text(json.dumps({"seed": seed}))
    (d / "command.txt").write_text("python run.py ...\n" * starts)
    (d / "machines.txt").write_text("".join(f"2026-11-25T19:00:00Z\t{m}\tpolicy on cpu, "
                                            "predictor on cpu\n" for m in machines))
    a2c = ScalarWriter(str(d / "tb"))
    for k, ret in enumerate(returns):
        a2c.add_scalar("charts/episodic_return", ret, 1000 * (k + 1))
        a2c.add_scalar("charts/SPS", 100.0, 1000 * (k + 1))
    a2c.close()
    if labels is not None:
        writer = ScalarWriter(str(d / "tb" / "labels"))
        writer.add_scalar("labels/total", labels, 1)
        writer.close()


def test_a_row_per_run_and_one_figure_of_every_seed(tmp_path, capsys):
    fake_run(tmp_path / "p1", 1, [-21, -20, 19, 20, 17, 15], starts=3,
             machines=("AMD EPYC, 2 cores, avx2", "AMD EPYC, 2 cores, avx2",
                       "Intel Xeon, 2 cores, amx_bf16"))
    fake_run(tmp_path / "t0", 0, [-21, -21, -20], starts=1)
    out = tmp_path / "pong.png"
    assert reproduction.main(["Pong", "--prefs", str(tmp_path / "p1"), "--true",
                              str(tmp_path / "t0"), "--level", "19", "--window", "2",
                              "--out", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("| run | seed |") and "first ≥ 19" in lines[0]
    prefs, true = ([c.strip() for c in line.strip("|").split("|")] for line in lines[2:4])
    assert prefs[:3] == ["from preferences", "1", "0.01M"]
    assert prefs[5] == "AMD EPYC, 2 cores, avx2; Intel Xeon, 2 cores, amx_bf16" and prefs[6] == "2"
    assert prefs[7].startswith("0.00M") and prefs[8] == "+19.5 at 0.00M" and prefs[9] == "+16.0"
    assert true[:2] == ["true reward", "0"] and true[6] == "0" and true[7] == "not yet"
    assert true[9] == "-20.5" and out.stat().st_size > 0


def test_a_directory_that_is_no_run_is_a_one_line_error(tmp_path, capsys):
    assert reproduction.main(["Pong", "--prefs", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip().count("\n") == 0
