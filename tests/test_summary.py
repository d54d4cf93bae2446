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
