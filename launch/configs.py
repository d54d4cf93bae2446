"""The processes' configurations, built from a run's settings."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ORIGINAL = "train_policy_with_original_rewards"
PREFS_FILE = "prefs.sqlite"  # a run's label store
PREDICTOR_FILE = "reward_predictor.pt"  # a run's predictor checkpoint, under reward_predictor/


def a2c_config(args: argparse.Namespace, run_dir: Path):
    from a2c.config import A2CConfig, A2CRunConfig

    million = 1_000_000
    return A2CRunConfig(
        env_id=args.env_id, total_timesteps=int(args.million_timesteps * million),
        a2c=A2CConfig(n_envs=args.n_envs, ent_coef=args.ent_coef, lr=args.lr,
                      optimizer=args.optimizer,
                      lr_zero_timesteps=(args.lr_zero_million_timesteps * million
                                         if args.lr_zero_million_timesteps else None)),
        seed=args.seed, ckpt_dir=str(run_dir / "policy"), ckpt_interval=args.policy_ckpt_interval,
        load_ckpt_dir=args.load_policy_ckpt_dir, torch_threads=args.torch_threads,
        env_threads=args.env_threads, precision=args.precision, device=args.policy_device,
        hide_episode_ends=not args.show_episode_ends and args.mode != ORIGINAL)


def trainer_config(args: argparse.Namespace, run_dir: Path | None):
    from reward_predictor.config import TrainerConfig

    return TrainerConfig(
        env_kind=args.env_kind, n_members=args.ensemble_size, dropout=args.dropout,
        batchnorm=args.batchnorm, lr=args.reward_predictor_learning_rate, max_prefs=args.max_prefs,
        ckpt_interval=args.reward_predictor_ckpt_interval,
        ckpt_path=str(run_dir / "reward_predictor" / PREDICTOR_FILE) if run_dir else None,
        load_ckpt_path=args.reward_ckpt_path, torch_threads=args.reward_predictor_threads,
        reward_std=args.reward_std, label_noise=args.label_noise, adaptive_l2=args.adaptive_l2,
        duty=args.reward_predictor_duty, seed=args.seed, device=args.predictor_device,
        # While A2C waits for the predictor (--min_predictor_labels_per_step) or has not started
        # (pretraining) its threads are idle.
        threads_while_agent_idle=args.reward_predictor_threads + args.torch_threads,
        # MovingDot's small net reads sub-pixel dot positions: bf16's 8-bit mantissa blurs them.
        precision=args.precision if args.env_kind == "atari" else "fp32")


def interface_config(args: argparse.Namespace, stop_after_labels: int | None = None):
    from pref_interface.process import InterfaceConfig

    return InterfaceConfig(max_segs=args.max_segs, synthetic=args.synthetic_prefs,
                           max_pairs_per_clip=args.max_pairs_per_clip or None,
                           clip_player=getattr(args, "player_kind", None) or "terminal",
                           page_updates=getattr(args, "page_updates", None),
                           keep_typed_ahead=not sys.stdin.isatty(),
                           max_in_flight=None if stop_after_labels else 4,
                           stop_after_labels=stop_after_labels, seed=args.seed,
                           teacher=args.teacher, episode_end_penalty=episode_end_penalty(args),
                           selection="random" if stop_after_labels else args.query_selection,
                           oversample=args.oversampling, label_schedule=args.label_schedule,
                           max_labels=args.max_labels, initial_labels=args.n_initial_prefs,
                           anneal_every_frames=int(args.anneal_every_frames),
                           total_frames=int(args.million_timesteps * 1e6) * 4)


def episode_end_penalty(args: argparse.Namespace) -> float:
    """App. A: the synthetic oracle penalises episode ends, except in Pong (where the episode
    ends only once the game is decided)."""
    if args.episode_end_penalty is not None:
        return args.episode_end_penalty
    return 0.0 if args.env_kind != "atari" or args.env_id.startswith("Pong") else 1.0
