"""A2C throughput on Atari: raw env stepping, our A2C, and stable-baselines3's A2C, in one run.

Measures, for one Atari game (default Pong) with 16 envs and the paper's A2C settings (App. A.2:
16 workers, 5 steps per update):

  (a) raw env: random actions through our `envs.make_vec_env` (ale-py's C++ vector env with
      DeepMind preprocessing and the score rows blanked);
  (b) ours: `launch.loop.run_agent` on the game's own (sign-clipped) reward;
  (c) SB3: `stable_baselines3.A2C("CnnPolicy")` with the defaults SB3 ships (n_steps 5,
      RMSprop alpha 0.99 eps 1e-5, lr 7e-4, NatureCNN), on the same ale-py vector env wrapped
      as an SB3 `VecEnv` (`AleSB3VecEnv` below) with the same ale-py settings as ours.

All rates are agent steps per second summed over envs. Each A2C measurement first runs a short
warm-up call (imports, allocator, first env resets), then the timed call. Two figures are taken
from the timed call: "loop" times the steady state between the first and the last rollout (read
through our rollout-observer hook and SB3's `on_rollout_end` callback, the same point in both
loops), "call" is the wall clock from creating the env to the end of training (for ours that
includes the final checkpoint). Ratios are printed for both; the loop ones are the headline.
With --sweep, (a) and (c) run once at --torch_threads/--env_threads and every row of ours is
compared with them.

    .venv/bin/python -m benchmarks.bench_a2c                      # Pong, the default sizes
    .venv/bin/python -m benchmarks.bench_a2c --steps 5000 --env_steps 20000   # smoke run
    .venv/bin/python -m benchmarks.bench_a2c --sweep              # ours at 4 thread settings
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch

# Run as `python -m benchmarks.bench_a2c` from the checkout.

from a2c.a2c import A2CConfig
from a2c.rollout import Rollout
from a2c.config import A2CRunConfig
from launch.loop import run_agent
from envs import make_vec_env
from envs.atari import game_from_env_id, make_ale_vector_env
from runtime.script_args import ScriptParser, first_paragraph

SWEEP_THREADS: tuple[tuple[int, int], ...] = ((1, 1), (1, 2), (2, 1), (2, 2))  # (torch, env)


@dataclass
class Rate:
    """One A2C measurement: steady-state loop rate and whole-call rate, agent steps/s."""

    loop_sps: float
    call_sps: float
    steps: int


class RolloutTimer:
    """Notes when each rollout ends; the rate between the first and last is the steady state."""

    def __init__(self, steps_per_rollout: int):
        self.steps_per_rollout = steps_per_rollout
        self.first: float | None = None
        self.last: float | None = None
        self.count = 0

    def tick(self) -> None:
        now = time.perf_counter()
        if self.first is None:
            self.first = now
        self.last = now
        self.count += 1

    def __call__(self, rollout: Rollout) -> None:  # our RolloutObserver protocol
        self.tick()

    def steps_per_sec(self) -> float:
        if self.count < 2:
            return float("nan")
        return (self.count - 1) * self.steps_per_rollout / (self.last - self.first)


# --------------------------------------------------------------------------------------------
# (a) raw env stepping
# --------------------------------------------------------------------------------------------

def bench_raw_env(env_id: str, num_envs: int, steps: int, env_threads: int, seed: int) -> float:
    """Agent steps/s of our vector env under uniformly random actions."""
    env = make_vec_env(env_id, num_envs, seed=seed, num_threads=env_threads)
    try:
        env.reset()
        rng = np.random.default_rng(seed)
        iters = max(1, steps // num_envs)
        actions = rng.integers(0, env.num_actions, size=(iters + 20, num_envs), dtype=np.int64)
        for a in actions[:20]:  # warm-up
            env.step(a)
        start = time.perf_counter()
        for a in actions[20:]:
            env.step(a)
        return iters * num_envs / (time.perf_counter() - start)
    finally:
        env.close()


# --------------------------------------------------------------------------------------------
# (b) our A2C
# --------------------------------------------------------------------------------------------

def _train_ours(env_id: str, num_envs: int, steps: int, torch_threads: int, env_threads: int,
                seed: int, workdir: str) -> Rate:
    a2c_config = A2CConfig(n_envs=num_envs)
    timer = RolloutTimer(a2c_config.n_steps * num_envs)
    config = A2CRunConfig(env_id, total_timesteps=steps, a2c=a2c_config, seed=seed,
                          ckpt_dir=os.path.join(workdir, "policy"), torch_threads=torch_threads,
                          env_threads=env_threads)
    start = time.perf_counter()
    reached = run_agent(config, log_dir=os.path.join(workdir, "logs"), make_observers=lambda n: [timer])
    call = time.perf_counter() - start
    return Rate(timer.steps_per_sec(), reached / call, reached)


def bench_ours(env_id: str, num_envs: int, steps: int, warmup_steps: int, torch_threads: int,
               env_threads: int, seed: int) -> Rate:
    """Our A2C on the game's reward: a warm-up call, then the timed call."""
    with tempfile.TemporaryDirectory(prefix="bench_a2c_") as workdir:
        if warmup_steps > 0:
            _train_ours(env_id, num_envs, warmup_steps, torch_threads, env_threads, seed,
                        os.path.join(workdir, "warmup"))
        return _train_ours(env_id, num_envs, steps, torch_threads, env_threads, seed,
                           os.path.join(workdir, "timed"))


# --------------------------------------------------------------------------------------------
# (c) stable-baselines3's A2C on the same ale-py vector env
# --------------------------------------------------------------------------------------------

def make_sb3_vec_env(game: str, num_envs: int, seed: int, env_threads: int) -> Any:
    """ale-py's AtariVectorEnv with envs/atari.py's settings, as an SB3 VecEnv
    (examples/sb3_vec_env.py). ale-py clips the rewards (SB3 trains on what it is given) and the
    score rows are not blanked: neither changes the work done by the agent."""
    from examples.sb3_vec_env import SB3VecEnv

    return SB3VecEnv(make_ale_vector_env(game, num_envs, env_threads, reward_clipping=True), seed)


def bench_sb3(env_id: str, num_envs: int, steps: int, warmup_steps: int, torch_threads: int,
              env_threads: int, seed: int) -> Rate:
    """SB3's A2C with its shipped defaults: a warm-up run, then the timed run (env, model, learn)."""
    from stable_baselines3 import A2C as SB3A2C
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.vec_env import VecTransposeImage, is_vecenv_wrapped

    class RolloutEndCallback(BaseCallback):
        """Ticks the timer where our rollout observers run: after collecting, before training."""

        def __init__(self, timer: RolloutTimer):
            super().__init__()
            self.timer = timer

        def _on_step(self) -> bool:
            return True

        def _on_rollout_end(self) -> None:
            self.timer.tick()

    game = game_from_env_id(env_id)
    if game is None:
        raise SystemExit(f"{env_id!r} is not an ALE game; the SB3 comparison needs one")
    torch.set_num_threads(torch_threads)

    def run(total: int, timer: RolloutTimer | None) -> int:
        torch.manual_seed(seed)
        env = make_sb3_vec_env(game, num_envs, seed, env_threads)
        try:
            model = SB3A2C("CnnPolicy", env, seed=seed, device="cpu", verbose=0)
            # uint8 (4, 84, 84) is channel-first already: SB3 must not transpose it, and must
            # scale it to [0, 1] itself, as our policy does.
            assert model.observation_space.shape == (4, 84, 84), model.observation_space
            assert not is_vecenv_wrapped(model.get_env(), VecTransposeImage)
            assert model.policy.normalize_images
            assert model.n_steps == 5 and model.n_envs == num_envs
            model.learn(total, callback=RolloutEndCallback(timer) if timer else None)
            return model.num_timesteps
        finally:
            env.close()

    if warmup_steps > 0:
        run(warmup_steps, None)
    timer = RolloutTimer(5 * num_envs)  # SB3's default n_steps, asserted in run()
    # Like ours, the timed call builds its env and network first.
    start = time.perf_counter()
    reached = run(steps, timer)
    call = time.perf_counter() - start
    return Rate(timer.steps_per_sec(), reached / call, reached)


# --------------------------------------------------------------------------------------------
# report
# --------------------------------------------------------------------------------------------

def machine_header() -> str:
    """Where the figures come from: cores, CPU model, library versions, load."""
    import ale_py
    try:
        import stable_baselines3
        sb3_version = stable_baselines3.__version__
    except ImportError:
        sb3_version = "not installed"
    from runtime.machine import processor
    from runtime.precision import bf16_is_fast
    return (f"machine: {processor()}, native bf16 (AVX512-BF16): "
            f"{'yes' if bf16_is_fast() else 'no'}, {platform.platform()}\n"
            f"python {platform.python_version()}, torch {torch.__version__}, "
            f"ale-py {ale_py.__version__}, stable-baselines3 {sb3_version}\n"
            f"load average at start: {_load()}")


def _load() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = ScriptParser(description=first_paragraph(__doc__),
                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--env_id", default="PongNoFrameskip-v4", help="an ALE NoFrameskip-v4 id")
    p.add_argument("--num_envs", type=int, default=16, help="envs stepped together (App. A.2: 16)")
    p.add_argument("--steps", type=int, default=100_000,
                   help="agent steps (summed over envs) per timed A2C measurement")
    p.add_argument("--warmup_steps", type=int, default=2_000,
                   help="agent steps of the untimed warm-up call before each A2C measurement")
    p.add_argument("--env_steps", type=int, default=100_000,
                   help="agent steps for the raw env measurement")
    p.add_argument("--torch_threads", type=int, default=1,
                   help="torch threads (torch.set_num_threads)")
    p.add_argument("--env_threads", type=int, default=1, help="ale-py threads (0: one per core)")
    p.add_argument("--sweep", action="store_true",
                   help="time ours at (torch, env) threads " + ", ".join(map(str, SWEEP_THREADS)))
    p.add_argument("--seed", type=int, default=0, help="env, torch and action-sampling seed")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if game_from_env_id(args.env_id) is None:
        raise SystemExit(f"{args.env_id!r} is not an ALE NoFrameskip-v4 id")
    print(machine_header())
    print(f"{args.env_id}, {args.num_envs} envs; A2C {args.steps} steps after "
          f"{args.warmup_steps} warm-up; raw env {args.env_steps} steps; "
          f"torch_threads {args.torch_threads}, env_threads {args.env_threads}\n", flush=True)

    raw = bench_raw_env(args.env_id, args.num_envs, args.env_steps, args.env_threads, args.seed)
    print(f"(a) raw env, random actions:  {raw:8.0f} steps/s", flush=True)

    combos = list(SWEEP_THREADS) if args.sweep else [(args.torch_threads, args.env_threads)]
    ours: dict[tuple[int, int], Rate] = {}
    for tt, et in combos:
        ours[(tt, et)] = bench_ours(args.env_id, args.num_envs, args.steps, args.warmup_steps,
                                    tt, et, args.seed)
        r = ours[(tt, et)]
        print(f"(b) ours  (torch {tt}, env {et}): loop {r.loop_sps:6.0f} steps/s, "
              f"call {r.call_sps:6.0f} steps/s ({r.steps} steps)", flush=True)

    sb3 = bench_sb3(args.env_id, args.num_envs, args.steps, args.warmup_steps,
                    args.torch_threads, args.env_threads, args.seed)
    print(f"(c) SB3   (torch {args.torch_threads}, env {args.env_threads}): "
          f"loop {sb3.loop_sps:6.0f} steps/s, call {sb3.call_sps:6.0f} steps/s "
          f"({sb3.steps} steps)\n", flush=True)

    print(f"raw env (env threads {args.env_threads}): {raw:.0f} steps/s; "
          f"SB3 (torch {args.torch_threads}, env {args.env_threads}): {sb3.loop_sps:.0f} steps/s")
    print("torch env | ours loop | ours call | ours/SB3 loop | ours/SB3 call | ours/raw env")
    for (tt, et), r in ours.items():
        print(f"{tt:5d} {et:3d} | {r.loop_sps:9.0f} | {r.call_sps:9.0f} | "
              f"{r.loop_sps / sb3.loop_sps:13.2f} | {r.call_sps / sb3.call_sps:13.2f} | "
              f"{r.loop_sps / raw:12.2f}")
    print(f"\nload average at end: {_load()} (on a shared machine the figures vary run to run)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
