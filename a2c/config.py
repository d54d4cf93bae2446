"""A2C's settings and the counters it shares, importable without torch (the supervising process
builds them)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


CHECKPOINT_PREFIX = "policy-"  # a policy checkpoint is policy-<agent steps, 12 digits>.pt
ALIVE_TAG = "alive_units/layer"  # + 1, 2, ...: the share of a torso layer's units that fired
# how much the policy's logits and value vary across a rollout's screens (near 0: it ignores what
# it sees; the logits start near 0 anyway, the policy head being initialised small)
LOGIT_SPREAD_TAG = "alive_units/logit_spread"
VALUE_SPREAD_TAG = "alive_units/value_spread"
GRAD_NORM_MAX_TAG = "losses/grad_norm_max"  # the largest gradient norm, before clipping, per dump
# Enduro: each episode's share of steps level with another car (pref_interface.labellers.alongside)
ALONGSIDE_SHARE_TAG = "charts/alongside_share"


def checkpoints(ckpt_dir: str | Path) -> list[Path]:
    """The policy checkpoint files in a directory, oldest first (their names carry the steps)."""
    return sorted(Path(ckpt_dir).glob(f"{CHECKPOINT_PREFIX}*.pt"))


def checkpoint_steps(path: Path) -> int:
    """The agent steps at which a policy checkpoint was saved (from its name)."""
    return int(path.stem.removeprefix(CHECKPOINT_PREFIX))


OPTIMIZERS = ("rmsprop_torch", "rmsprop_tf")  # torch's RMSprop, or TensorFlow's (the paper's)


@dataclass
class A2CConfig:
    """A2C hyperparameters; defaults are the paper's Atari settings (App. A.2) but the optimiser
    (torch's RMSprop, not TensorFlow's) and the rate's schedule (none by default), both said in the
    README, and where the paper gives none (the value loss's weight, the gradient's clip)."""

    n_envs: int = 16
    n_steps: int = 5  # steps per env per update
    gamma: float = 0.99
    lr: float = 7e-4
    rms_alpha: float = 0.99
    rms_eps: float = 1e-5
    optimizer: str = "rmsprop_torch"  # or "rmsprop_tf", as baselines' A2C (a2c/optim.py)
    ent_coef: float = 0.01
    vf_coef: float = 0.5  # the paper gives none: OpenAI baselines' A2C's, as the two below
    max_grad_norm: float = 0.5
    lr_zero_timesteps: float | None = None  # lr decays linearly to 0 here (paper: 80M); None: constant
    # lr rises linearly from 0 over these first agent steps (None: none), while RMSProp's mean
    # square warms (--lr_warmup_million_timesteps says why)
    lr_warmup_timesteps: float | None = None


@dataclass
class A2CRunConfig:
    """Everything the A2C process needs besides its queues."""

    env_id: str
    total_timesteps: int
    a2c: A2CConfig = field(default_factory=A2CConfig)
    seed: int = 0
    ckpt_dir: str = "policy"
    ckpt_interval: int = 1000  # updates between policy checkpoints
    ckpt_keep: int = 3  # the newest policy checkpoints kept (0: all)
    load_ckpt_dir: str | None = None
    start_weights: str | None = None  # weights a new run starts from (load_ckpt_dir comes first)
    torch_threads: int = 1
    env_threads: int = 1  # ale-py threads; 0: one per core
    # "fp32", "bf16" (autocast), or "auto": bf16 where the device has it natively
    precision: str = "auto"
    device: str = "cpu"  # where the policy acts and learns ("cuda": a GPU)
    hide_episode_ends: bool = False  # App. A: the agent sees one continuous episode
    revive_dead: bool = False  # a dead policy goes back to a live checkpoint (a2c/revive.py)
    learn: bool = True  # False: only act (e.g. the untrained policy making the first clips)


class A2CStats:
    """Shared counters the run's supervisor reads for the live status line."""

    def __init__(self, ctx, timesteps: int = 0):
        self.timesteps = ctx.Value("q", timesteps, lock=False)
        self.steps_per_sec = ctx.Value("d", 0.0, lock=False)
        self.episodes = ctx.Value("q", 0, lock=False)
        self.recent_return = ctx.Value("d", float("nan"), lock=False)
        # agent steps of the first of the latest checks (A2CAgent.check_alive) that found a
        # layer of the policy with no unit alive; -1: the latest check found every layer alive
        self.dead_since = ctx.Value("q", -1, lock=False)
        self.revivals = ctx.Value("q", 0, lock=False)  # dead policies put back (a2c/revive.py)
