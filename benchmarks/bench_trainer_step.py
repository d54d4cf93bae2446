"""A predictor training step as the trainer takes it (a batch drawn for each member, its clips made
ready, the paper's three members stepped), on real labels from a run's store; and what a clip
costs the store.

    .venv/bin/python -m benchmarks.bench_trainer_step ~/runs/pong_prefs_seed1/prefs.sqlite
    .venv/bin/python benchmarks/bench_trainer_step.py STORE --code ../older-checkout

`--code DIR` runs it on another checkout's modules (older ones name the clip class `Segment`;
both are read), for before/after figures on one machine.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    # argparse's own: this checkout's packages must not be imported before --code's are
    p = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0].replace("\n", " "))
    p.add_argument("store", help="a run's prefs.sqlite (copy a running run's first)")
    p.add_argument("--code", default=str(Path(__file__).resolve().parent.parent),
                   help="the checkout whose code is timed (default: this one)")
    p.add_argument("--labels", type=int, default=1000, help="the store's latest labels held")
    p.add_argument("--steps", type=int, default=15, help="timed steps (after 3 untimed)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (a run's trainer has 1)")
    a = p.parse_args(argv)
    sys.path.insert(0, a.code)
    import numpy as np
    import torch

    from pref_interface import store as store_module
    from reward_predictor.config import TrainerConfig
    from reward_predictor.process import build_trainer
    encode = getattr(store_module, "encode_clip", None) or store_module.encode_segment

    torch.set_num_threads(a.threads)
    config = TrainerConfig(dropout=0.5, batchnorm=True, precision="auto")  # App. A.2's net
    with store_module.PreferenceStore(a.store, create=False) as store:
        t0 = time.perf_counter()
        prefs = store.latest(a.labels)
        t_read = time.perf_counter() - t0
    t0 = time.perf_counter()
    sizes = [len(encode(pref.left)) for pref in prefs[:200]]
    t_encode = (time.perf_counter() - t0) / len(sizes)
    trainer = build_trainer(config)
    t0 = time.perf_counter()
    for pref in prefs:
        trainer.add(pref)
    t_add = time.perf_counter() - t0
    trainer.train_steps(3)
    times = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        trainer.train_steps(1)
        times.append(time.perf_counter() - t0)
    print(f"code {a.code}")
    print(f"  a step (3 members, {a.threads} thread(s), {len(prefs):,} labels held): median "
          f"{statistics.median(times) * 1e3:.0f} ms, min {min(times) * 1e3:.0f}, max "
          f"{max(times) * 1e3:.0f} over {a.steps}")
    print(f"  {len(prefs):,} labels read {t_read:.2f} s, added to the trainer {t_add:.2f} s; "
          f"held clips {trainer.clips.nbytes / 2**20:.1f} MB")
    print(f"  a clip into the store: {t_encode * 1e3:.2f} ms, {np.mean(sizes) / 1e3:.1f} KB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
