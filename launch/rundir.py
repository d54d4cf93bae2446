"""A checked run (`Run`: its settings and what follows from them) and its directory: the names of
what it holds, and its creation with the command and settings recorded."""
from __future__ import annotations

import errno
import fcntl
import json
import os
import shlex
import shutil
import socket
import sys
import tempfile
import time
from datetime import datetime, timezone
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runtime.outputs import write_json

if TYPE_CHECKING:
    from launch.settings import Settings

SETTINGS_FILE = "settings.json"  # every setting of a run as it last ran: a run directory has one
PREFS_FILE = "prefs.sqlite"  # a run's label store
PREDICTOR_FILE = "reward_predictor.pt"  # a run's predictor checkpoint, under reward_predictor/
COMMAND_FILE = "command.txt"  # one line per start: the exact command
MACHINES_FILE = "machines.txt"  # one line per start: when, the processor, the devices
LOCK_FILE = "run.lock"  # locked (flock) by the process whose run works in the directory
# A wrapped agent's steps, episodes and latest returns (launch/preference_env.py), for a resume.
AGENT_PROGRESS_FILE = "agent_progress.json"
# The pretraining epochs the predictor has done, under reward_predictor/, for a resume.
PRETRAINING_FILE = "pretraining.json"
POLICY_DIR = "policy"  # A2C's policy checkpoints
# A run through examples.ppo: PPO's network as one of our policy weights files (Atari games).
PPO_POLICY_FILE = "ppo_policy.pt"


def is_run_dir(path: Path) -> bool:
    """Whether `path` is a run's directory: it holds the run's settings."""
    return (path / SETTINGS_FILE).is_file()


def newest_policy(run_dir: Path) -> Path:
    """Where a run's newest policy is to be played from: the weights file a run through
    examples.ppo keeps, else A2C's checkpoint directory (`a2c.checkpoint.load_policy_weights`
    takes either)."""
    ppo = run_dir / PPO_POLICY_FILE
    return ppo if ppo.is_file() else run_dir / POLICY_DIR


def playable_policy(path: Path) -> Path:
    """Where a policy argument's policy is: a run directory's newest (`newest_policy`), else the
    path itself (a checkpoint directory, a checkpoint or a weights file)."""
    return newest_policy(path) if is_run_dir(path) else path


def saved_settings(run_dir: Path) -> dict[str, Any]:
    """A run's settings as it saved them; ValueError (one line) where the directory holds none
    that can be read. `launch.cli.load_settings` gives them as today's `Settings`."""
    if not run_dir.exists():
        raise ValueError(f"{run_dir} does not exist")
    if not is_run_dir(run_dir):
        raise ValueError(f"{run_dir} is not a run directory: no {SETTINGS_FILE} there")
    try:
        saved = json.loads((run_dir / SETTINGS_FILE).read_text())
    except (OSError, ValueError):
        saved = None
    if not isinstance(saved, dict):
        raise ValueError(f"{run_dir}: {SETTINGS_FILE} is damaged")
    return saved


def epochs_pretrained(run_dir: Path) -> int:
    """The pretraining epochs a run directory's predictor has done (0 before any)."""
    path = Path(run_dir) / "reward_predictor" / PRETRAINING_FILE
    return json.loads(path.read_text())["epochs_done"] if path.is_file() else 0


def record_epochs_pretrained(run_dir: Path, epochs: int) -> None:
    """Note that the run directory's predictor has done `epochs` pretraining epochs."""
    (Path(run_dir) / "reward_predictor").mkdir(exist_ok=True)
    write_json(Path(run_dir) / "reward_predictor" / PRETRAINING_FILE, {"epochs_done": epochs})


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
    idle_flags: list[str] = field(default_factory=list)  # given without what they work with

    @property
    def labels_by_person(self) -> bool:
        """True when this run asks a person for labels, and so reads the terminal."""
        s = self.settings
        return (s.mode in ("gather_initial_prefs", "train_policy_with_preferences")
                and not s.synthetic_prefs and not s.frozen_reward_predictor)


class RunDirBusy(Exception):
    """The run directory is held by another process: its run still goes, or still saves."""


TAKE_TRIES = 5  # a holder check (`run_dir_holder`) holds the lock for an instant: try again


class RunDirLock:
    """A run directory taken by this process for its run, so that a second run in it (a
    `--resume` while the run still goes or still saves its work) is refused. Released by
    `release()`, or when the process ends however it ends (the kernel drops a dead process's
    flock). On a filesystem without flock the directory goes unguarded; on one that keeps a lost
    machine's locks (NFS), deleting the lock file frees it."""

    def __init__(self, run_dir: Path) -> None:
        self._file = open(run_dir / LOCK_FILE, "a+")
        for attempt in range(TAKE_TRIES):
            try:
                fcntl.flock(self._file, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if attempt == TAKE_TRIES - 1:
                    self._file.seek(0)
                    holder = self._file.read().strip() or "another process"
                    self._file.close()
                    raise RunDirBusy(busy_message(run_dir, holder)) from None
                time.sleep(0.1)
            except OSError:  # no flock here (e.g. ENOLCK, EOPNOTSUPP): run unguarded
                break
        self._file.truncate(0)
        self._file.write(f"pid {os.getpid()} on {socket.gethostname()}\n")
        self._file.flush()

    def fileno(self) -> int:
        """The lock's descriptor: a child holding a duplicate holds the lock too."""
        return self._file.fileno()

    def release(self) -> None:
        self._file.close()


def busy_message(run_dir: Path, holder: str) -> str:
    return (f"{run_dir} is in use by {holder}: a run still going or saving there; stop it "
            f"(Ctrl-C or SIGTERM) and let it end first (a machine gone for good: delete "
            f"{run_dir / LOCK_FILE})")


def run_dir_holder(run_dir: Path) -> str | None:
    """Who holds the run directory (e.g. "pid 123 on node1"), or None when no process does."""
    try:
        f = open(run_dir / LOCK_FILE)
    except FileNotFoundError:
        return None
    with f:
        try:
            fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return f.read().strip() or "another process"
        except OSError:  # no flock on this filesystem: nobody can be seen holding it
            return None
    return None


def wait_released(run_dirs: list[Path], timeout_s: float) -> list[Path]:
    """Wait (checking every second) until no process holds these run directories, or at most
    `timeout_s`; returns those still held."""
    deadline = time.monotonic() + timeout_s
    held = [d for d in run_dirs if run_dir_holder(d)]
    while held and time.monotonic() < deadline:
        time.sleep(1)
        held = [d for d in held if run_dir_holder(d)]
    return held


def make_run_dir(run: Run) -> RunDirLock:
    """Create (or, resumed, take) the run directory, held by this process until the returned
    lock is released, and record the exact command, the machine and the settings (a resumed run
    appends its command and machine and writes the flags it overrode into the settings file, so
    that the next resume keeps them). RunDirBusy when another process holds it. A new run's
    directory is filled beside its place and renamed into it, so that a stop or a full disk
    while it is made leaves no directory without settings, which neither a new run nor a
    `--resume` could take."""
    if run.resumed:
        lock = RunDirLock(run.dir)
        try:
            _record_start(run, run.dir)
        except BaseException:
            lock.release()
            raise
        return lock
    run.dir.parent.mkdir(parents=True, exist_ok=True)
    making = Path(tempfile.mkdtemp(prefix=f".{run.dir.name}.making-", dir=run.dir.parent))
    lock = RunDirLock(making)  # the lock moves with the directory
    try:
        _record_start(run, making)
        if run.dir.exists():  # made meanwhile by another process (os.rename would replace an empty one)
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(run.dir))
        os.rename(making, run.dir)
    except BaseException:
        lock.release()
        shutil.rmtree(making, ignore_errors=True)
        raise
    return lock


def _record_start(run: Run, where: Path) -> None:
    from runtime.machine import processor

    with open(where / COMMAND_FILE, "a") as f:
        f.write(shlex.join([sys.executable] + sys.argv) + "\n")
    with open(where / MACHINES_FILE, "a") as f:
        started = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        f.write(f"{started}\t{processor()}\tpolicy on {run.policy_device}, "
                f"predictor on {run.predictor_device}\n")
    write_json(where / SETTINGS_FILE, run.settings.to_json())


def load_agent_progress(run_dir: Path) -> dict[str, Any]:
    """A wrapped agent's saved progress in a run directory (`AGENT_PROGRESS_FILE`):
    `agent_steps`, `episodes` and `recent_returns`; {} for a run without one. ValueError, in one
    line, for an unreadable file."""
    path = Path(run_dir) / AGENT_PROGRESS_FILE
    try:
        done = json.loads(path.read_text())
        return {"agent_steps": int(done["agent_steps"]), "episodes": int(done["episodes"]),
                "recent_returns": [float(r) for r in done["recent_returns"]]}
    except FileNotFoundError:
        return {}
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{path} is unreadable ({type(e).__name__}: {e}); move it away to "
                         "count agent steps from 0") from None


def save_agent_progress(run_dir: Path, agent_steps: int, episodes: int,
                        recent_returns: list[float]) -> None:
    """Write a wrapped agent's progress atomically (`load_agent_progress` reads it)."""
    write_json(Path(run_dir) / AGENT_PROGRESS_FILE, {
        "agent_steps": agent_steps, "episodes": episodes, "recent_returns": recent_returns})
