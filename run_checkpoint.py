#!/usr/bin/env python3
"""Watch a saved policy: play N episodes, print their true scores, optionally save one as a GIF."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="run_checkpoint.py", description=__doc__,
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("env_id", help="the env the policy was trained on")
    p.add_argument("policy", help="a run's policy/ directory (its newest checkpoint), a checkpoint "
                   "file, or a weights file written by --save_weights")
    p.add_argument("--episodes", type=int, default=5, help="episodes to play")
    p.add_argument("--seed", type=int, default=1, help="env seed")
    p.add_argument("--greedy", action="store_true", help="take the most likely action")
    p.add_argument("--video", help="write the first episode to this .gif file (84x84 frames, x3)")
    p.add_argument("--max_steps", type=int, default=30_000, help="agent steps per episode at most")
    p.add_argument("--save_weights", metavar="FILE.pt",
                   help="also write the policy's weights alone to this file (to share it)")
    return p


def play(env_id: str, weights: dict, episodes: int, seed: int = 1, greedy: bool = False,
         max_steps: int = 30_000, record_first: bool = False
         ) -> tuple[list[float], list[np.ndarray]]:
    """Play the policy of `weights` (a state dict) for episodes one after another; returns their
    true returns and, if asked, the first episode's frames (uint8 (84, 84) each)."""
    import torch

    from a2c.policies import make_policy
    from a2c.rollout import sample_actions
    from envs import env_kind, make_vec_env

    torch.set_num_threads(1)
    env = make_vec_env(env_id, 1, seed=seed, num_threads=1)
    policy = make_policy(env_kind(env_id), env.num_actions)
    policy.load_state_dict(weights)
    policy.eval()
    obs = env.reset(seed=seed)
    returns, frames, steps, ret = [], [], 0, 0.0
    while len(returns) < episodes:
        if record_first and not returns:
            frames.append(obs[0, -1].copy())
        result = env.step(sample_actions(policy, obs, greedy))
        obs, steps, ret = result.obs, steps + 1, ret + float(result.rewards[0])
        if result.finished or steps >= max_steps:
            returns.append(ret)
            print(f"episode {len(returns)}: return {ret:g} ({steps} steps)", flush=True)
            if not result.finished:
                obs = env.reset()
            steps, ret = 0, 0.0
    env.close()
    return returns, frames


def main(argv: list[str] | None = None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    from a2c.checkpoint import CheckpointError, load_policy_weights, save_policy_weights
    from envs import UnknownEnvError, env_kind
    try:
        env_kind(args.env_id)
        state = load_policy_weights(args.policy)
        if args.episodes <= 0 or args.max_steps <= 0:
            raise ValueError("--episodes and --max_steps must be positive")
        if args.video and Path(args.video).suffix.lower() != ".gif":
            raise ValueError("--video must name a .gif file")
        if args.save_weights and Path(args.save_weights).suffix != ".pt":
            raise ValueError("--save_weights must name a .pt file")
    except (UnknownEnvError, CheckpointError, ValueError) as e:
        print(f"run_checkpoint.py: error: {e}", file=sys.stderr)
        return 2
    print(f"policy after {state['timesteps']:,} agent steps")
    if args.save_weights:
        save_policy_weights(args.save_weights, state)
        print(f"wrote {args.save_weights} (weights alone)")
    returns, frames = play(args.env_id, state["policy"], args.episodes, args.seed,
                           args.greedy, args.max_steps, record_first=bool(args.video))
    print(f"mean return {np.mean(returns):g} (std {np.std(returns):g}) over {len(returns)} episodes")
    if args.video:
        from runtime.video import write_gif

        write_gif(frames, args.video)
        print(f"wrote {args.video} ({len(frames)} frames)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
