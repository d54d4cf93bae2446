#!/usr/bin/env python3
"""PPO (stable-baselines3) on an Enduro teacher's own per-step score, with no labels and no
predictor: how far the learner gets when its reward is what a perfect r̂ of that teacher would
give (our A2C does the same with `run.py ... --teacher_reward`).

    python -m experiments.ppo_teacher_score --teacher alongside_near --million_timesteps 4 \\
        --out ~/runs/ppo_near_score
    python -m experiments.ppo_teacher_score --out ~/runs/ppo_near_score   # goes on after a stop

The score is scaled as r̂ is (`reward_fn.TeacherReward`: mean 0, std `--reward_std`); PPO runs
with `examples.ppo`'s settings. Every 100,000 agent steps, and when stopped (Ctrl-C, SIGTERM),
its model (`ppo.zip`) and its network as our policy weights file (`ppo_policy.pt`) are saved in
`--out`, and a line gives the episodes ended since the last one: their share of steps level
with another car, the teacher's mean score per step (the reward before scaling) and the game's
score. The same command with the same `--out` goes on from the saved model (flags given again
override the saved ones, e.g. a larger `--million_timesteps`). `python -m experiments.evaluate
OUT/ppo_policy.pt --env EnduroNoFrameskip-v4` plays the policy as it plays A2C's.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

import gymnasium
import numpy as np

from examples.ppo import MODEL_FILE, PPO_SETTINGS, SAVE_EVERY, save_ppo
from pref_interface.labellers.alongside import EpisodeShares
from pref_interface.labellers.teachers import ENDURO_TEACHERS
from launch.stopping import interrupted_status, stop_main_process_on_signals
from reward_predictor.config import TrainerConfig

ENV_ID = "EnduroNoFrameskip-v4"
SETTINGS_FILE = "ppo_teacher_score.json"  # the command's settings, for going on after a stop
DEFAULTS = {"teacher": "alongside_near", "million_timesteps": 4.0, "seed": 0, "n_envs": 16,
            "reward_std": TrainerConfig.reward_std, "torch_threads": 2}


class Ended(NamedTuple):
    """One ended episode: its share of steps level with a car (`EpisodeShares`; nan if none was
    read), its game score, and the teacher's mean score per step, the reward before scaling."""
    share: float
    game_score: float
    teacher_score: float


class TeacherScore(gymnasium.vector.VectorWrapper):
    """Rewards become the teacher's per-step score, scaled as r̂; the game's own reward moves to
    `info["true_reward"]`. Each ended episode (`Ended`) is kept in `ended` until taken."""

    def __init__(self, env: gymnasium.vector.VectorEnv, teacher: str, reward_std: float) -> None:
        from reward_predictor.reward_fn import TeacherReward

        super().__init__(env)
        self.reward = TeacherReward(teacher, reward_std)
        n = env.num_envs
        self.shares, self.score = EpisodeShares(n), np.zeros(n)
        self.teacher_sum, self.steps = np.zeros(n), np.zeros(n)
        self.ended: list[Ended] = []

    def step(self, actions: np.ndarray):
        obs, game, terminated, truncated, info = self.env.step(actions)
        # The step is judged by the observation it leads to, as a clip's steps are.
        final = info.get("final_obs")
        judged = obs if final is None else np.where(
            info["_final_obs"][:, None, None, None], final, obs)
        self.shares.observe(judged[:, -1])
        scores = self.reward.teacher.step_scores(judged)
        self.score += game
        self.teacher_sum += scores
        self.steps += 1
        for i in np.flatnonzero(np.logical_or(terminated, truncated)):
            share = self.shares.end(i)
            self.ended.append(Ended(float("nan") if share is None else share,
                                    float(self.score[i]),
                                    float(self.teacher_sum[i] / self.steps[i])))
            self.score[i] = self.teacher_sum[i] = self.steps[i] = 0
        rewards = self.reward.scale(scores)
        return obs, rewards, terminated, truncated, {**info, "true_reward": game}

    def take_ended(self) -> list[Ended]:
        ended, self.ended = self.ended, []
        return ended


def settings_of(a: argparse.Namespace, out: Path) -> dict[str, Any]:
    """The saved settings of `out` (or the defaults), overridden by the flags given; saved."""
    path = out / SETTINGS_FILE
    saved = json.loads(path.read_text()) if path.is_file() else dict(DEFAULTS)
    given = {k: v for k, v in vars(a).items() if k in DEFAULTS and v is not None}
    if path.is_file() and given.get("teacher", saved["teacher"]) != saved["teacher"]:
        raise SystemExit(f"ppo_teacher_score: {out} learns the {saved['teacher']} teacher's "
                         "score; give another --out for another teacher")
    settings = {**saved, **given}
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(settings, indent=1) + "\n")
    return settings


def progress_line(steps: int, rate: float, ended: list[Ended]) -> str:
    """A line per save: agent steps, their rate since the line before, the episodes ended."""
    head = f"{steps:,} agent steps | {rate:,.0f}/s"
    if not ended:
        return f"{head} | no episode ended since the last line"
    share, game, teacher = np.array(ended).T
    return (f"{head} | {len(ended)} episodes: level with a car {np.nanmean(share):.1%} of "
            f"steps, teacher's score {teacher.mean():.3f} per step, game score {game.mean():+.1f}")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description="PPO on an Enduro teacher's own per-step score, with no labels and no "
                    "predictor: the learner's ceiling for a preference run with that teacher",
        allow_abbrev=False)
    p.add_argument("--out", required=True, help="the folder of the model, policy and settings")
    p.add_argument("--teacher", choices=sorted(ENDURO_TEACHERS),
                   help=f"the Enduro teacher whose score is the reward (default "
                        f"{DEFAULTS['teacher']})")
    p.add_argument("--million_timesteps", type=float,
                   help=f"agent steps to train to, in millions (default "
                        f"{DEFAULTS['million_timesteps']:g})")
    p.add_argument("--seed", type=int, help="PPO's and the envs' seed (default 0)")
    p.add_argument("--n_envs", type=int, help="envs (default 16, as our A2C's)")
    p.add_argument("--reward_std", type=float, help="the score's scale, as r̂'s (App. A.2: 0.05)")
    p.add_argument("--torch_threads", type=int, help="PPO's torch threads (default 2)")
    return p


def main(argv: list[str] | None = None) -> int:
    p = build_parser()
    a = p.parse_args(argv)
    for name in ("million_timesteps", "reward_std"):
        if getattr(a, name) is not None and not getattr(a, name) > 0:
            p.error(f"--{name} must be positive")
    for name in ("n_envs", "torch_threads"):
        if getattr(a, name) is not None and getattr(a, name) < 1:
            p.error(f"--{name} must be at least 1")
    out = Path(a.out).expanduser()
    s = settings_of(a, out)
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback

    from envs.gym_vector import GymVectorEnv
    from examples.sb3_vec_env import SB3VecEnv

    torch.set_num_threads(s["torch_threads"])
    stop_main_process_on_signals()  # SIGTERM and SIGHUP stop as Ctrl-C does: the model is saved
    env = TeacherScore(GymVectorEnv(ENV_ID, s["n_envs"], seed=s["seed"]), s["teacher"],
                       s["reward_std"])
    model_path = out / MODEL_FILE
    last = {"steps": 0, "time": time.monotonic()}  # the line before (or the start): steps, time

    def save(model: PPO) -> None:
        save_ppo(model, out, ENV_ID)
        now, steps = time.monotonic(), model.num_timesteps
        rate = (steps - last["steps"]) / max(now - last["time"], 1e-9)
        last.update(steps=steps, time=now)
        print(progress_line(steps, rate, env.take_ended()), flush=True)

    class Saver(BaseCallback):
        def _on_step(self) -> bool:
            if self.num_timesteps // SAVE_EVERY > (self.num_timesteps - s["n_envs"]) // SAVE_EVERY:
                save(self.model)
            return True

    model, status = None, 0
    try:
        vec = SB3VecEnv(env, seed=s["seed"])
        model = (PPO.load(model_path, env=vec) if model_path.is_file() else
                 PPO("CnnPolicy", vec, seed=s["seed"], verbose=0, **PPO_SETTINGS))
        total = int(s["million_timesteps"] * 1e6)
        last.update(steps=model.num_timesteps, time=time.monotonic())
        print(f"PPO on the {s['teacher']} teacher's score, {ENV_ID}, from "
              f"{model.num_timesteps:,} to {total:,} agent steps, into {out}", flush=True)
        model.learn(max(total - model.num_timesteps, 0), callback=Saver(),
                    reset_num_timesteps=False)
    except KeyboardInterrupt:
        status = interrupted_status()  # 128 + the signal
    finally:
        try:
            if model is not None:
                save(model)
        finally:
            env.close()
    return status


if __name__ == "__main__":
    sys.exit(main())
