"""A long run's record in one small file, kept in the repository (`docs/run_records/NAME.json`),
so that the reproduction's table and figure survive a machine that loses `~/runs`.

A record holds what `experiments.reproduction` reads: the run's seed, its commands and machines,
every episode's true return with the agent steps and seconds of training at its end (in Enduro
also its share of steps level with another car, where the run recorded it), and the number of
labels against agent steps. It does not hold the policy (see `models/`).

    python -m experiments.reproduction Pong --prefs ~/runs/pong_prefs_seed1 \\
        --save_records docs/run_records
"""
from __future__ import annotations

import argparse
import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from a2c.config import ALONGSIDE_SHARE_TAG, checkpoint_steps, checkpoints
from experiments.runlog import RunLog, count_at
from launch.rundir import (COMMAND_FILE, MACHINES_FILE, POLICY_DIR, SETTINGS_FILE,
                           is_run_dir, saved_settings)
from launch.settings import build_parser, flag_fields

FORMAT = 1
# Flags that say where a run is kept, how often it saves and what it runs on, not what it learns:
# the "run" group's (seed, directories, threads, device) and these.
KEEPING = ("policy_ckpt_interval", "policy_ckpts_kept", "render_episodes",
           "reward_predictor_ckpt_interval", "reward_predictor_threads",
           "reward_predictor_device")
# The programs that start runs, by the end of the script's path in a recorded command, and how
# a user types each; examples.ppo takes run.py's flags after the game, without run.py's mode.
PROGRAMS = {"run.py": "python run.py", "examples/ppo.py": "python -m examples.ppo"}


def as_typed(text: str) -> str:
    """A recorded command or path as a user types it: the home directory the runs were made in
    (/root) as ~."""
    return text.replace("/root/", "~/")


@dataclass
class RunRecord:
    name: str  # the run directory's name
    seed: int | None
    env_id: str | None
    commands: list[str]  # command.txt: the start, then one line per resume
    machines: list[str]  # machines.txt: "UTC time<TAB>processor<TAB>devices" per start
    agent_steps: float
    training_s: float  # seconds of policy training, stops not counted
    episode_steps: np.ndarray  # agent steps at each episode's end
    episode_returns: np.ndarray  # its true return
    episode_training_s: np.ndarray  # seconds of training at its end
    label_steps: np.ndarray  # agent steps at which the labels in the store were counted
    label_totals: np.ndarray
    settings: dict[str, Any] | None = None  # settings.json: every setting, as the run last ran
    # Enduro: each episode's share of steps level with another car (charts/alongside_share), and
    # the agent steps at its end; None where the run did not record it
    alongside_steps: np.ndarray | None = None
    alongside_shares: np.ndarray | None = None
    # Whether it reached its target (--million_timesteps) by its latest policy checkpoint; None
    # where that is not known (a record saved without it, or no A2C checkpoint yet).
    finished: bool | None = None

    @classmethod
    def read(cls, path: Path) -> "RunRecord":
        """From a run directory or a saved record (`.json`); ValueError with a one-line reason if
        `path` is neither."""
        if path.suffix == ".json" and path.is_file():
            return cls.load(path)
        if not path.exists():
            raise ValueError(f"{path} does not exist")
        if not is_run_dir(path):
            raise ValueError(f"{path} is neither a run directory (no {SETTINGS_FILE}) "
                             "nor a run record (.json)")
        if not (path / "tb").is_dir():
            raise ValueError(f"{path} has no TensorBoard logs (tb/): nothing to read")
        return cls.from_run_dir(path)

    @classmethod
    def from_run_dir(cls, path: Path) -> "RunRecord":
        settings = saved_settings(path)
        log = RunLog(path)
        steps, returns = log.returns()
        label_steps, label_totals = log.labels()
        share_steps, shares = log.curve(ALONGSIDE_SHARE_TAG)
        last_step = log.last_step()
        return cls(name=path.name, seed=settings.get("seed"), env_id=settings.get("env_id"),
                   commands=_lines(path / COMMAND_FILE), machines=_lines(path / MACHINES_FILE),
                   agent_steps=float(last_step), training_s=log.wall_clock_s(),
                   episode_steps=steps, episode_returns=returns,
                   episode_training_s=log.episode_training_s(),
                   label_steps=label_steps, label_totals=label_totals, settings=settings,
                   alongside_steps=share_steps if len(share_steps) else None,
                   alongside_shares=shares if len(shares) else None,
                   finished=run_finished(path, settings))

    @classmethod
    def load(cls, path: Path) -> "RunRecord":
        try:
            d = json.loads(path.read_text())
        except ValueError as e:
            raise ValueError(f"{path}: not a run record ({e})") from None
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            raise ValueError(f"{path}: a run record of format "
                             f"{d.get('format') if isinstance(d, dict) else None}, "
                             f"this code reads {FORMAT}")
        ep, lab, along = d["episodes"], d["labels"], d.get("alongside")
        return cls(name=d["name"], seed=d["seed"], env_id=d["env_id"], commands=d["commands"],
                   machines=d["machines"], agent_steps=d["agent_steps"],
                   training_s=d["training_s"],
                   episode_steps=np.array(ep["steps"], float),
                   episode_returns=np.array(ep["returns"], float),
                   episode_training_s=np.array(ep["training_s"], float),
                   label_steps=np.array(lab["steps"], float),
                   label_totals=np.array(lab["totals"], float), settings=d.get("settings"),
                   alongside_steps=np.array(along["steps"], float) if along else None,
                   alongside_shares=np.array(along["shares"], float) if along else None,
                   finished=d.get("finished"))

    def save(self, path: Path) -> None:
        """Write the record; the label count is kept only where it changes (a few thousand
        points for a Pong run, about 100 KB in all)."""
        changed = np.flatnonzero(np.diff(self.label_totals, prepend=np.nan) != 0)
        d = {"format": FORMAT, "name": self.name, "seed": self.seed, "env_id": self.env_id,
             "commands": self.commands, "machines": self.machines,
             "agent_steps": self.agent_steps, "training_s": round(self.training_s, 1),
             "episodes": {"steps": [int(s) for s in self.episode_steps],
                          "returns": [round(float(r), 3) for r in self.episode_returns],
                          "training_s": [round(float(t)) for t in self.episode_training_s]},
             "labels": {"steps": [int(s) for s in self.label_steps[changed]],
                        "totals": [int(n) for n in self.label_totals[changed]]},
             "settings": self.settings}
        if self.finished is not None:
            d["finished"] = self.finished
        if self.alongside_shares is not None:
            d["alongside"] = {"steps": [int(s) for s in self.alongside_steps],
                              "shares": [round(float(v), 4) for v in self.alongside_shares]}
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(d, separators=(",", ":")) + "\n")

    @property
    def processors(self) -> list[str]:
        """The distinct processors the run was trained on, in order ("+ GPU" where a start put
        the policy or the predictor on one)."""
        seen: list[str] = []
        for line in self.machines:
            fields = line.split("\t")
            name = (fields[1] + (" + GPU" if "cuda" in "".join(fields[2:]) else "")
                    if len(fields) >= 2 else None)
            if name and name not in seen:
                seen.append(name)
        return seen

    @property
    def started_with(self) -> tuple[str, list[str]] | None:
        """The program that started the run as a user types it (`PROGRAMS`) and its arguments;
        None where the first command is not recorded or is not one of them."""
        try:
            words = shlex.split(self.commands[0]) if self.commands else []
        except ValueError:
            return None
        return next(((typed, words[i + 1:]) for i, word in enumerate(words)
                     for script, typed in PROGRAMS.items() if word.endswith(script)), None)

    @property
    def start_flags(self) -> dict[str, Any]:
        """The flags of the command that started the run that bear on what it learns (not the
        seed, nor where it is kept or what it runs on: `KEEPING`); {} where that command is not
        one of `PROGRAMS`' that the parser reads."""
        started = self.started_with
        if started is None:
            return {}
        typed, args = started
        if typed != PROGRAMS["run.py"]:
            args = ["train_policy_with_preferences", *args]
        try:
            given, _ = build_parser(with_defaults=False, exit_on_error=False).parse_known_args(args)
        except (ValueError, argparse.ArgumentError):
            return {}
        keeping = {f.name for f in flag_fields() if f.metadata["group"] == "run"} | set(KEEPING)
        return {k: v for k, v in vars(given).items()
                if k not in keeping and k not in ("mode", "env_id")}

    @property
    def labels(self) -> float | None:
        return float(self.label_totals[-1]) if len(self.label_totals) else None

    def labels_at(self, steps: float) -> float | None:
        """Labels in the store when A2C was at `steps` agent steps; None before the first count."""
        return count_at(self.label_steps, self.label_totals, steps)


def run_finished(path: Path, settings: dict[str, Any] | None = None) -> bool | None:
    """Whether a run directory's latest policy checkpoint is at its target (--million_timesteps);
    None with no A2C checkpoint (none saved yet, or another learner's run)."""
    target = (saved_settings(path) if settings is None else settings).get("million_timesteps")
    kept = checkpoints(path / POLICY_DIR)
    if target is None or not kept:
        return None
    from launch.cli import at_target

    return at_target(checkpoint_steps(kept[-1]), target)


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.is_file() else []
