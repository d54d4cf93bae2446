"""Run curves for the reports: a resumed run's wall-clock and curves, summarise_run's table and levels."""
import numpy as np
import pytest

from experiments.runlog import RunLog
from runtime.scalars import ScalarWriter


def test_wall_clock_leaves_out_the_time_a_resumed_run_was_stopped(tmp_path):
    log = RunLog(tmp_path)  # no tb/ yet: no points
    assert log.wall_clock_s() == 0.0
    # (wall time, step, SPS): 100 s of training, stopped for an hour, then 50 s more.
    t = np.concatenate([np.arange(0.0, 101.0), 3700.0 + np.arange(0.0, 51.0)])
    log.sps = np.stack([t, 1000.0 * np.arange(len(t)), np.full(len(t), 1000.0)], 1)
    assert log.wall_clock_s() == 150.0


def test_a_short_stop_is_left_out_where_the_machines_file_records_the_resume(tmp_path):
    from datetime import datetime, timezone

    from launch.rundir import MACHINES_FILE

    t0 = datetime(2026, 12, 4, 12, 0, tzinfo=timezone.utc).timestamp()
    # 100 s of training, stopped for 40 s (under the 60 s a silence alone counts as a stop), 50 s.
    t = t0 + np.concatenate([np.arange(0.0, 101.0), 140.0 + np.arange(0.0, 51.0)])

    def start(s: float) -> str:  # a machines-file line of a start `s` seconds after t0
        return datetime.fromtimestamp(t0 + s, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ\tAMD\tcpu\n")
    # the first start, the resume, and this start (no point after it yet)
    (tmp_path / MACHINES_FILE).write_text(start(-5) + start(130) + start(999))
    log = RunLog(tmp_path)
    log.sps = np.stack([t, 1000.0 * np.arange(len(t)), np.full(len(t), 1000.0)], 1)
    assert log.wall_clock_s() == 150.0
    (tmp_path / MACHINES_FILE).write_text("")  # without it, the 40 s count as training
    log = RunLog(tmp_path)
    log.sps = np.stack([t, 1000.0 * np.arange(len(t)), np.full(len(t), 1000.0)], 1)
    assert log.wall_clock_s() == 190.0


def test_summarise_run_gives_one_row_per_window_of_steps(tmp_path, capsys):
    from experiments import summarise_run

    a2c = ScalarWriter(str(tmp_path / "tb"))
    for step, ret in ((100, -21.0), (200, -19.0), (1200, 5.0)):
        a2c.add_scalar("charts/episodic_return", ret, step)
    for step in range(0, 1600, 100):
        a2c.add_scalar("charts/SPS", 50.0 if step < 1000 else 150.0, step)
    for step, norm in ((100, 0.4), (300, 7.5), (600, 0.3), (1100, 0.2), (1200, float("nan"))):
        a2c.add_scalar("losses/grad_norm_max", norm, step)
    for step, share in ((100, 0.1), (200, 0.3)):  # Enduro's share of steps level with a car
        a2c.add_scalar("charts/alongside_share", share, step)
    for step, spread in ((500, 0.25), (900, 0.0012), (1100, 0.3)):  # the window's last counts
        a2c.add_scalar("alive_units/logit_spread", spread, step)
        a2c.add_scalar("alive_units/value_spread", spread / 2, step)
    a2c.close()
    labels = ScalarWriter(str(tmp_path / "tb" / "labels"))
    labels.add_scalar("labels/tie_share", 0.96, 500)
    labels.close()
    assert summarise_run.main([str(tmp_path), "--every", "1000"]) == 0
    lines = capsys.readouterr().out.splitlines()
    head = lines[0].split()
    assert head[:3] == ["steps", "episodes", "return"] and len(lines) == 3
    first, second = (dict(zip(head, line.split())) for line in lines[1:])
    # 0.00-0.00M would say nothing; the last window ends where the run stands
    assert (first["steps"], second["steps"]) == ("0-1k", "1-1.5k")
    assert (first["episodes"], first["return"], first["steps/s"]) == ("2", "-20.0", "50")
    assert (second["episodes"], second["return"], second["steps/s"]) == ("1", "+5.0", "150")
    # the window's spike; a NaN (a blow-up) is shown, not passed over
    assert (first["grad_max"], second["grad_max"]) == ("7.50", "nan")
    assert first["labels"] == first["val_acc"] == first["demo_pref"] == "-"  # not a preference run
    # labelling's points go onto A2C's steps by wall-clock: written last, in the last window
    assert (first["ties"], second["ties"]) == ("-", "96%")
    assert (first["alongside"], second["alongside"]) == ("20.0%", "-")
    assert (first["logit_sd"], second["logit_sd"]) == ("0.001", "0.300")
    assert (first["value_sd"], second["value_sd"]) == ("0.001", "0.150")
    # a run ending on a window's edge: its last point is in the last window, not one of its own
    assert summarise_run.main([str(tmp_path), "--every", "500"]) == 0
    rows = capsys.readouterr().out.splitlines()[1:]
    assert [r.split()[0] for r in rows] == ["0-0.5k", "0.5-1k", "1-1.5k"]


def test_a_resumed_runs_curve_is_read_without_tensorboards_restart_warning(tmp_path, caplog,
                                                                             monkeypatch):
    import runtime.scalars
    from experiments.runlog import scalars

    # Event files are read in the order of their names, which begin with the second they were
    # opened in: the resumed run's comes later, as it does in a real resume.
    clock = [1000.0]
    monkeypatch.setattr(runtime.scalars.time, "time", lambda: clock[0])
    killed = ScalarWriter(str(tmp_path))
    for step in range(0, 1000, 100):
        killed.add_scalar("charts/SPS", -1.0, step)
    killed.close()
    clock[0] = 2000.0
    resumed = ScalarWriter(str(tmp_path), purge_step=500)  # the checkpoint was at 500
    for step in range(600, 800, 100):
        resumed.add_scalar("charts/SPS", 1.0, step)
    resumed.close()
    points = scalars(tmp_path, "charts/SPS")
    # the point at the checkpoint's step was logged before it was saved: kept
    assert points[:, 1].tolist() == [0, 100, 200, 300, 400, 500, 600, 700]
    assert points[:, 2].tolist() == [-1.0] * 6 + [1.0] * 2
    assert not [r for r in caplog.records if "out of order" in r.getMessage()]


def test_summarise_run_says_when_the_mean_of_10_episodes_first_reached_each_level(tmp_path,
                                                                                   monkeypatch,
                                                                                   capsys):
    import runtime.scalars
    from experiments import summarise_run

    clock = [0.0]
    monkeypatch.setattr(runtime.scalars.time, "time", lambda: clock[0])
    a2c, labels = ScalarWriter(tmp_path / "tb"), ScalarWriter(tmp_path / "tb" / "labels")
    for step in range(0, 1_000_001, 5_000):  # 100 agent steps a second, a point every 50 s
        clock[0] = step / 100
        a2c.add_scalar("charts/SPS", 100.0, step)
        if step % 50_000 == 0 and step:  # 20 episodes: 10 lost 21-1, then 10 won 21-11
            a2c.add_scalar("charts/episodic_return", -20.0 if step <= 500_000 else 10.0, step)
        if step % 100_000 == 0:
            labels.add_scalar("labels/total", step / 1000, step)
    a2c.close()
    labels.close()
    assert summarise_run.main([str(tmp_path), "--levels", "0", "19"]) == 0
    lines = capsys.readouterr().out.splitlines()
    # At 850k steps the last 10 episodes are 7 won and 3 lost (+1.0), the first mean >= 0
    assert lines[-3:] == [
        "mean of 10 episodes: best +10.0 at 1.00M steps, last +10.0 at 1.00M",
        "+0: first at 0.85M steps, 800 labels, 2.4 h of training",
        "+19: not reached"]
    for bad in (["--levels", "nan"], ["--window", "0"]):  # one line each, nothing printed
        with pytest.raises(SystemExit) as e:
            summarise_run.main([str(tmp_path), *bad])
        assert e.value.code == 2 and capsys.readouterr().out == ""
    with pytest.raises(SystemExit):
        summarise_run.main([str(tmp_path / "missing")])
    assert "does not exist" in capsys.readouterr().err


def test_steps_per_second_and_waiting_count_each_point_for_the_time_it_stands_for(tmp_path,
                                                                                  monkeypatch,
                                                                                  capsys):
    import runtime.scalars
    from experiments import summarise_run

    clock = [0.0]
    monkeypatch.setattr(runtime.scalars.time, "time", lambda: clock[0])
    a2c = ScalarWriter(tmp_path / "tb")
    step = 0
    # A2C logs its rate and waiting share over the time since its last point: nine seconds at
    # 100 steps/s without waiting, then one 9 s stall (10 steps/s, waiting 90%).
    for seconds, sps, waiting in [(1.0, 100.0, 0.0)] * 10 + [(9.0, 10.0, 0.9)]:
        clock[0] += seconds
        step += int(sps * seconds)
        a2c.add_scalar("charts/SPS", sps, step)
        a2c.add_scalar("charts/waiting_for_predictor", waiting, step)
    a2c.close()
    assert summarise_run.main([str(tmp_path), "--every", "10000"]) == 0
    head, row = (line.split() for line in capsys.readouterr().out.splitlines())
    cells = dict(zip(head, row))
    # 990 steps in 18 s (the first point has no time before it), 8.1 of them waiting
    assert (cells["steps/s"], cells["waiting"]) == ("55", "45%")


def test_summarise_run_says_how_well_rhat_ordered_the_policys_own_episodes(tmp_path, capsys):
    from experiments import summarise_run

    a2c = ScalarWriter(str(tmp_path / "tb"))
    # window 1: r̂ rises with the true return; window 2: summed r̂ falls as the true return rises,
    # because the better episodes are shorter, while r̂ per step rises with it
    for step, true, predicted, length in ((100, -21, -3.0, 1000), (200, -15, -1.0, 1000),
                                          (300, -10, 2.0, 1000), (1100, -5, 2.0, 1000),
                                          (1200, 0, 1.0, 250), (1300, 5, 0.5, 50)):
        a2c.add_scalar("charts/episodic_return", true, step)
        a2c.add_scalar("charts/predicted_return", predicted, step)
        a2c.add_scalar("charts/episodic_length", length, step)
    for step in range(0, 1600, 100):
        a2c.add_scalar("charts/SPS", 100.0, step)
    a2c.close()
    assert summarise_run.main([str(tmp_path), "--every", "1000"]) == 0
    lines = capsys.readouterr().out.splitlines()
    first, second = (dict(zip(lines[0].split(), line.split())) for line in lines[1:])
    assert float(first["rhat_corr"]) > 0.9 and float(second["rhat_corr"]) < -0.9
    assert float(first["rhat_step_corr"]) > 0.9 and float(second["rhat_step_corr"]) > 0.9


def test_a_running_runs_progress_is_read_on_as_it_writes(tmp_path):
    """The sweep's view of a trial: steps of its target, labels (gathering's, then training's),
    the mean return of the last episodes and the rate, read again as the run goes on, its tb/
    made after the first look."""
    log = RunLog(tmp_path)
    assert log.progress()["agent_steps"] == 0.0 and np.isnan(log.progress()["return"])
    gather = ScalarWriter(str(tmp_path / "tb" / "gather"))
    gather.add_scalar("labels/total", 40, 0)
    gather.close()
    a2c = ScalarWriter(str(tmp_path / "tb"))
    for step in (100, 200):
        a2c.add_scalar("charts/SPS", 50.0, step)
    a2c.add_scalar("charts/episodic_return", -21.0, 200)
    a2c.flush()
    now = log.refresh().progress()
    assert {k: now[k] for k in ("agent_steps", "labels", "return", "steps_per_s")} == {
        "agent_steps": 200.0, "labels": 40.0, "return": -21.0, "steps_per_s": 50.0}
    assert np.isnan(now["target_steps"])  # no settings saved: not a run directory yet
    (tmp_path / "settings.json").write_text('{"mode": "gather_initial_prefs", '
                                            '"million_timesteps": 0.5}')
    assert np.isnan(log.refresh().progress()["target_steps"])  # a gathering: no step target
    (tmp_path / "settings.json").write_text('{"mode": "train_policy_with_preferences", '
                                            '"million_timesteps": 0.5}')
    labels = ScalarWriter(str(tmp_path / "tb" / "labels"))
    labels.add_scalar("labels/total", 55, 0)
    labels.close()
    for step, ret in ((300, -19.0), (400, -17.0)):
        a2c.add_scalar("charts/SPS", 50.0, step)
        a2c.add_scalar("charts/episodic_return", ret, step)
    a2c.close()
    assert log.refresh().progress(window=2) == {"agent_steps": 400.0, "labels": 55.0,
                                                "return": -18.0, "target_steps": 500_000.0,
                                                "steps_per_s": 50.0}


def test_labels_stored_after_the_last_logged_count_are_counted_at_the_last_step(tmp_path,
                                                                                monkeypatch):
    """The labelling process logs its count now and then: a report reads the store's own count at
    the end, so a finished run is not shown a label short."""
    import runtime.scalars
    from launch.rundir import PREFS_FILE
    from pref_interface.store import PreferenceStore
    from tests.helpers import random_pref

    clock = [0.0]
    monkeypatch.setattr(runtime.scalars.time, "time", lambda: clock[0])
    a2c, labels = ScalarWriter(tmp_path / "tb"), ScalarWriter(tmp_path / "tb" / "labels")
    for step in (0, 1000, 2000):
        clock[0] = step / 100
        a2c.add_scalar("charts/SPS", 100.0, step)
        if step == 1000:
            labels.add_scalar("labels/total", 2, step)
    a2c.close()
    labels.close()
    rng = np.random.default_rng(0)
    with PreferenceStore(tmp_path / PREFS_FILE) as store:
        for _ in range(3):
            store.add(random_pref(rng))
    log = RunLog(tmp_path)
    steps, totals = log.labels()
    assert list(steps) == [1000, 2000] and list(totals) == [2, 3]
    assert log.labels_at(1500) == 2 and log.labels_at(2000) == 3
