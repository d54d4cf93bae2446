"""One game's reproduction report: a row per run and the figure of every seed."""
import json
from pathlib import Path

import numpy as np
import pytest

from experiments import reproduction
from runtime.scalars import ScalarWriter

ROOT = Path(__file__).resolve().parent.parent


def fake_run(d, seed, returns, starts, monkeypatch, labels=None,
             machines=("AMD EPYC, 2 cores, avx2",), start="python run.py ..."):
    import runtime.scalars

    clock = [0.0]
    monkeypatch.setattr(runtime.scalars.time, "time", lambda: clock[0])
    (d / "tb").mkdir(parents=True)
    (d / "settings.json").write_text(json.dumps({"seed": seed}))
    (d / "command.txt").write_text(start + "\n" + "python run.py --resume ...\n" * (starts - 1))
    starts_on = [m if "\t" in m else f"{m}\tpolicy on cpu, predictor on cpu" for m in machines]
    (d / "machines.txt").write_text("".join(f"2026-11-25T19:00:00Z\t{m}\n" for m in starts_on))
    # An episode every 100k agent steps; the labels process logs its count beside each one
    # (its points are put on the step axis through their wall-clock times).
    a2c = ScalarWriter(str(d / "tb"))
    writer = ScalarWriter(str(d / "tb" / "labels")) if labels is not None else None
    for k, ret in enumerate(returns):
        clock[0] = 10.0 * (k + 1)  # an episode every 10 s
        a2c.add_scalar("charts/episodic_return", ret, 100_000 * (k + 1))
        a2c.add_scalar("charts/SPS", 100.0, 100_000 * (k + 1))
        a2c.flush()
        if writer is not None:
            writer.add_scalar("labels/total", labels * (k + 1), k)
            writer.flush()
    a2c.close()
    if writer is not None:
        writer.close()


def test_a_row_per_run_and_one_figure_of_every_seed(tmp_path, capsys, monkeypatch):
    fake_run(tmp_path / "p1", 1, [-21, -20, 19, 20, 17, 15], starts=3, monkeypatch=monkeypatch,
             labels=100,
             machines=("AMD EPYC, 2 cores, avx2", "AMD EPYC, 2 cores, avx2",
                       "Intel Xeon, 2 cores, amx_bf16",
                       "Intel Xeon, 16 cores, amx_bf16\tpolicy on cuda, predictor on cuda"))
    fake_run(tmp_path / "t0", 0, [-21, -21, -20], starts=1, monkeypatch=monkeypatch)
    out = tmp_path / "pong.png"
    assert reproduction.main(["Pong", "--prefs", str(tmp_path / "p1"), "--true",
                              str(tmp_path / "t0"), "--level", "19", "--window", "2",
                              "--out", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("| run | seed |") and "first ≥ 19 |" in lines[0]
    prefs, true = ([c.strip() for c in line.strip("|").split("|")] for line in lines[2:4])
    assert prefs[:4] == ["from preferences", "1", "0.60M", "600"]
    assert prefs[5] == ("AMD EPYC, 2 cores, avx2; Intel Xeon, 2 cores, amx_bf16; "
                        "Intel Xeon, 16 cores, amx_bf16 + GPU") and prefs[6] == "2"
    # the mean of 2 first reaches 19 with the episodes at 0.3M and 0.4M, best there too; it then
    # falls to 16 (17 and 15): the level touched, not held; the episodes after it average 16 too
    assert prefs[7] == "0.40M, 400 labels" and prefs[8] == "+16.0 at 0.60M" and prefs[9] == "+16.0"
    assert prefs[10] == "+19.5 at 0.40M" and prefs[11] == "+16.0"
    assert true[:4] == ["true reward", "0", "0.30M", "-"] and true[6] == "0"
    assert true[7:10] == ["not yet", "-", "-"] and true[11] == "-20.5" and out.stat().st_size > 0


def test_every_stretch_of_agent_steps_gives_each_runs_mean_and_episodes_lost(tmp_path, capsys,
                                                                              monkeypatch):
    fake_run(tmp_path / "p1", 1, [-21, -20, 19, 20, 17, 15], starts=1, monkeypatch=monkeypatch)
    fake_run(tmp_path / "t0", 0, [-21, -21, -20], starts=1, monkeypatch=monkeypatch)
    assert reproduction.main(["Pong", "--prefs", str(tmp_path / "p1"), "--true",
                              str(tmp_path / "t0"), "--every", "300000"]) == 0
    lines = capsys.readouterr().out.splitlines()
    head = lines.index("") + 1  # the second table, after the rows' one
    assert lines[head] == "| run | seed | 0–0.3M | 0.3–0.6M |"
    assert lines[head + 2] == "| from preferences | 1 | -7.3, 67% lost | +17.3, 0% lost |"
    assert lines[head + 3] == "| true reward | 0 | -20.7, 100% lost | - |"
    assert reproduction.main(["Pong", "--true", str(tmp_path / "t0"), "--every", "0"]) == 2


def test_without_a_level_the_table_has_no_column_for_reaching_it(tmp_path, capsys, monkeypatch):
    """Enduro has no milestone level: no column that would read "not yet" for every run."""
    fake_run(tmp_path / "t0", 0, [0, 0, 5], starts=1, monkeypatch=monkeypatch)
    assert reproduction.main(["Pong", "--true", str(tmp_path / "t0"), "--window", "2"]) == 0
    head, rule, row = capsys.readouterr().out.splitlines()
    assert "first" not in head and head.count("|") == rule.count("|") == row.count("|") == 10
    assert row.split("|")[-3:-1] == [" +2.5 at 0.30M ", " +2.5 "]


def test_a_run_started_with_other_flags_than_its_kind_is_named_by_them(tmp_path, capsys,
                                                                      monkeypatch):
    """Two seed-0 runs from preferences, one with the learning rate decayed: the row and the
    legend say which is which; flags that do not change what is learnt (threads, checkpoints)
    and those every run of the kind shares name nothing."""
    common = "python /x/run.py train_policy_with_preferences PongNoFrameskip-v4 --synthetic_prefs"
    fake_run(tmp_path / "p0", 0, [-21, 20], starts=1, monkeypatch=monkeypatch,
             start=f"{common} --seed 0 --policy_ckpts_kept 0 --log_dir /r/p0")
    fake_run(tmp_path / "decay", 0, [-21, 20], starts=2, monkeypatch=monkeypatch,
             start=f"{common} --lr_zero_million_timesteps 6 --no_batchnorm --torch_threads 1")
    fake_run(tmp_path / "t0", 0, [-21, 20], starts=1, monkeypatch=monkeypatch,
             start="python run.py train_policy_with_original_rewards PongNoFrameskip-v4 --lr 3e-4")
    assert reproduction.main(["Pong", "--prefs", str(tmp_path / "p0"), str(tmp_path / "decay"),
                              "--true", str(tmp_path / "t0")]) == 0
    runs = [line.split("|")[1].strip() for line in capsys.readouterr().out.splitlines()[2:]]
    assert runs == ["from preferences",
                    "from preferences, --lr_zero_million_timesteps 6 --no_batchnorm",
                    "true reward"]
    # a start that is not a run.py command the parser reads names nothing
    rec = reproduction.RunRecord.read(tmp_path / "p0")
    for start in ("python other.py --lr 1", "python run.py --lr 'unclosed", "python run.py --lr x"):
        rec.commands = [start]
        assert rec.start_flags == {}


def test_two_runs_of_one_command_and_seed_are_named_by_their_run(tmp_path, capsys, monkeypatch):
    """A run started again with the same command: its row and its legend label tell it from the
    first."""
    start = "python run.py train_policy_with_preferences PongNoFrameskip-v4 --lr 1e-4 --seed 0"
    for name in ("decay_first", "decay"):
        fake_run(tmp_path / name, 0, [-21, 20], starts=1, monkeypatch=monkeypatch, start=start)
    fake_run(tmp_path / "p1", 1, [-21, 20], starts=1, monkeypatch=monkeypatch,
             start=start.replace("--lr 1e-4 --seed 0", "--seed 1"))
    labels = []
    monkeypatch.setattr(reproduction, "plot",
                        lambda rows, *_, **__: labels.extend(f"{r.title}, seed {r.seed}" for r in rows))
    assert reproduction.main(["Pong", "--prefs", *(str(tmp_path / n) for n in
                                                   ("decay_first", "decay", "p1")),
                              "--out", str(tmp_path / "pong.png")]) == 0
    runs = [line.split("|")[1].strip() for line in capsys.readouterr().out.splitlines()[2:]]
    assert runs == ["from preferences, --lr 0.0001, decay_first",
                    "from preferences, --lr 0.0001, decay", "from preferences"]
    assert labels == [f"{run}, seed {seed}" for run, seed in zip(runs, (0, 0, 1))]


def test_the_figures_legend_lies_inside_the_saved_image(tmp_path):
    """Long run names below the axes are not cut at the image's edges."""
    import matplotlib.image

    steps = np.arange(1, 11) * 1e5
    fake_rows = []
    for k in range(3):
        rec = reproduction.RunRecord(f"run{k}", k, "PongNoFrameskip-v4", [], [], 1e6, 1.0, steps,
                                     np.linspace(-21, 20, 10), steps / 100, steps, steps / 1e3)
        fake_rows.append(reproduction.RunRow("prefs", rec, k, 1e6, None, 1.0, [], 1, None, None,
                                             None, None, None, flags="--a_very_long_flag_name " * 8))
    out = tmp_path / "f.png"
    reproduction.plot(fake_rows, "Pong", str(out), 10, 19.0)
    width = matplotlib.image.imread(out).shape[1]
    assert width > 7 * 80  # wider than the 7-inch figure at 80 dpi: widened to hold the legend


def test_a_directory_that_is_no_run_is_a_one_line_error(tmp_path, capsys):
    assert reproduction.main(["Pong", "--prefs", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip().count("\n") == 0


def test_a_folder_that_holds_no_sweep_is_a_one_line_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        reproduction.main(["Pong", "--sweep", str(tmp_path / "none")])
    assert stop.value.code == 2 and "holds no sweep's runs" in capsys.readouterr().err


def test_a_saved_record_gives_the_same_row_as_its_run_directory(tmp_path, capsys, monkeypatch):
    """The repository keeps each long run's record (docs/run_records/): a machine that loses ~/runs
    loses no row of the table and no curve of the figure."""
    fake_run(tmp_path / "p1", 1, [-21, -20, 19, 20, 17, 15], starts=3, monkeypatch=monkeypatch,
             labels=100)
    args = ["Pong", "--level", "19", "--window", "2"]
    assert reproduction.main(args + ["--prefs", str(tmp_path / "p1"),
                                     "--save_records", str(tmp_path / "records")]) == 0
    from_dir = capsys.readouterr().out.splitlines()
    assert from_dir[0] == f"wrote {tmp_path / 'records' / 'p1.json'}"
    assert reproduction.main(args + ["--prefs", str(tmp_path / "records" / "p1.json")]) == 0
    assert capsys.readouterr().out.splitlines() == from_dir[1:]
    # the labels are kept only where they change, and the hours of training with the record
    rec = reproduction.RunRecord.load(tmp_path / "records" / "p1.json")
    assert list(rec.label_totals) == [100, 200, 300, 400, 500, 600]
    assert rec.training_s == 50.0 and list(rec.episode_training_s) == [0, 10, 20, 30, 40, 50]
    # every setting, as the run ran, so that a default changed later does not misname it
    assert rec.settings == json.loads((tmp_path / "p1" / "settings.json").read_text())


def test_a_record_of_another_format_is_a_one_line_error(tmp_path, capsys):
    (tmp_path / "old.json").write_text('{"format": 0}')
    assert reproduction.main(["Pong", "--prefs", str(tmp_path / "old.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert "format 0" in err and err.count("\n") == 0


def test_a_run_of_another_game_or_a_bad_output_is_a_one_line_error(tmp_path, capsys, monkeypatch):
    fake_run(tmp_path / "p1", 1, [-21, -20], starts=1, monkeypatch=monkeypatch)
    settings = tmp_path / "p1" / "settings.json"
    settings.write_text(json.dumps({"seed": 1, "env_id": "PongNoFrameskip-v4"}))
    (tmp_path / "afile").write_text("")
    (tmp_path / "text.json").write_text("not json")
    (tmp_path / "no_tb").mkdir()  # a run directory whose logs are gone: nothing to read
    (tmp_path / "no_tb" / "settings.json").write_text(settings.read_text())
    p1 = str(tmp_path / "p1")
    for args, reason in (
            (["Enduro", "--prefs", p1], "is a run of PongNoFrameskip-v4, not Enduro"),
            (["Pong", "--prefs", str(tmp_path / "no_tb")], "has no TensorBoard logs"),
            (["Pong", "--prefs", str(tmp_path / "missing")], "missing does not exist"),
            (["Pong", "--prefs", str(tmp_path / "text.json")], "not a run record"),
            (["Pong", "--prefs", p1, "--save_records", str(tmp_path / "afile")],
             "afile is a file; give a folder"),
            (["Pong", "--prefs", p1, "--out", str(tmp_path / "afile" / "x.png")],
             "afile is a file, not a folder"),
            (["Pong", "--prefs", p1, "--out", str(tmp_path / "x.txt")], "is not a .png"),
            (["Pong", "--prefs", p1, "--window", "0"], "--window must be at least 1"),
            (["Pong", "--prefs", p1, p1, "--save_records", str(tmp_path / "records")],
             "two runs have the same folder name")):
        assert reproduction.main(args) == 2, args
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and reason in err, (args, err)
    assert reproduction.main(["Pong", "--prefs", str(tmp_path / "p1"), "--out",
                              str(tmp_path / "figures" / "pong.png")]) == 0  # its folder made
    assert (tmp_path / "figures" / "pong.png").stat().st_size > 0


def test_a_setting_over_seeds_gives_how_many_reached_and_the_mean_and_spread():
    from experiments.reproduction import name_by_flags, read_run, setting_table

    records = ROOT / "docs" / "run_records"
    rows = [read_run("prefs", records / f"pong_prefs_seed{k}.json", 19.0, 10) for k in (1, 2)]
    name_by_flags(rows)
    table = setting_table(rows).splitlines()
    assert len(table) == 3  # head, rule, and one setting: the two seeds share their flags
    cells = [c.strip() for c in table[2].split("|")[1:-1]]
    finals = [r.final for r in rows]
    assert cells[1:3] == ["1, 2", "2 of 2"]
    assert cells[3] == f"{sum(finals) / 2:+.1f} ± {abs(finals[0] - finals[1]) / 2:.1f}"
    # Without a level there is nothing to reach: no such column (it read as "0 of 2")
    head = setting_table(rows, with_level=False).splitlines()[0]
    assert "reached" not in head and head.endswith("| training (h) |"), head


def test_a_sweep_of_short_runs_gives_their_training_in_minutes(tmp_path):
    from experiments.reproduction import read_run, setting_table

    records = ROOT / "docs" / "run_records"
    row = read_run("prefs", records / "moving_dot-seed0.json", None, 10)
    assert row.hours < 1
    table = setting_table([row], with_level=False).splitlines()
    assert table[0].endswith("| training (min) |")
    assert table[2].split("|")[-2].strip() == f"{row.hours * 60:.1f}"


def test_agent_steps_read_in_millions_and_in_full_below_a_hundredth_of_one():
    from experiments.reproduction import steps_text

    assert [steps_text(n) for n in (6e6, 2_743_520, 5_000, 2_340, 0)] == [
        "6.00M", "2.74M", "0.01M", "2,340", "0"]


def test_a_run_stopped_between_two_counts_of_its_labels_gives_the_stores(tmp_path, monkeypatch):
    """The labels logged lag the store (the last ones came after the last count): a stopped
    run's record ends on the store's own count."""
    from experiments.runrecord import RunRecord
    from pref_interface.store import PreferenceStore
    from tests.helpers import random_pref

    fake_run(tmp_path / "p1", 1, [-21, -20], starts=1, monkeypatch=monkeypatch, labels=2)
    assert RunRecord.read(tmp_path / "p1").labels == 4  # the last count; no store here
    rng = np.random.default_rng(0)
    with PreferenceStore(tmp_path / "p1" / "prefs.sqlite") as store:
        for _ in range(6):
            store.add(random_pref(rng, t=2))
    rec = RunRecord.read(tmp_path / "p1")
    assert rec.labels == 6 and rec.label_steps[-1] == rec.agent_steps


def test_a_run_stopped_before_its_target_gives_its_steps_so_far(tmp_path, capsys, monkeypatch):
    """A sweep's report while its trials run (or after they were stopped): a run whose newest
    checkpoint is short of its --million_timesteps says "so far", in its record too."""
    d = tmp_path / "p1"
    fake_run(d, 1, [-21, -20, 19], starts=1, monkeypatch=monkeypatch)
    (d / "settings.json").write_text(json.dumps({"seed": 1, "million_timesteps": 0.5}))
    (d / "policy").mkdir()
    (d / "policy" / "policy-000000300000.pt").touch()
    args = ["Pong", "--window", "2", "--prefs"]

    def steps_cell(path: Path) -> str:
        assert reproduction.main(args + [str(path)]) == 0
        return capsys.readouterr().out.splitlines()[2].split("|")[3].strip()

    assert steps_cell(d) == "0.30M so far"
    assert reproduction.main(args + [str(d), "--save_records", str(tmp_path / "rec")]) == 0
    capsys.readouterr()
    assert steps_cell(tmp_path / "rec" / "p1.json") == "0.30M so far"
    (d / "policy" / "policy-000000500000.pt").touch()
    assert steps_cell(d) == "0.30M"  # at its target: the steps of its last episode, as they were
