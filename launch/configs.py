"""The processes' configurations, built from a checked run (launch/rundir.py's Run)."""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from launch.rundir import POLICY_DIR, PREDICTOR_FILE
from reward_predictor.pace import ceiling_of_pace, labels_per_member
from runtime.machine import usable_cores

if TYPE_CHECKING:
    from launch.rundir import Run

MILLION = 1_000_000


def agent_stats(ctx, run: Run):
    """A2C's shared counters, its agent steps starting where the policy it loads left off: a
    resumed run's first status line and rate are right before A2C has loaded it."""
    from a2c.config import A2CStats, checkpoint_steps, checkpoints

    kept = checkpoints(run.policy_ckpt_dir) if run.policy_ckpt_dir else []
    return A2CStats(ctx, checkpoint_steps(kept[-1]) if kept else 0)


def steps_or_none(million: float | None) -> float | None:
    """A setting in millions of agent steps as agent steps; unset stays None."""
    return million * MILLION if million else None


def a2c_config(run: Run):
    from a2c.config import A2CConfig, A2CRunConfig

    s = run.settings
    return A2CRunConfig(
        env_id=s.env_id, total_timesteps=int(s.million_timesteps * MILLION),
        a2c=A2CConfig(n_envs=s.n_envs, ent_coef=s.ent_coef, lr=s.lr, optimizer=s.optimizer,
                      lr_zero_timesteps=steps_or_none(s.lr_zero_million_timesteps),
                      lr_warmup_timesteps=steps_or_none(s.lr_warmup_million_timesteps)),
        seed=s.seed, ckpt_dir=str(run.dir / POLICY_DIR), ckpt_interval=s.policy_ckpt_interval,
        ckpt_keep=s.policy_ckpts_kept, revive_dead=s.revive_dead_policy,
        load_ckpt_dir=run.policy_ckpt_dir, start_weights=s.start_policy, torch_threads=s.torch_threads,
        env_threads=s.env_threads, precision=s.precision, device=run.policy_device,
        # App. A: the agent sees one continuous episode when it learns from preferences.
        hide_episode_ends=(not s.show_episode_ends
                           and s.mode != "train_policy_with_original_rewards"))


def trainer_config(run: Run, load_from: str | None, save: bool = True):
    """The trainer's (and pretraining's) configuration; it starts from the checkpoint
    `load_from` (None: fresh weights) and saves into the run directory unless `save` is off."""
    from pref_interface.labellers.team import parse_labellers
    from reward_predictor.config import TrainerConfig

    s = run.settings
    return TrainerConfig(
        env_kind=run.env_kind, ensemble_size=s.ensemble_size, dropout=s.dropout,
        batchnorm=s.batchnorm, lr=s.reward_predictor_learning_rate, max_prefs=s.max_prefs,
        ckpt_interval=s.reward_predictor_ckpt_interval,
        ckpt_path=str(run.dir / "reward_predictor" / PREDICTOR_FILE) if save else None,
        load_ckpt_path=load_from, torch_threads=s.reward_predictor_threads,
        reward_std=s.reward_std, label_noise=s.label_noise, adaptive_l2=s.adaptive_l2,
        implied_pairs=s.implied_pairs, loss=s.predictor_loss,
        left_out=tuple(parse_labellers(s.leave_out)) if s.leave_out else (),
        duty=s.reward_predictor_duty, seed=s.seed, device=run.predictor_device,
        max_labels_per_step=labels_per_member(ceiling_of_pace(s), s.predictor_pace_unit,
                                              s.ensemble_size),
        keep_freed_memory=s.reward_predictor_keep_freed_memory,
        # While A2C waits for the predictor (--min_predictor_labels_per_step) or has not started
        # (pretraining) its threads are idle; more threads than cores would slow every step.
        threads_while_agent_idle=min(s.reward_predictor_threads + s.torch_threads, usable_cores()),
        # MovingDot's small net reads sub-pixel dot positions: bf16's 8-bit mantissa blurs them.
        precision=s.precision if run.env_kind == "atari" else "fp32")


def trainer_environ(config) -> dict[str, str]:
    """Environment variables for a process that trains the predictor described by `config`
    (a TrainerConfig): glibc's malloc tunables, unless it keeps freed memory in its heap instead
    (runtime/process_setup.py)."""
    from runtime.process_setup import trainer_malloc_environ

    return {} if config.keep_freed_memory else trainer_malloc_environ()


def labelling_config(run: Run, page_updates: Any = None, gather_labels: int | None = None):
    """Labelling's configuration; `gather_labels`: gathering the initial labels
    (App. A: pairs drawn at random, nobody takes them off the queue, stop at this many)."""
    from pref_interface.config import LabellingConfig
    from pref_interface.labellers.team import parse_labellers
    from pref_interface.labellers.teachers import default_episode_end_penalty
    from pref_interface.queries.schedule import FRAMESKIP

    s = run.settings
    penalty = (s.episode_end_penalty if s.episode_end_penalty is not None else
               default_episode_end_penalty(s.env_id))
    return LabellingConfig(max_clips=s.max_clips, synthetic=s.synthetic_prefs,
                           max_pairs_per_clip=s.max_pairs_per_clip or None,
                           clip_player=run.player_kind or "terminal", page_updates=page_updates,
                           labellers=tuple(parse_labellers(s.labellers)) if s.labellers else (),
                           overlap=s.overlap,
                           keep_typed_ahead=not sys.stdin.isatty(),
                           stop_after_labels=gather_labels, seed=s.seed,
                           teacher=s.teacher, episode_end_penalty=penalty, queries=s.queries,
                           query_selection="random" if gather_labels else s.query_selection,
                           oversampling=s.oversampling, label_schedule=s.label_schedule,
                           max_labels=s.max_labels, initial_labels=s.n_initial_prefs,
                           demonstrations=s.demonstrations,
                           demonstration_share=s.demonstration_share,
                           anneal_every_frames=int(s.anneal_every_frames),
                           total_frames=int(s.million_timesteps * MILLION) * FRAMESKIP)
