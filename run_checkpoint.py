#!/usr/bin/env python3
"""Watch a saved policy: play N episodes, print their true scores, optionally save one as a GIF;
with --reward_predictor, the GIF shows the predicted reward r̂ beside the game."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from runtime.script_args import ScriptParser


def build_parser() -> argparse.ArgumentParser:
    p = ScriptParser(prog="run_checkpoint.py", description=__doc__,
                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("env_id", help="the env the policy was trained on")
    p.add_argument("policy", help="a run directory or its policy/ directory (the newest "
                   "policy), a checkpoint file, or a weights file written by --save_weights")
    p.add_argument("--episodes", type=int, default=5, help="episodes to play")
    p.add_argument("--seed", type=int, default=1,
                   help="the seed of the game and of the sampled actions")
    p.add_argument("--greedy", action="store_true", help="take the most likely action")
    p.add_argument("--video", help="write the first episode to this .gif file (84x84 frames "
                   "zoomed x3, or beside a scrolling plot of r̂ with --reward_predictor)")
    p.add_argument("--watch", action="store_true",
                   help="show the episodes as they are played, at the clips' speed, in a window "
                        "when there is a display and else in the terminal (r̂ beside the game "
                        "with --reward_predictor)")
    p.add_argument("--reward_predictor", metavar="RUN_DIR",
                   help="a run directory (or its reward_predictor/reward_predictor.pt) whose r̂ "
                        "is printed per episode with its correlation with the game's reward and "
                        "plotted, member by member, in the video")
    p.add_argument("--max_steps", type=int, default=30_000, help="agent steps per episode at most")
    p.add_argument("--save_weights", metavar="FILE.pt",
                   help="also write the policy's weights alone to this file (to share it)")
    return p


def play(env_id: str, weights: dict, episodes: int, seed: int = 1, greedy: bool = False,
         max_steps: int = 30_000, record_first: bool = False, predictor=None, watcher=None
         ) -> tuple[list[float], list[np.ndarray], list]:
    """Play the policy of `weights` (a state dict) for episodes one after another; returns their
    true returns, if asked the first episode's frames (uint8 (84, 84) each, or with a `predictor`,
    a RewardPredictorEnsemble, the game beside the plot of r̂, (252, 588, 3)), and with a
    predictor each episode's RewardTrace (r̂ of every step). A `watcher`
    (pref_interface.labellers.watch.Watcher) shows every step as it is played."""
    import torch

    from a2c.policies import make_policy
    from a2c.rollout import sample_actions
    from envs import env_kind, make_vec_env
    from runtime.reward_view import RewardTrace, side_by_side

    torch.set_num_threads(1)
    torch.manual_seed(seed)  # sampled actions too: a seed plays the same episodes again
    env = make_vec_env(env_id, 1, seed=seed, num_threads=1)
    policy = make_policy(env_kind(env_id), env.num_actions)
    policy.load_state_dict(weights)  # checked by main: check_fits
    policy.eval()
    obs = env.reset(seed=seed)
    returns, frames, steps, ret = [], [], 0, 0.0
    trace = RewardTrace(predictor.ensemble_size) if predictor is not None else None
    traces = []
    while len(returns) < episodes:
        actions = sample_actions(policy, obs, greedy)
        result = env.step(actions)
        if trace is not None:  # r̂(o, a): the observation the action was taken on (App. A.2)
            trace.add(predictor.member_rewards(obs, actions)[:, 0], float(result.rewards[0]))
        if record_first and not returns:
            frames.append(obs[0, -1].copy() if trace is None
                          else side_by_side(obs[0, -1], trace.draw()))
        if watcher is not None:
            watcher.show(obs[0, -1], trace, f"episode {len(returns) + 1}, step {steps + 1}, "
                                            f"return {ret + float(result.rewards[0]):g}")
        obs, steps, ret = result.obs, steps + 1, ret + float(result.rewards[0])
        if result.finished or steps >= max_steps:
            returns.append(ret)
            line = f"episode {len(returns)}: return {ret:g} ({steps} steps)"
            if trace is not None:
                r_hat, game = np.array(trace.means), np.array(trace.game)
                corr = np.corrcoef(r_hat, game)[0, 1] if game.std() > 0 else float("nan")
                line += (f"; r̂ summed {r_hat.sum():+.2f}, correlation with the game's reward "
                         f"{corr:.2f}")
                traces.append(trace)
                trace = RewardTrace(predictor.ensemble_size)
            (watcher.say if watcher is not None else print)(line)
            if not result.finished:
                obs = env.reset()
            steps, ret = 0, 0.0
    env.close()
    return returns, frames, traces


def load_predictor(path: str, env_id: str):
    """A run's saved reward predictor, built as the run built it; ValueError (one line) when it
    cannot be read or was trained on another env."""
    from envs import same_game
    from launch.cli import UsageError, saved_run
    from launch.configs import trainer_config
    from launch.rundir import PREDICTOR_FILE
    from reward_predictor.reward_fn import load_ensemble
    from reward_predictor.trainer import CheckpointError

    p = Path(path)
    if not p.is_dir() and p.name != PREDICTOR_FILE:
        raise ValueError(f"--reward_predictor: give a run directory or its reward_predictor/"
                         f"{PREDICTOR_FILE}, not {p}")
    run_dir = p if p.is_dir() else p.parent.parent
    ckpt = p / "reward_predictor" / PREDICTOR_FILE if p.is_dir() else p
    try:
        run = saved_run(run_dir)
    except UsageError as e:
        raise ValueError(f"--reward_predictor: {e}") from None
    trained_on = run.settings.env_id
    if not same_game(trained_on, env_id):
        raise ValueError(f"--reward_predictor: {run_dir} was trained on {run.settings.env_id}, "
                         f"not {env_id}")
    try:
        return load_ensemble(trainer_config(run, load_from=None, save=False), str(ckpt))
    except (CheckpointError, OSError, RuntimeError) as e:
        raise ValueError(f"--reward_predictor: cannot read {ckpt}: "
                         f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None


def main(argv: list[str] | None = None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    from a2c.checkpoint import CheckpointError, check_fits, load_policy_weights, save_policy_weights
    from envs import UnknownEnvError, check_seed, env_kind
    from launch.rundir import playable_policy
    from launch.stopping import EXIT_INTERRUPTED
    from pref_interface.labellers.player import resolve_player
    from runtime.outputs import prepare_output
    try:
        env_kind(args.env_id)
        if args.episodes <= 0 or args.max_steps <= 0:
            raise ValueError("--episodes and --max_steps must be positive")
        check_seed(args.seed)
        if args.video and Path(args.video).suffix.lower() != ".gif":
            raise ValueError("--video must name a .gif file")
        if args.save_weights and Path(args.save_weights).suffix != ".pt":
            raise ValueError("--save_weights must name a .pt file")
        watch_on = resolve_player("auto") if args.watch else None
        if watch_on == "terminal" and not sys.stdout.isatty():
            raise ValueError("--watch draws the game in a window or a terminal; there is no "
                             "display and the output is not a terminal")
        for out, flag in ((args.video, "--video"), (args.save_weights, "--save_weights")):
            if out:
                prepare_output(out, flag)
        policy = playable_policy(Path(args.policy))  # a run directory: its newest policy
        state = load_policy_weights(policy)
        check_fits(args.env_id, state, policy)
        predictor = load_predictor(args.reward_predictor, args.env_id) if (
            args.reward_predictor) else None
    except (UnknownEnvError, CheckpointError, ValueError) as e:
        print(f"run_checkpoint.py: error: {e}", file=sys.stderr)
        return 2
    print(f"policy after {state['timesteps']:,} agent steps")
    if args.save_weights:
        save_policy_weights(args.save_weights, {**state, "env_id": args.env_id})  # as checked
        print(f"wrote {args.save_weights} (weights alone)")
    watcher = None
    if watch_on is not None:
        from pref_interface.labellers.watch import Watcher

        watcher = Watcher(watch_on)
    try:
        returns, frames, _ = play(args.env_id, state["policy"], args.episodes, args.seed,
                                  args.greedy, args.max_steps, record_first=bool(args.video),
                                  predictor=predictor, watcher=watcher)
    except KeyboardInterrupt:  # the episodes ended so far have had their lines
        print("stopped by Ctrl-C", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        if watcher is not None:
            watcher.close()
    print(f"mean return {np.mean(returns):.1f} (std {np.std(returns):.1f}) over {len(returns)} "
          f"episode{'s' if len(returns) != 1 else ''}")
    if args.video:
        from runtime.video import write_gif

        try:
            write_gif(frames, args.video, zoom=1 if predictor is not None else 3)  # drawn zoomed
        except KeyboardInterrupt:
            print(f"stopped by Ctrl-C: {args.video} not written", file=sys.stderr)
            return EXIT_INTERRUPTED
        print(f"wrote {args.video} ({len(frames)} frames)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
