"""The lines a run prints when it ends (launch.summary)."""
from pathlib import Path
from types import SimpleNamespace

from launch.summary import RunReport


def stats(dead_since: int, revivals: int = 0) -> SimpleNamespace:
    def value(v):
        return SimpleNamespace(value=v)

    return SimpleNamespace(timesteps=value(4_327_520), recent_return=value(-20.4),
                           dead_since=value(dead_since), revivals=value(revivals))


def test_the_summary_says_when_the_policy_network_died_and_how_often_it_was_revived(
        tmp_path: Path):
    report = RunReport(tmp_path, "PongNoFrameskip-v4", agent_stats=stats(-1))
    alive = report.summary(0, None, trained=True)
    assert "agent steps    4,327,520" in alive and "-20.4 (mean of the last 100" in alive
    assert "dead" not in alive
    report.agent_stats = stats(3_920_000)
    assert "policy network  dead at every check since 3,920,000 agent steps" in report.summary(
        0, None, trained=True)
    report.agent_stats = stats(-1, revivals=2)
    revived = report.summary(0, None, trained=True)
    assert "  revived        2 times from a live checkpoint after its policy died" in revived
    assert "dead at every check" not in revived


def test_a_resumed_runs_wall_clock_says_it_counts_this_start_alone(tmp_path: Path):
    from launch.rundir import MACHINES_FILE

    report = RunReport(tmp_path, "PongNoFrameskip-v4")
    wall = next(line for line in report.summary(0, None, trained=False).splitlines()
                if "wall-clock" in line)
    assert wall.endswith(" s"), wall  # no machines file yet: nothing said of starts
    (tmp_path / MACHINES_FILE).write_text("2026-12-04T01:11:00Z\tAMD EPYC, 2 cores\tpolicy on cpu\n")
    assert "(start" not in report.summary(0, None, trained=False)  # a first start
    with open(tmp_path / MACHINES_FILE, "a") as f:
        f.write("2026-12-04T08:34:00Z\tAMD EPYC, 2 cores\tpolicy on cpu\n")
    assert "wall-clock     0 min 00 s (start 2 of the run)" in report.summary(0, None, trained=False)


def test_the_summary_counts_agreement_over_the_whole_store_and_the_page_since_this_start(
        tmp_path: Path):
    # A resumed run: the store holds labels of every start, each with the ensemble's answer of
    # its time; the page counted only this start's (and answers "incomparable", never stored).
    from clips.clip import Preference
    from pref_interface.store import PreferenceStore
    from tests.helpers import reward_clip

    def clip(k):
        return reward_clip([float(k)] * 2, value=k)

    with PreferenceStore(tmp_path / "prefs.sqlite") as store:
        store.add(Preference(clip(1), clip(2), 1.0, "human", labeller="ann", ensemble_p=0.9))
        store.add(Preference(clip(3), clip(4), 1.0, "human", labeller="ann", ensemble_p=0.2))
        store.add(Preference(clip(3), clip(4), 1.0, "human", labeller="bob", ensemble_p=0.2))
    page = SimpleNamespace(labellers=["ann", "bob"], status=lambda: [
        "labels 3", "agreement ann-bob 50% of 2"])
    report = RunReport(tmp_path, "PongNoFrameskip-v4", page=page)
    lines = report.summary(0, tmp_path / "prefs.sqlite", trained=False).splitlines()
    assert "  labellers      ann 2, bob 1" in lines
    assert "  agreement      ann-bob 100% of 1, ann-ensemble 50% of 2, bob-ensemble 0% of 1" in lines
    assert "  this start     ann-bob 50% of 2" in lines


def test_a_gather_stopped_before_its_last_label_says_how_many_it_holds(tmp_path: Path):
    from launch.cli import parse_args
    from run import end_of_run

    run = parse_args(["gather_initial_prefs", "MovingDotNoFrameskip-v0", "--synthetic_prefs",
                      "--n_initial_prefs", "3", "--log_dir", str(tmp_path / "run")])
    report = RunReport(run.dir, "MovingDotNoFrameskip-v0")
    for code, first in ((130, "run stopped by Ctrl-C with 0 of its 3 labels"),
                        (0, "run stopped with 0 of its 3 labels"),  # Ctrl-D
                        (1, "run stopped: a process failed")):
        summary = end_of_run(run, report, code).splitlines()
        assert summary[0] == first and summary[-1].startswith("  resume:"), summary


def test_the_summary_gives_the_share_of_ties_and_points_out_a_store_of_nearly_all_ties(
        tmp_path: Path):
    from clips.clip import Preference
    from pref_interface.store import PreferenceStore
    from tests.helpers import reward_clip

    path = tmp_path / "prefs.sqlite"
    report = RunReport(tmp_path, "EnduroNoFrameskip-v4")

    def labels_line() -> str:
        return next(line for line in report.summary(0, path, trained=False).splitlines()
                    if line.startswith("  labels"))

    with PreferenceStore(path) as store:
        store.add(Preference(reward_clip([1.0]), reward_clip([0.0]), 1.0, "synthetic"))
        for _ in range(3):
            store.add(Preference(reward_clip([0.0]), reward_clip([0.0]), 0.5, "synthetic"))
    assert labels_line() == "  labels         4 in prefs.sqlite (75% ties)"
    with PreferenceStore(path) as store:
        for _ in range(6):
            store.add(Preference(reward_clip([0.0]), reward_clip([0.0]), 0.5, "synthetic"))
    assert labels_line() == ("  labels         10 in prefs.sqlite (90% ties; r̂ learns which clip "
                             "is better from the other 1)")
