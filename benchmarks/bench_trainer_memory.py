"""The reward-predictor trainer alone: its memory and step time under each malloc set-up.

Builds the trainer as a run does (`reward_predictor/process.py`, the paper's Atari predictor:
dropout 0.5, batch norm, 3 members), fills its buffer from a preference store, then trains
--steps ensemble steps, adding --new_labels labels before each (drawn from those held, so the
buffer keeps turning over) and validating every 50 steps as the trainer process does. After every
step it reads the process's RSS and its peak RSS during that step (/proc/self/status VmHWM, reset
before the step), and prints the step time's median and both maxima from step --skip on.

    .venv/bin/python -m benchmarks.bench_trainer_memory STORE [--malloc tunables|keep|default]

STORE: a `prefs.sqlite`, e.g. from `python run.py gather_initial_prefs PongNoFrameskip-v4
--synthetic_prefs --n_initial_prefs 3000 --max_pairs_per_clip 0 --log_dir G` (G/prefs.sqlite).
"""
from __future__ import annotations

import re
import sys
import time
from pathlib import Path
from types import SimpleNamespace


from benchmarks.bench_a2c import machine_header
from benchmarks.bench_reward_predictor_step import MALLOC_MODES, set_up_malloc
from runtime.script_args import ScriptParser



def memory_mb() -> tuple[float, float]:
    """(RSS, peak RSS since the last `reset_peak`) of this process, MB."""
    status = Path("/proc/self/status").read_text()

    def mb(key: str) -> float:
        return int(re.search(rf"{key}:\s+(\d+)", status).group(1)) / 1024
    return mb("VmRSS"), mb("VmHWM")


def reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")  # Linux: VmHWM starts again from VmRSS


def main() -> int:
    p = ScriptParser(description=__doc__.splitlines()[0])
    p.add_argument("store", help="a preference store (prefs.sqlite) whose latest labels fill "
                                 "the buffer")
    p.add_argument("--malloc", choices=MALLOC_MODES, default="tunables",
                   help="memory set-up: a run's trainer's (glibc tunables), that of "
                        "--reward_predictor_keep_freed_memory, or glibc's default")
    p.add_argument("--steps", type=int, default=60, help="ensemble training steps")
    p.add_argument("--skip", type=int, default=10, help="first steps left out of the figures")
    p.add_argument("--threads", type=int, default=2, help="torch threads")
    p.add_argument("--new_labels", type=int, default=4, help="labels added before each step")
    p.add_argument("--max_prefs", type=int, default=3000,
                   help="labels the trainer holds (run.py's --max_prefs)")
    a = p.parse_args()
    if not Path(a.store).is_file():
        p.error(f"no preference store at {a.store}")
    set_up_malloc(a.malloc)
    import numpy as np

    from reward_predictor import process
    from reward_predictor.config import TrainerConfig
    from runtime.scalars import Telemetry

    print(machine_header())
    config = TrainerConfig(env_kind="atari", dropout=0.5, batchnorm=True, max_prefs=a.max_prefs,
                           keep_freed_memory=a.malloc == "keep", torch_threads=a.threads)
    trainer = process._set_up(config, a.threads, a.store)
    held = trainer.held_labels()
    print(f"{trainer.n_labels} labels held; RSS {memory_mb()[0]:.0f} MB before training")
    stats = SimpleNamespace(val_accuracy=SimpleNamespace(value=float("nan")),
                            labels_received=SimpleNamespace(value=trainer.n_labels))
    rng = np.random.default_rng(0)
    times, rss, peaks = [], [], []
    for step in range(1, a.steps + 1):
        for i in rng.integers(0, len(held), a.new_labels):
            trainer.add(held[i])
        reset_peak()
        start = time.perf_counter()
        trainer.train_steps(1)
        if step % config.validate_every_steps == 0:
            process._validate(trainer, stats, config.val_max_pairs, Telemetry(None))
        times.append(time.perf_counter() - start)
        now, peak = memory_mb()
        rss.append(now)
        peaks.append(peak)
        if step % 10 == 0:
            print(f"step {step}: {times[-1] * 1000:.0f} ms, RSS {now:.0f} MB, peak in the step "
                  f"{peak:.0f} MB", flush=True)
    keep = slice(a.skip, None)
    print(f"malloc {a.malloc}: step (3 members) median {np.median(times[keep]) * 1000:.0f} ms; "
          f"RSS after a step at most {max(rss[keep]):.0f} MB; peak within a step at most "
          f"{max(peaks[keep]):.0f} MB (steps {a.skip + 1}-{a.steps}, validation every "
          f"{config.validate_every_steps} included)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
