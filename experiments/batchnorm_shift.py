#!/usr/bin/env python3
"""Does a saved predictor compute in eval mode (what the agent gets) what it was fitted as?

    python -m experiments.batchnorm_shift RUN_DIR [RUN_DIR ...] [--clips 128]
    python -m experiments.batchnorm_shift RUN_DIR --save OUT.pt   # also write the mended predictor

For each member it prints the accuracy on the run's validation labels (ties left out) with the
batch-norm statistics as saved, and again after they are re-taken from a dropout-free pass over
`--clips` training clips. Checkpoints written before the trainer took them without dropout
(docs/experiments.md, "Batch norm statistics that lagged the weights") can differ a lot; newer
ones should not. `--save` writes a copy of one run's predictor with the re-taken statistics, which
`run.py --load_reward_predictor_ckpt_dir OUT.pt --frozen_reward_predictor` can give to A2C.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

from launch.rundir import is_run_dir
from runtime.script_args import ScriptParser



def shift(run_dir: Path, n_clips: int, seed: int = 0, save: str | None = None) -> dict:
    """{'before': [...], 'after': [...]} per-member validation accuracies (the ensemble's last),
    plus the label counts; with `save`, the mended predictor is written there."""
    from launch.configs import trainer_config
    from launch.rundir import PREDICTOR_FILE
    from launch.cli import saved_run
    from reward_predictor.ensemble import clip_returns, take_batchnorm_statistics
    from reward_predictor.process import build_ensemble, load_prefs
    from reward_predictor.trainer import RewardPredictorTrainer

    config = trainer_config(saved_run(run_dir), load_from=None, save=False)
    trainer = RewardPredictorTrainer(build_ensemble(config))
    trainer.load(str(run_dir / "reward_predictor" / PREDICTOR_FILE))
    ensemble = trainer.ensemble
    prefs = list(load_prefs(str(run_dir / "prefs.sqlite"), config.max_prefs))
    val = [p for p in prefs if p.is_validation]
    train = [s for p in prefs if not p.is_validation for s in (p.left, p.right)]
    if not val or not train:
        raise ValueError(f"{run_dir}: needs both training and validation labels")
    rng = np.random.default_rng(seed)
    clips = [train[i] for i in rng.choice(len(train), min(n_clips, len(train)), replace=False)]

    def accuracies() -> list[float]:
        out = ensemble.evaluate(val)
        return [*out["member_accuracy"], out["accuracy"]]

    before = accuracies()
    for net in ensemble.members:
        take_batchnorm_statistics(net, clips)
    if save:  # the reward normalisers were fitted to the old outputs: fit them to the new ones
        for net, norm in zip(ensemble.members, ensemble.normalisers):
            net.eval()
            with torch.no_grad():
                raw = clip_returns(net, clips)[1].float()
            norm.reset()
            norm.update(raw)
        trainer.save(save)
    return {"before": before, "after": accuracies(), "n_val": len(val),
            "n_decisive": sum(p.mu != 0.5 for p in val)}


def main(argv: list[str] | None = None) -> int:
    p = ScriptParser(description=__doc__.splitlines()[0])
    p.add_argument("run_dirs", nargs="+", help="run directories with a saved reward predictor")
    p.add_argument("--clips", type=int, default=128,
                   help="training clips the statistics are re-taken from")
    p.add_argument("--save", metavar="OUT.pt",
                   help="write the predictor with re-taken statistics here (one RUN_DIR only)")
    a = p.parse_args(argv)
    if a.clips <= 0:
        p.error("--clips must be positive")
    if a.save and len(a.run_dirs) != 1:
        p.error("--save takes one RUN_DIR")
    torch.set_num_threads(1)
    from reward_predictor.trainer import CheckpointError

    for run_dir in map(Path, a.run_dirs):
        if not is_run_dir(run_dir) or \
                not (run_dir / "reward_predictor" / "reward_predictor.pt").is_file():
            p.error(f"{run_dir} is not a run directory with a saved reward predictor")
        try:
            r = shift(run_dir, a.clips, save=a.save)
        except (CheckpointError, ValueError) as e:
            p.error(str(e))
        names = [f"member {m}" for m in range(len(r["before"]) - 1)] + ["ensemble"]
        print(f"{run_dir}: validation accuracy on {r['n_decisive']} of {r['n_val']} labels "
              "(ties left out)")
        for name, b, af in zip(names, r["before"], r["after"]):
            print(f"  {name:9s} as saved {b:.2f}   statistics re-taken without dropout {af:.2f}")
    if a.save:
        print(f"wrote {a.save}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
