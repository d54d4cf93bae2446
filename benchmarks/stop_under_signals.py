#!/usr/bin/env python3
"""Stop a small preference run with a signal at random moments, many times, and count the stops
that were not clean.

    python -m benchmarks.stop_under_signals --tries 30            # run.py, SIGTERM to the group
    python -m benchmarks.stop_under_signals --tries 10 --wrapper  # the gymnasium wrapper
    python -m benchmarks.stop_under_signals --tries 10 --kill_child a2c  # SIGKILL a child

Each try starts `run.py train_policy_with_preferences MovingDotNoFrameskip-v0` with a few labels
(or a script stepping `PreferenceVecEnv`), waits for a phase (gather, pretrain, train), then a
random 0 to `--max_delay_s` seconds, and sends the signal. A clean stop: the main process exits
with the documented status within STOP_LIMIT_S and prints its summary, no process of the run is
left nor anything in /dev/shm that its processes were seen mapping (their maps are read every
50 ms while it runs), no resource warning is printed, and in training run.py's policy checkpoint
is written. Prints one line per try and the counts per phase.
"""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from runtime.script_args import ScriptParser, first_paragraph

ROOT = Path(__file__).resolve().parent.parent
STOP_LIMIT_S = 15.0  # every process of the run gone within this many seconds
PHASES = ("gather", "pretrain", "train")
# The phase that a line of stderr starting so announces (in a log, not a terminal: "agent steps"
# starts the training's progress line, printed as A2C starts; "steps from" is the wrapper script's).
PHASE_MARKS = {"gathering": "gather", "pretraining the reward predictor": "pretrain",
               "agent steps ": "train", "steps from here on": "train"}
SMALL_FLAGS = ["--synthetic_prefs", "--n_initial_prefs", "40", "--million_timesteps", "1",
               "--n_envs", "4", "--max_clips", "100"]
# Pretraining epochs: enough for a moment to stop it in, or few on the way to training.
EPOCHS = {"pretrain": 40, "gather": 3, "train": 3}
CHILD_NAMES = {"a2c": "a2c", "labelling": "labelling",
               "reward_predictor": "reward_predicto"}  # as /proc/PID/comm shows them (15 bytes)

WRAPPER_SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np
    from envs.gym_vector import GymVectorEnv
    from launch.preference_env import PreferenceVecEnv

    if __name__ == "__main__":
        env = PreferenceVecEnv(GymVectorEnv("MovingDotNoFrameskip-v0", 4), log_dir={log_dir!r},
                               synthetic_prefs=True, n_initial_prefs=40, n_initial_epochs={epochs},
                               max_clips=100)
        env.reset(seed=0)
        print("steps from here on: the caller's loop", file=sys.stderr, flush=True)
        rng = np.random.default_rng(0)
        while True:
            env.step(rng.integers(0, 5, size=4))
""")


@dataclass
class Try:
    phase: str
    delay_s: float
    how: str  # "SIGTERM to the group", "SIGKILL to a2c", ...
    exit_status: int | None = None
    stop_s: float = float("nan")  # from the signal to the last process gone
    left: list[str] = field(default_factory=list)  # processes of the run still alive
    shm_left: list[str] = field(default_factory=list)
    stderr: str = ""
    work_saved: bool = True  # run.py in training: the policy's checkpoint was written at the stop

    @property
    def summary_printed(self) -> bool:
        return "\nrun stopped" in self.stderr

    @property
    def warned(self) -> bool:  # e.g. multiprocessing's "leaked semaphore objects"
        return "resource_tracker" in self.stderr or "leaked" in self.stderr

    @property
    def clean(self) -> bool:
        return (self.exit_status is not None and not self.left and not self.shm_left
                and self.stop_s <= STOP_LIMIT_S and self.summary_printed and not self.warned
                and self.work_saved)


def shm_entries() -> set[str]:
    try:
        return set(os.listdir("/dev/shm"))
    except OSError:
        return set()


def shm_inodes(pids: list[int]) -> set[int]:
    """The inodes of the /dev/shm files these processes have mapped. By inode, not name: a
    semaphore is mapped under a temporary name, then given its own."""
    inodes = set()
    for pid in pids:
        try:
            maps = Path(f"/proc/{pid}/maps").read_text()
        except OSError:
            continue
        # address perms offset dev inode path
        inodes.update(int(line.split()[4]) for line in maps.splitlines() if " /dev/shm/" in line)
    return inodes


def shm_left(before: set[str], made: set[int]) -> list[str]:
    """What appeared in /dev/shm since `before` that the run's processes had mapped (`made`):
    what it left behind. Entries of other runs beside it do not count."""
    left = []
    for name in sorted(shm_entries() - before):
        try:
            if os.stat(f"/dev/shm/{name}").st_ino in made:
                left.append(name)
        except OSError:  # unlinked since it was listed
            pass
    return left


def group_processes(pgid: int) -> list[str]:
    """Live (not zombie) processes of a process group, as 'pid comm'."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid pgrp ...: comm may hold spaces, so split after its ')'.
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        state, _, pgrp = stat[stat.rindex(")") + 2:].split()[:3]
        if int(pgrp) == pgid and state != "Z":
            out.append(f"{pid} {comm}")
    return out


def child_pid(pgid: int, name: str) -> int | None:
    comm = CHILD_NAMES.get(name, name)
    for entry in group_processes(pgid):
        pid, c = entry.split(" ", 1)
        if c == comm:
            return int(pid)
    return None


class RunUnderTest:
    """A run started in its own process group, its stderr read by a thread."""

    def __init__(self, workdir: Path, wrapper: bool = False, epochs: int = 3):
        log_dir = workdir / "run"
        if wrapper:
            script = workdir / "train_with_wrapper.py"
            script.write_text(WRAPPER_SCRIPT.format(log_dir=str(log_dir),
                                                    epochs=epochs))
            cmd = [sys.executable, str(script)]
        else:
            cmd = [sys.executable, "run.py", "train_policy_with_preferences",
                   "MovingDotNoFrameskip-v0", *SMALL_FLAGS, "--n_initial_epochs", str(epochs),
                   "--log_dir", str(log_dir)]
        self.log_dir = log_dir
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True)
        self.pgid = self.proc.pid
        self.made: set[int] = set()  # /dev/shm inodes its processes mapped (`look`)
        self.lines: list[str] = []
        self.phase: str | None = None
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stderr:
            self.lines.append(line)
            for mark, phase in PHASE_MARKS.items():
                if line.startswith(mark):
                    self.phase = phase

    def look(self) -> list[str]:
        """Its live processes; what they have mapped in /dev/shm is added to `made`."""
        alive = group_processes(self.pgid)
        self.made |= shm_inodes([int(entry.split(" ", 1)[0]) for entry in alive])
        return alive

    def wait_for(self, phase: str, timeout_s: float = 120.0) -> bool:
        order = PHASES.index(phase)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self.proc.poll() is None:
            self.look()
            if self.phase is not None and PHASES.index(self.phase) >= order:
                return self.phase == phase
            time.sleep(0.05)
        return False

    def finish(self, t_signal: float, shm_before: set[str], result: Try) -> Try:
        """Wait for the run to end (STOP_LIMIT_S at most, then kill what is left) and fill in
        `result`."""
        deadline = t_signal + STOP_LIMIT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None and not self.look():
                break
            time.sleep(0.05)
        result.stop_s = time.monotonic() - t_signal
        result.exit_status = self.proc.poll()
        result.left = group_processes(self.pgid)
        if result.left:
            result.stop_s = float("inf")
            os.killpg(self.pgid, signal.SIGKILL)
            self.proc.wait()
        self._reader.join(5.0)
        result.stderr = "".join(self.lines)
        time.sleep(0.2)  # the resource tracker is the last to go; it unlinks what was leaked
        result.shm_left = shm_left(shm_before, self.made)
        return result


def one_try(workdir: Path, phase: str, rng: random.Random, wrapper: bool = False,
            sig: int = signal.SIGTERM, kill_child: str | None = None,
            to_group: bool = True, max_delay_s: float = 2.0,
            child_signal: int = signal.SIGKILL) -> Try:
    """Start a run, wait for `phase` and a random moment in it, stop it, report how it went.
    The signal goes to the run's process group, or to its main process alone (`to_group=False`);
    with `kill_child`, `child_signal` (SIGKILL unless said) goes to that child alone instead."""
    shm_before = shm_entries()
    run = RunUnderTest(workdir, wrapper, EPOCHS[phase])
    delay = rng.uniform(0.0, max_delay_s)
    how = f"{signal.Signals(child_signal).name} to {kill_child}" if kill_child else (
        f"{signal.Signals(sig).name} to the " + ("group" if to_group else "main process"))
    result = Try(phase, delay, how)
    if not run.wait_for(phase):
        os.killpg(run.pgid, signal.SIGKILL)
        run.proc.wait()
        result.stderr = "".join(run.lines)
        result.left = [f"phase {phase} never came"]
        return result
    until = time.monotonic() + delay
    while time.monotonic() < until:
        run.look()
        time.sleep(min(0.05, max(0.0, until - time.monotonic())))
    run.look()
    t_signal = time.monotonic()
    if kill_child:
        pid = None
        while pid is None and time.monotonic() < t_signal + 30.0:  # until it has its name
            pid = child_pid(run.pgid, kill_child)
            time.sleep(0.02)
        t_signal = time.monotonic()
        if pid is not None:
            os.kill(pid, child_signal)
    elif to_group:
        os.killpg(run.pgid, sig)
    else:
        os.kill(run.proc.pid, sig)
    result = run.finish(t_signal, shm_before, result)
    if phase == "train" and not wrapper and not kill_child:
        from a2c.config import checkpoints

        result.work_saved = bool(checkpoints(run.log_dir / "policy"))
    return result


def main(argv: list[str] | None = None) -> int:
    p = ScriptParser(description=first_paragraph(__doc__))
    p.add_argument("--tries", type=int, default=30, help="runs started and stopped")
    p.add_argument("--phases", nargs="+", choices=PHASES, default=list(PHASES),
                   help="the phases the tries stop in, in turn")
    p.add_argument("--signal", default="SIGTERM", choices=["SIGTERM", "SIGHUP", "SIGINT"],
                   help="the stop signal sent")
    p.add_argument("--wrapper", action="store_true", help="stop a script using PreferenceVecEnv")
    p.add_argument("--main_only", action="store_true",
                   help="send the signal to the main process alone, not the whole group")
    p.add_argument("--kill_child", choices=sorted(CHILD_NAMES),
                   help="SIGKILL this child instead (in the train phase)")
    p.add_argument("--max_delay_s", type=float, default=2.0,
                   help="the signal comes a random 0 to this many seconds into the phase")
    p.add_argument("--seed", type=int, default=0, help="seed of the random delays")
    p.add_argument("--workdir", default="/tmp/stop_under_signals",
                   help="where each try's run directory goes")
    a = p.parse_args(argv)
    rng = random.Random(a.seed)
    counts: dict[str, list[Try]] = {}
    for k in range(a.tries):
        phase = "train" if a.kill_child else a.phases[k % len(a.phases)]
        workdir = Path(a.workdir) / f"try{k}"
        subprocess.run(["rm", "-rf", str(workdir)], check=True)
        workdir.mkdir(parents=True)
        t = one_try(workdir, phase, rng, a.wrapper, signal.Signals[a.signal], a.kill_child,
                    to_group=not a.main_only, max_delay_s=a.max_delay_s)
        counts.setdefault(phase, []).append(t)
        print(f"try {k}: {t.how} in {phase} after {t.delay_s:.1f} s: "
              f"{'clean' if t.clean else 'NOT CLEAN'}, status {t.exit_status}, "
              f"stopped in {t.stop_s:.1f} s, processes left {len(t.left)}, "
              f"/dev/shm left {len(t.shm_left)}, summary {'yes' if t.summary_printed else 'NO'}"
              + ("" if t.work_saved else ", policy NOT SAVED")
              + (", resource warning" if t.warned else ""), flush=True)
        if not t.clean:
            print(textwrap.indent(t.stderr[-2000:], "    | "), flush=True)
            for entry in t.left + t.shm_left:
                print(f"    left: {entry}", flush=True)
    print("\n| phase | tries | clean | slowest stop (s) |\n|---|---|---|---|")
    for phase, tries in counts.items():
        print(f"| {phase} | {len(tries)} | {sum(t.clean for t in tries)} | "
              f"{max(t.stop_s for t in tries):.1f} |")
    return 0 if all(t.clean for ts in counts.values() for t in ts) else 1


if __name__ == "__main__":
    sys.exit(main())
