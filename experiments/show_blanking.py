#!/usr/bin/env python3
"""Check by eye that an Atari game's blanked band covers its score (App. A.2).

    python -m experiments.show_blanking BeamRiderNoFrameskip-v4 PongNoFrameskip-v4 --out fig.png

Plays each game at random without the blanking, and draws, per game, one frame with the band
that `envs/atari.py` blanks shaded red, beside how much more often each row of the frame changes
within 3 steps of a reward than within 3 steps of any rewardless step. The score's rows change at
nearly every reward and otherwise stay still, so they stand out near 1; the playing field moves
either way and stays near 0. Prints the rows at 0.5 or more and whether the band holds them all
(a row outside it is something to look at, not proof of a leak).
"""
from __future__ import annotations


import numpy as np


from envs import UnknownEnvError, env_kind
from envs.atari import DEFAULT_SCORE_ROWS, SCORE_ROWS, game_from_env_id, make_ale_vector_env
from runtime.script_args import ScriptParser, first_paragraph


LAG = 3  # agent steps after a reward by which the score display has been redrawn


def reward_lift(game: str, steps: int, n_envs: int, seed: int
                ) -> tuple[np.ndarray, np.ndarray, int]:
    """(a raw frame, for each of its 84 rows the share of reward events after which it changed
    within LAG steps minus the same share after rewardless steps, the number of reward events)
    from `steps` steps of random play in `n_envs` envs."""
    env = make_ale_vector_env(game, n_envs, num_threads=1)
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    frames, rewards, dones = [obs[:, -1]], [], []
    for _ in range(steps):
        obs, r, terminated, truncated, _ = env.step(rng.integers(0, env.single_action_space.n,
                                                                  n_envs))
        frames.append(obs[:, -1])
        rewards.append(r)
        dones.append(terminated | truncated)
    env.close()
    f = np.asarray(frames, dtype=np.int16)  # (steps + 1, n_envs, 84, 84)
    r, d = np.asarray(rewards), np.asarray(dones)
    # (steps - LAG, n_envs, 84): did the row change from before step t to LAG steps after it?
    changed = (f[1 + LAG:] != f[:-1 - LAG]).any(axis=3)
    windows = np.lib.stride_tricks.sliding_window_view  # (.., LAG + 1): steps t..t+LAG
    reward_in = windows(r != 0, LAG + 1, axis=0).any(-1)[:len(changed)]
    # The frame after a reset is a new game, not a redrawn score.
    clean = ~windows(d, LAG + 1, axis=0).any(-1)[:len(changed)]
    event = (r[:len(changed)] != 0) & clean
    quiet = ~reward_in & clean
    if not event.any() or not quiet.any():
        return f[-1, 0].astype(np.uint8), np.zeros(84), int(event.sum())
    lift = changed[event].mean(axis=0) - changed[quiet].mean(axis=0)
    return f[-1, 0].astype(np.uint8), lift, int(event.sum())


def main(argv: list[str] | None = None) -> None:
    p = ScriptParser(description=first_paragraph(__doc__))
    p.add_argument("env_ids", nargs="+", help="Atari ids, e.g. PongNoFrameskip-v4")
    p.add_argument("--steps", type=int, default=3000, help="random steps per env")
    p.add_argument("--n_envs", type=int, default=4, help="envs played side by side")
    p.add_argument("--seed", type=int, default=0, help="env and action seed")
    p.add_argument("--out", default="blanking.png", help="where to write the figure (.png)")
    args = p.parse_args(argv)
    games = []
    for env_id in args.env_ids:
        try:
            kind = env_kind(env_id)
        except UnknownEnvError as e:
            p.error(str(e))
        if kind != "atari":
            p.error(f"{env_id} is not an Atari game: nothing is blanked")
        games.append(game_from_env_id(env_id))

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    per_row = min(len(games), 4)
    n_rows = -(-len(games) // per_row)
    fig, axes = plt.subplots(n_rows, 2 * per_row, figsize=(4.2 * per_row, 3.8 * n_rows),
                             squeeze=False, gridspec_kw={"width_ratios": [3, 1] * per_row})
    for ax in axes.ravel()[2 * len(games):]:
        ax.axis("off")
    for k, game in enumerate(games):
        r0, r1 = SCORE_ROWS.get(game, DEFAULT_SCORE_ROWS)
        frame, lift, events = reward_lift(game, args.steps, args.n_envs, args.seed)
        score_like = np.nonzero(lift >= 0.5)[0]
        outside = [int(i) for i in score_like if not r0 <= i < r1]
        print(f"{game}: band rows {r0}-{r1 - 1}; {events} reward events; rows that change with "
              f"the reward: {score_like.tolist()}; outside the band: {outside or 'none'}")
        ax, bar = axes[k // per_row, 2 * (k % per_row)], axes[k // per_row, 2 * (k % per_row) + 1]
        ax.imshow(frame, cmap="gray", vmin=0, vmax=255)
        ax.axhspan(r0 - 0.5, r1 - 0.5, color="red", alpha=0.35, lw=0)
        ax.set(title=f"{game}: blanked rows {r0}-{r1 - 1}", xticks=[])
        bar.barh(np.arange(84), lift, height=1.0, color="tab:blue")
        bar.axhspan(r0 - 0.5, r1 - 0.5, color="red", alpha=0.2, lw=0)
        bar.set_box_aspect(3)  # as tall as the square frame beside it, a third as wide
        bar.set(ylim=(83.5, -0.5), xlim=(-0.2, 1), yticks=[], xlabel="change with\nthe reward",
                title=f"{events} events")
    fig.tight_layout()
    fig.savefig(args.out, dpi=100)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
