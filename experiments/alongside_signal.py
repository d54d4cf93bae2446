#!/usr/bin/env python3
"""How much one action changes the return of each per-step reward for Enduro's "keep alongside
other cars" (§3.2), from uniform random play: the signal A2C's first gradients get.

    python -m experiments.alongside_signal                      # 40 states, 100-step returns
    python -m experiments.alongside_signal --states 10 --horizon 50

At states met in random play the emulator's state is saved, each of the 9 actions taken from it,
and random play continued for `--horizon` steps, twice, with the same random actions after each
first action (so the actions are compared on equal futures). For each reward, the return's
discounted sum (A2C's γ) then gives Q(s, a) of the uniform policy; its spread over the actions is
what a policy gradient at uniform play follows (the advantage), and the spread over the two
random futures after the same first action is the noise each sampled return carries. The
advantage's spread is estimated from the covariance of the two futures' returns over the actions,
so the noise does not inflate it. Rewards:
- `level`: 1 on steps level with another car (the count teacher's score);
- `shaped`: `level` plus 10 times the change in nearness to the car ahead (`--teacher_reward`
  with the shaped teacher);
- `near`: `level` plus the nearness itself, a reward for being close to a car at every step (the
  near teacher's score);
- `hold`: `near` plus the nearness times how nearly the nearest car keeps its row from the frame
  before, a reward for matching its speed (the holding teacher's score);
- `game`: the game's own reward (cars passed), which A2C does not learn from here.

Frames are made as the training envs make them (frame skip 4, the last two frames' maximum, grey,
area resize to 84x84, the bottom panel blanked) from a single ALE whose state can be saved.
"""
from __future__ import annotations

import os
import sys
import time

# One BLAS thread: the frames' resize is a small matrix product, which many threads slow down
# beside other busy processes.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import numpy as np  # noqa: E402

from a2c.config import A2CConfig  # noqa: E402
from envs.atari import MAX_AGENT_STEPS, NOOP_MAX, SCORE_ROWS  # noqa: E402
from envs.moving_dot import area_weights  # noqa: E402
from pref_interface.labellers.teachers import make_teacher  # noqa: E402
from runtime.script_args import ScriptParser, first_paragraph

GAME = "enduro"
# the Enduro teachers (their default weights): their per-step scores are the rewards measured
LEVEL, SHAPED, NEAR, HOLD = (make_teacher(kind) for kind in (
    "alongside", "alongside_shaped", "alongside_near", "alongside_hold"))
REWARDS = ("level", "shaped", "near", "hold", "game")


class BranchingEnduro:
    """One Enduro ALE with the training envs' preprocessing, whose state can be saved and
    restored."""

    def __init__(self, seed: int) -> None:
        from ale_py import ALEInterface, LoggerMode, roms

        ALEInterface.setLoggerMode(LoggerMode.Error)
        self.ale = ALEInterface()
        self.ale.setInt("random_seed", seed)
        self.ale.setFloat("repeat_action_probability", 0.0)
        self.ale.loadROM(roms.get_rom_path(GAME))
        self.actions = self.ale.getMinimalActionSet()
        height, width = self.ale.getScreenDims()
        self.wy, self.wx = area_weights(height, 84), area_weights(width, 84)
        self.blank = SCORE_ROWS[GAME]

    def reset(self, rng: np.random.Generator) -> np.ndarray:
        """A new game after 0-30 no-ops (App. A.2) and FIRE; the first frame."""
        self.ale.reset_game()
        for _ in range(int(rng.integers(NOOP_MAX + 1))):
            self.ale.act(self.actions[0])
        return self.step(1)[0]

    def step(self, action: int) -> tuple[np.ndarray, float]:
        """Four frames of `action`: the 84x84 grey frame and the game's reward."""
        reward, last = 0.0, []
        for k in range(4):
            reward += self.ale.act(self.actions[action])
            if k >= 2:
                last.append(self.ale.getScreenGrayscale())
        frame = np.rint(self.wy @ np.maximum(*last).astype(np.float64) @ self.wx.T)
        frame = np.clip(frame, 0, 255).astype(np.uint8)
        frame[self.blank[0]:self.blank[1]] = 0
        return frame, reward

    def save(self):
        return self.ale.cloneState()

    def restore(self, state) -> None:
        self.ale.restoreState(state)


def step_rewards(before: np.ndarray, frames: list[np.ndarray], game: list[float]) -> np.ndarray:
    """(len(REWARDS), T): each reward on the T frames after `before`, judged on each frame."""
    pairs = np.stack([[a, b] for a, b in zip([before, *frames[:-1]], frames)])  # (T, 2, 84, 84)
    # each step's frame, and the one before it for the shaped and holding teachers
    return np.stack([t.step_scores(pairs) for t in (LEVEL, SHAPED, NEAR, HOLD)] + [np.array(game)])


def branch(env: BranchingEnduro, horizon: int, futures: int, rng: np.random.Generator,
           before: np.ndarray) -> np.ndarray:
    """(futures, n_actions, len(REWARDS), horizon): each action from the saved state, then random
    play, the same random actions after every first action."""
    state = env.save()
    n = len(env.actions)
    out = np.zeros((futures, n, len(REWARDS), horizon))
    for c in range(futures):
        plan = rng.integers(n, size=horizon - 1)
        for a in range(n):
            env.restore(state)
            frames, game = [], []
            for action in (a, *plan):
                frame, reward = env.step(int(action))
                frames.append(frame)
                game.append(reward)
            out[c, a] = step_rewards(before, frames, game)
    env.restore(state)
    return out


def spread(returns: np.ndarray) -> tuple[float, float, float]:
    """From one reward's (states, futures, actions) discounted returns: the variance of the
    advantage over actions (from the two futures' covariance, so the futures' noise does not
    inflate it; may come out below 0), its standard error over states, and the variance of one
    sampled return after a given first action (over futures)."""
    centred = returns - returns.mean(axis=2, keepdims=True)
    n = returns.shape[2]
    per_state = (centred[:, 0] * centred[:, 1]).mean(axis=1) * n / (n - 1)
    se = per_state.std(ddof=1) / np.sqrt(len(per_state)) if len(per_state) > 1 else float("nan")
    return float(per_state.mean()), float(se), float(returns.var(axis=1, ddof=1).mean())


def mean_advantages(returns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each action's advantage averaged over states (what a state-blind shift of the policy
    follows), and its standard error over states: (actions,) each."""
    adv = returns.mean(axis=1)
    adv = adv - adv.mean(axis=1, keepdims=True)
    return adv.mean(axis=0), adv.std(axis=0, ddof=1) / np.sqrt(len(adv))


def main(argv: list[str] | None = None) -> int:
    p = ScriptParser(description=first_paragraph(__doc__))
    p.add_argument("--states", type=int, default=40, help="states branched from")
    p.add_argument("--horizon", type=int, default=100, help="agent steps of each return")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    if a.states < 1 or a.horizon < 2:
        p.error("--states must be at least 1 and --horizon at least 2")
    gamma = A2CConfig().gamma
    rng = np.random.default_rng(a.seed)
    env = BranchingEnduro(a.seed)
    # spread over an episode (day, night, fog): each state `every - 1` random steps after the last
    every = MAX_AGENT_STEPS[GAME] // a.states
    discount = gamma ** np.arange(1, a.horizon + 1)
    returns, per_step = [], []
    t0 = time.perf_counter()
    frame = env.reset(rng)
    for i in range(a.states):
        for _ in range(every - 1):
            frame, _ = env.step(int(rng.integers(len(env.actions))))
            if env.ale.game_over():
                frame = env.reset(rng)
        rewards = branch(env, a.horizon, 2, rng, frame)  # (futures, actions, rewards, horizon)
        per_step.append(np.moveaxis(rewards, 2, 0).reshape(len(REWARDS), -1))  # every branch's
        returns.append(rewards @ discount)
        print(f"\rstate {i + 1}/{a.states}, {time.perf_counter() - t0:.0f} s", end="",
              file=sys.stderr, flush=True)
    print(file=sys.stderr)
    returns = np.stack(returns)  # (states, futures, actions, rewards)
    steps = np.concatenate(per_step, axis=1)
    names = [action.name.lower() for action in env.actions]
    print(f"{a.states} states of random play, {len(names)} actions x 2 random futures of {a.horizon} steps, "
          f"γ = {gamma}; level with a car on {steps[0].mean():.1%} of the futures' steps")
    print("\n| reward | per-step std | advantage variance over actions (± 1 SE) | one return's "
          "variance | their ratio, at most (+2 SE) |")
    print("|---|---|---|---|---|")
    spreads = [spread(returns[..., k]) for k in range(len(REWARDS))]
    for k, (name, (var, se, noise)) in enumerate(zip(REWARDS, spreads)):
        bound = f"{(var + 2 * se) / noise:.4f}" if noise > 0 else "-"
        print(f"| {name} | {steps[k].std():.3f} | {var:+.4f} ± {se:.4f} | {noise:.3f} | {bound} |")
    print("\nEach action's advantage averaged over the states (± 1 SE), in units of one return's "
          "std:")
    print("| reward | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for k, (name, (_, _, noise)) in enumerate(zip(REWARDS, spreads)):
        if noise == 0:
            continue
        mean, se = mean_advantages(returns[..., k])
        print(f"| {name} | " + " | ".join(f"{m / noise ** 0.5:+.3f} ± {e / noise ** 0.5:.3f}"
                                          for m, e in zip(mean, se)) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
