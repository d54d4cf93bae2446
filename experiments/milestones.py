"""The reproduction's milestones: what each one runs (env, mode, flags) and the level of true
return that counts as reached, with the budget within which a held level must be reached.
`experiments.milestone` runs them; `experiments.held` judges a run against one."""
from __future__ import annotations

from dataclasses import dataclass

from envs.scores import MOVING_DOT_LEVEL


@dataclass
class Milestone:
    env_id: str
    mode: str
    flags: list[str]
    level: float | None  # the true return that counts as reached (None: no target, best shown)
    window: int  # episodes averaged when checking the level
    note: str
    # Where a held level is defined (`experiments.held`): the agent steps and labels (None: no
    # labels) within which it must be reached
    budget: tuple[float, int | None] | None = None


# Held: the mean of every episode after reaching the level, and a final policy's sampled play,
# within this much of the level (greedy play at it).
HELD_MARGIN = 2.0


MILESTONES = {
    # Each runs with its environment's own settings (launch/env_settings.py), the ones run.py
    # gives it when no flag says otherwise.
    "moving_dot": Milestone(
        "MovingDotNoFrameskip-v0", "train_policy_with_preferences", ["--synthetic_prefs"],
        MOVING_DOT_LEVEL, 64, "90% of the scripted policy's return, target <= 5 min on 2 cores"),
    # Pong's milestone: a mean true score >= +19 over 10 episodes within 6M agent steps and
    # 3,300 labels (the paper's synthetic-label budget for Pong, §3.1.2, Fig. 3).
    "pong_prefs": Milestone(
        "PongNoFrameskip-v4", "train_policy_with_preferences", ["--synthetic_prefs"],
        19.0, 10, "mean of 10 episodes >= +19 within 6M steps and 3,300 labels", (6e6, 3300)),
    "pong_true": Milestone(
        "PongNoFrameskip-v4", "train_policy_with_original_rewards",
        # One process alone: two torch and two env threads are fastest on 2 cores (docs/results.md,
        # bench_a2c).
        ["--torch_threads", "2", "--env_threads", "2"],
        19.0, 10, "the true-reward baseline", (6e6, None)),
    # The paper's Enduro: hard for A2C/A3C on the true reward, so no level is set; the two runs
    # go to equal agent steps and are compared on one figure. Every checkpoint is kept, so that
    # the best policy, not only the final one, can be played.
    "enduro_prefs": Milestone(
        "EnduroNoFrameskip-v4", "train_policy_with_preferences",
        ["--synthetic_prefs", "--million_timesteps", "6", "--policy_ckpts_kept", "0"],
        None, 10, "from synthetic preferences, to 6M steps"),
    "enduro_true": Milestone(
        "EnduroNoFrameskip-v4", "train_policy_with_original_rewards",
        ["--torch_threads", "2", "--env_threads", "2", "--million_timesteps", "6",
         "--policy_ckpts_kept", "0"],
        None, 10, "the true-reward baseline, to 6M steps"),
}
