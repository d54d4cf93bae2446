"""A checked run (`Run`: its settings and what follows from them) and its directory: the names of
what it holds, and its creation with the command and settings recorded."""
from __future__ import annotations

import json
import shlex
import sys
from datetime import datetime, timezone
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from launch.settings import Settings

PREFS_FILE = "prefs.sqlite"  # a run's label store
PREDICTOR_FILE = "reward_predictor.pt"  # a run's predictor checkpoint, under reward_predictor/
COMMAND_FILE = "command.txt"  # one line per start: the exact command
MACHINES_FILE = "machines.txt"  # one line per start: when, the processor, the devices


@dataclass
class Run:
    """A checked run: its settings and what follows from them, all computed in `resolve`."""

    settings: Settings
    dir: Path
    env_kind: str  # "moving_dot" or "atari"
    policy_device: str
    predictor_device: str
    player_kind: str | None = None  # where a person watches clips; None: nobody labels by hand
    policy_ckpt_dir: str | None = None  # the policy A2C starts from (a resumed run's own)
    reward_ckpt_path: str | None = None  # the predictor to load (a resumed run's own)
    prefs_path: str | None = None  # a label store to copy into the run (--load_prefs_dir)
    resumed: bool = False
    overrides: dict[str, Any] = field(default_factory=dict)  # flags given with --resume
    unused_flags: list[str] = field(default_factory=list)  # given, but not used by this run

    @property
    def labels_by_person(self) -> bool:
        """True when this run asks a person for labels, and so reads the terminal."""
        s = self.settings
        return (s.mode in ("gather_initial_prefs", "train_policy_with_preferences")
                and not s.synthetic_prefs and not s.frozen_reward_predictor)


def make_run_dir(run: Run) -> Path:
    """Create the run directory and record the exact command, the machine and the settings (a
    resumed run appends its command and machine and writes the flags it overrode into the
    settings file, so that the next resume keeps them)."""
    from runtime.machine import processor

    run.dir.mkdir(parents=True, exist_ok=run.resumed)
    with open(run.dir / COMMAND_FILE, "a") as f:
        f.write(shlex.join([sys.executable] + sys.argv) + "\n")
    with open(run.dir / MACHINES_FILE, "a") as f:
        started = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        f.write(f"{started}\t{processor()}\tpolicy on {run.policy_device}, "
                f"predictor on {run.predictor_device}\n")
    tmp = run.dir / "settings.json.tmp"
    tmp.write_text(json.dumps(run.settings.to_json(), indent=2) + "\n")
    tmp.replace(run.dir / "settings.json")  # never a half-written settings file
    return run.dir
