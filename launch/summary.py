"""The few lines printed when a run ends: what it did and what to type next."""
from __future__ import annotations

import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path

from launch.supervisor import duration

TIES_NOTED = 0.9  # a share of tied labels the summary points out


@dataclass
class RunReport:
    """Filled while a run goes: the phases hand over the agent's shared counters."""

    run_dir: Path
    env_id: str
    started: float = field(default_factory=time.monotonic)
    agent_stats: object | None = None  # a2c.config.A2CStats of the phase that ran last
    page: object | None = None  # the labelling page: with several people, their live agreement

    def summary(self, exit_status: int, prefs_path: Path | None, trained: bool,
                watch_cmd: str | None = None, resume_cmd: str | None = None,
                how: str | None = None, next_cmd: str | None = None) -> str:
        """The lines to print at the end. `trained`: a policy learned (its return is shown);
        `watch_cmd`, `resume_cmd`, `next_cmd`: how to watch it, how to continue the run and the
        next step that builds on it (None: no line); `how`: how the run ended, in place of the
        exit status's words."""
        from envs.scores import reference_scores
        from launch.stopping import how_it_ended

        rows = [("run directory", str(self.run_dir)),
                ("wall-clock", duration(time.monotonic() - self.started) + _which_start(self.run_dir))]
        stats = self.agent_stats
        if stats is not None:
            rows.append(("agent steps", f"{stats.timesteps.value:,}"))
        if prefs_path is not None and prefs_path.is_file():
            rows.append(("labels", _labels_text(prefs_path)))
            live = [s.removeprefix("agreement ") for s in
                    (self.page.status() if getattr(self.page, "labellers", None) else ())
                    if s.startswith("agreement ")]
            rows += _labellers_rows(prefs_path, live[0] if live else None)
        if stats is not None and trained:
            ret = stats.recent_return.value
            refs = ", ".join(f"{k} {v:g}" for k, v in reference_scores(self.env_id).items())
            shown = "- (no episode ended)" if ret != ret else (
                f"{ret:.1f} (mean of the last 100 episodes" + (f"; {refs})" if refs else ")"))
            rows.append(("true return", shown))
            if stats.dead_since.value >= 0:
                probe = shlex.quote(str(self.run_dir))
                rows.append(("policy network", f"dead at every check since "
                             f"{stats.dead_since.value:,} agent steps: a layer with no unit "
                             "firing on the last rollout's screens cannot learn again "
                             f"(python -m experiments.probe_policy {probe})"))
            if stats.revivals.value:
                rows.append(("revived", f"{stats.revivals.value} time"
                             f"{'s' if stats.revivals.value > 1 else ''} from a live checkpoint "
                             "after its policy died (--revive_dead_policy)"))
        lines = [f"run {how or how_it_ended(exit_status)}"]
        width = max(len(k) for k, _ in rows)
        lines += [f"  {k:<{width}}  {v}" for k, v in rows]
        if watch_cmd:
            lines.append(f"  watch the policy:  {watch_cmd}")
        tb = shlex.quote(str(self.run_dir / "tb"))
        lines.append(f"  see the curves:    tensorboard --logdir {tb}")
        if resume_cmd:
            lines.append(f"  resume:            {resume_cmd}")
        if next_cmd:
            lines.append(f"  next step:         {next_cmd}")
        return "\n".join(lines)


def _which_start(run_dir: Path) -> str:
    """" (start 5 of the run)" for a resumed run, whose wall-clock counts this start alone; ""
    for a first start. Each start appends a line to the run's machines file."""
    from launch.rundir import MACHINES_FILE

    try:
        starts = len((run_dir / MACHINES_FILE).read_text().splitlines())
    except OSError:
        return ""
    return f" (start {starts} of the run)" if starts > 1 else ""


def _labels_text(prefs_path: Path) -> str:
    """The labels stored and their share of ties, which teach r̂ nothing of which clip is better:
    where nearly all are ties, it says how few the others are."""
    from pref_interface.store import PreferenceStore

    with PreferenceStore(str(prefs_path), create=False) as store:
        ties, n = store.ties_and_total()
    text = f"{n:,} in {prefs_path.name}"
    if n:
        text += f" ({ties / n:.0%} ties" + (
            f"; r̂ learns which clip is better from the other {n - ties:,}"
            if ties >= TIES_NOTED * n else "") + ")"
    return text


def _labellers_rows(prefs_path: Path, live: str | None = None) -> list[tuple[str, str]]:
    """Where people are named on the labels: how many each gave, and how well they agreed over
    the whole store (on the pairs two people labelled, and with the ensemble's answer kept with
    each label), and as the page counted it since this start (`live`: its answers "incomparable"
    too, which are not stored)."""
    from pref_interface.labellers.team import stored_agreement
    from pref_interface.store import PreferenceStore

    with PreferenceStore(prefs_path, create=False) as store:
        counts = store.labellers()
        if not any(name is not None for name in counts):
            return []
        agreement = stored_agreement(store.iter_latest(len(store))).described()
    rows = [("labellers", ", ".join(f"{name or 'unnamed'} {n:,}" for name, n in
                                     sorted(counts.items(), key=lambda kv: -kv[1])))]
    return (rows + ([("agreement", agreement)] if agreement else [])
            + ([("this start", live)] if live else []))
