#!/usr/bin/env python3
"""Probe a run's policy checkpoints: how much of the network still responds to what it sees?

    python -m experiments.probe_policy RUN_DIR                   # every kept checkpoint
    python -m experiments.probe_policy RUN_DIR --from 3.5 --to 4.5   # agent steps, millions
    python -m experiments.probe_policy CKPT.pt ... --env PongNoFrameskip-v4
    python -m experiments.probe_policy RUN_DIR --actions   # also what each checkpoint plays

Plays the env with random actions, keeps every 4th observation but those of an episode's first
steps (their frame stacks are padded with black frames, screens the policy never meets in play),
and runs each checkpoint's network on them. Per checkpoint it prints the share of each ReLU
layer's units (channels of a convolution, neurons of the dense layer) that are positive somewhere
in some observation ("alive"), how much the policy's logits and the value vary across
observations, and the policy's mean entropy; with `--actions`, also each action's mean
probability. A layer with no unit alive passes nothing on: the policy is then one fixed
distribution whatever the screen shows, no gradient reaches the layers below, and the run cannot
learn again (docs/experiments.md, "Why the level was touched, not held").
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np


from a2c.config import CHECKPOINT_PREFIX
from a2c.revive import KEEP_EVERY, RANDOM_ENVS, RANDOM_STEPS, random_play
from experiments.evaluate import EXIT_USAGE, checkpoint_steps, find_policies
from runtime.script_args import ScriptParser



@dataclass
class Probe:
    """One checkpoint's network on a batch of observations."""

    timesteps: int
    alive: list[float]  # per ReLU layer, the share of units positive at least once
    logit_spread: float  # std of each logit across observations, averaged over actions
    value_spread: float  # std of the value across observations
    entropy: float  # the policy's mean entropy (nats)
    actions: list[float]  # each action's mean probability

    @property
    def dead(self) -> bool:
        from a2c.policies import is_dead
        return is_dead(self.alive)

    def action_row(self, names: tuple[str, ...]) -> str:
        """Each action's mean probability, most likely first."""
        ranked = sorted(zip(self.actions, names), reverse=True)
        return "  actions: " + ", ".join(f"{name} {p:.2f}" for p, name in ranked)

    def row(self) -> str:
        alive = " ".join(f"{a:5.0%}" for a in self.alive)
        mark = "  DEAD: one distribution for every screen" if self.dead else ""
        return (f"{self.timesteps / 1e6:9.3f}M  {alive}  {self.logit_spread:8.4f}  "
                f"{self.value_spread:8.4f}  {self.entropy:7.3f}{mark}")


def header(layers: int) -> str:
    """The column heads above `Probe.row`s of a network with `layers` ReLU layers."""
    alive = " ".join(f"{f'L{k}':>5}" for k in range(1, layers + 1))
    return f"{'steps':>10}  {alive}  {'logit sd':>8}  {'value sd':>8}  {'entropy':>7}"


def probe(net, obs: np.ndarray, timesteps: int) -> Probe:
    """`net` (an a2c.policies.ActorCritic) on `obs`: its alive units, spreads and entropy."""
    import torch

    from a2c.policies import alive_units, logit_spread

    obs_t = torch.as_tensor(obs)
    alive = alive_units(net.eval(), obs_t)
    with torch.no_grad():
        logits, value = net(obs_t)
    logp = logits.log_softmax(-1)
    return Probe(timesteps, alive, logit_spread(logits), float(value.std()),
                 float(-(logp.exp() * logp).sum(-1).mean()), logp.exp().mean(0).tolist())


def probe_checkpoint(env_id: str, state: dict, source: str | Path, obs: np.ndarray) -> Probe:
    """A checkpoint's policy (as `load_policy_weights` gives it) probed on `obs`;
    CheckpointError where its weights are not `env_id`'s network."""
    from a2c.checkpoint import load_weights_into
    from a2c.policies import make_policy
    from envs import env_kind

    net = make_policy(env_kind(env_id), int(state["policy"]["policy.weight"].shape[0]))
    load_weights_into(net, state["policy"], source)
    return probe(net, obs, state["timesteps"])


def main(argv: list[str] | None = None) -> int:
    p = ScriptParser(description=__doc__.splitlines()[0])
    p.add_argument("policies", nargs="+",
                   help="a run directory (its kept checkpoints), a folder of checkpoints or "
                        "checkpoint files")
    p.add_argument("--env", help="the env id (a run directory names its own)")
    p.add_argument("--from", dest="start", type=float, default=0.0,
                   help="only checkpoints from here (million agent steps)")
    p.add_argument("--to", dest="stop", type=float, default=float("inf"),
                   help="only checkpoints up to here (million agent steps)")
    p.add_argument("--steps", type=int, default=RANDOM_STEPS, help="random steps of each env")
    p.add_argument("--n_envs", type=int, default=RANDOM_ENVS, help="envs played side by side")
    p.add_argument("--seed", type=int, default=0, help="env and action seed")
    p.add_argument("--actions", action="store_true",
                   help="also each action's mean probability, most likely first")
    a = p.parse_args(argv)
    import torch

    from a2c.checkpoint import CheckpointError, check_fits, load_policy_weights
    from envs import UnknownEnvError, action_names, check_seed, env_kind

    torch.set_num_threads(1)
    try:
        if a.steps <= 2 * KEEP_EVERY or a.n_envs <= 0:  # two full-stack screens of each env
            raise ValueError(f"--steps must be more than {2 * KEEP_EVERY} and --n_envs positive")
        check_seed(a.seed, a.n_envs)
        if a.start != a.start or a.stop != a.stop or a.start > a.stop:  # NaN, or none between
            raise ValueError("--from and --to must be numbers with --from at most --to")
        files, env_ids = [], set()
        for arg in a.policies:
            found, env_id, _ = find_policies(Path(arg), all_checkpoints=True)
            env_ids.add(a.env or env_id)
            files += [f for f in found if not f.stem.startswith(CHECKPOINT_PREFIX)
                      or a.start * 1e6 <= checkpoint_steps(f) <= a.stop * 1e6]
        if None in env_ids or len(env_ids) > 1:
            raise ValueError("give --env: only a run directory names its env, and all the "
                             "checkpoints must be of one env")
        env_id = env_ids.pop()
        env_kind(env_id)
        states = [(f, load_policy_weights(f)) for f in files]
        states = [(f, s) for f, s in states if a.start * 1e6 <= s["timesteps"] <= a.stop * 1e6]
        if not states:
            raise ValueError(f"no checkpoint from {a.start}M to {a.stop}M agent steps")
        for f, s in states:  # another env's checkpoint is refused before any play
            check_fits(env_id, s, f)
    except (ValueError, UnknownEnvError, CheckpointError) as e:
        print(f"{p.prog}: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    obs = random_play(env_id, a.steps, a.n_envs, a.seed)
    print(f"{env_id}: {len(obs)} observations of random play; L1, L2, ...: per ReLU layer, "
          "the share of its units positive on at least one of them (summarise_run's `alive %` "
          "counts the units firing on A2C's own last rollout, so it can differ)")
    for k, (f, s) in enumerate(sorted(states, key=lambda fs: fs[1]["timesteps"])):
        row = probe_checkpoint(env_id, s, f, obs)
        if k == 0:
            print(header(len(row.alive)))
        print(row.row())
        if a.actions:
            print(row.action_row(action_names(env_id)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
