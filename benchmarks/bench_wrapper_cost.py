#!/usr/bin/env python3
"""What the gymnasium wrapper costs the caller: agent steps/s of a vector env stepped with random
actions alone, with r̂ computed on every step in the caller's process, and inside
PreferenceVecEnv with the whole loop beside it, for each number of the caller's torch threads.

    python -m benchmarks.bench_wrapper_cost --env PongNoFrameskip-v4 --threads 1 2

The wrapper runs without the predictor's pace (A2C-like waiting would measure the trainer, not
the wrapper), after a short gathering and one pretraining epoch; steps are timed after a warm-up.
Prints one table row per case.
"""
from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from runtime.script_args import ScriptParser, first_paragraph


WARMUP_STEPS = 100


def steps_per_s(env, steps: int, reward_fn=None) -> float:
    """Vector steps with random actions; agent steps (steps x envs) per second."""
    rng = np.random.default_rng(0)
    obs, _ = env.reset(seed=0)
    n, n_actions = env.num_envs, int(env.single_action_space.n)
    t0 = 0.0
    for t in range(WARMUP_STEPS + steps):
        if t == WARMUP_STEPS:
            t0 = time.perf_counter()
        actions = rng.integers(0, n_actions, n)
        if reward_fn is not None:
            reward_fn(obs, actions)
        obs, *_ = env.step(actions)
    return steps * n / (time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> int:
    p = ScriptParser(description=first_paragraph(__doc__))
    p.add_argument("--env", default="PongNoFrameskip-v4", help="the env id")
    p.add_argument("--n_envs", type=int, default=16, help="envs of the vector env")
    p.add_argument("--steps", type=int, default=300, help="vector steps timed per case")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2],
                   help="the caller's torch threads")
    p.add_argument("--env_threads", type=int, default=1, help="ale-py's threads (0: one per core)")
    a = p.parse_args(argv)

    import torch

    from envs.gym_vector import GymVectorEnv
    from launch.cli import parse_args
    from launch.configs import trainer_config
    from launch.preference_env import PreferenceVecEnv, settings_argv
    from reward_predictor.process import build_ensemble

    def make_env():
        return GymVectorEnv(a.env, a.n_envs, seed=0, num_threads=a.env_threads)

    settings = dict(synthetic_prefs=True, n_initial_prefs=20, n_initial_epochs=1,
                    min_predictor_labels_per_step=0.0)
    print(f"{a.env}, {a.n_envs} envs, {a.steps} vector steps per case\n")
    print("| case | caller's torch threads | agent steps/s | of the env alone |")
    print("|---|---|---|---|")
    torch.set_num_threads(1)
    env = make_env()
    alone = steps_per_s(env, a.steps)
    env.close()
    print(f"| the env alone | - | {alone:,.0f} | 100% |", flush=True)
    run = parse_args(settings_argv(a.env, a.n_envs, {"log_dir": "/nonexistent", **settings}))
    ensemble = build_ensemble(trainer_config(run, load_from=None, save=False))
    ensemble.eval()
    for threads in a.threads:
        torch.set_num_threads(threads)
        env = make_env()
        rate = steps_per_s(env, a.steps, ensemble.reward)
        env.close()
        print(f"| r̂ every step, in the caller | {threads} | {rate:,.0f} | {rate / alone:.0%} |",
              flush=True)
    for threads in a.threads:
        torch.set_num_threads(threads)
        with tempfile.TemporaryDirectory() as d:
            env = PreferenceVecEnv(make_env(), log_dir=str(Path(d) / "run"), **settings)
            try:
                rate = steps_per_s(env, a.steps)
            finally:
                env.close()
        print(f"| PreferenceVecEnv, the loop beside it | {threads} | {rate:,.0f} | "
              f"{rate / alone:.0%} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
