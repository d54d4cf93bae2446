"""Every setting of a run in one typed object: its default, its help text and its flag.

The command line (`build_parser`), `settings.json`, `--resume`'s merge, docs/flags.md's tables
(`flag_tables`, checked by tests/test_readme.py) and the experiments all read `Settings`. A default
that is a paper rule or a process's own lives beside its concept (the processes' config classes)
and is read from there, so no two places can disagree.
"""
from __future__ import annotations

import argparse
import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from a2c.config import A2CConfig, A2CRunConfig
from pref_interface.player import PLAYER_KINDS
from pref_interface.config import InterfaceConfig
from reward_predictor.config import TrainerConfig

MODES = ("gather_initial_prefs", "pretrain_reward_predictor", "train_policy_with_preferences",
         "train_policy_with_original_rewards")
TRAINING_MODES = MODES[2:]  # the modes that train a policy
GROUPS = {"run": "run", "a2c": "A2C (defaults: the paper's, App. A.2)",
          "prefs": "preferences", "predictor": "reward predictor"}


def setting(default: Any, group: str, help: str, *, choices: tuple | None = None,
            metavar: str | None = None, negation: tuple[str, str] | None = None) -> Any:
    """A field of Settings: `negation` is the (flag, help) of a boolean's off switch."""
    return field(default=default, metadata=dict(group=group, help=help, choices=choices,
                                                metavar=metavar, negation=negation))


@dataclass
class Settings:
    """A run's settings. `mode` and `env_id` are the positional arguments; every other field is
    the flag `--<name>`."""

    mode: str | None = None
    env_id: str | None = None
    # run
    resume: str | None = setting(
        None, "run", "continue a stopped run from its last checkpoints with its saved settings "
        "(flags given now override them, e.g. --million_timesteps, except --log_dir, --run_name "
        "and --load_*)", metavar="RUN_DIR")
    log_dir: str | None = setting(None, "run", "directory for this run (must not exist yet)")
    run_name: str | None = setting(None, "run", "name of the run directory under runs/")
    seed: int = setting(0, "run", "random seed")
    torch_threads: int = setting(
        A2CRunConfig.torch_threads, "run", "torch threads in the A2C process (2 is ~25% faster "
        "for plain A2C on an otherwise idle 2-core machine, but stalls badly when the cores are "
        "busy)")
    env_threads: int = setting(A2CRunConfig.env_threads, "run", "ale-py env threads")
    precision: str = setting(
        A2CRunConfig.precision, "run", "arithmetic of the policy and reward nets; auto: bfloat16 "
        "autocast where the device has native bf16 (a CPU with AVX512-BF16, a GPU from Ampere "
        "on), else fp32",
        choices=("auto", "fp32", "bf16"))
    device: str = setting(
        A2CRunConfig.device, "run", "where the policy acts and learns: cpu, cuda, cuda:N, or auto "
        "(cuda when torch sees a GPU)")
    # A2C
    n_envs: int = setting(A2CConfig.n_envs, "a2c", "parallel environments")
    million_timesteps: float = setting(
        10.0, "a2c", "agent steps to train for, in millions (summed over envs)")
    ent_coef: float = setting(A2CConfig.ent_coef, "a2c", "entropy bonus coefficient")
    lr: float = setting(A2CConfig.lr, "a2c", "RMSProp learning rate")
    optimizer: str = setting(
        A2CConfig.optimizer, "a2c", "A2C's RMSProp: torch.optim.RMSprop, or TensorFlow's (mean "
        "square from 1, eps inside the root), which baselines' A2C and so the paper used",
        choices=("rmsprop_torch", "rmsprop_tf"))
    lr_zero_million_timesteps: float | None = setting(
        None, "a2c", "decay the lr linearly to zero at this many million steps (the paper: 80); "
        "unset: a constant lr")
    load_policy_ckpt_dir: str | None = setting(
        None, "a2c", "start from the newest policy checkpoint here")
    policy_ckpt_interval: int = setting(
        A2CRunConfig.ckpt_interval, "a2c", "updates between policy checkpoints")
    policy_ckpts_kept: int = setting(
        A2CRunConfig.ckpt_keep, "a2c", "the newest policy checkpoints kept in RUN_DIR/policy (0: "
        "all, to score the policy against agent steps with experiments.evaluate "
        "--all_checkpoints)")
    revive_dead_policy: bool = setting(
        A2CRunConfig.revive_dead, "a2c", "when a layer of the policy has no unit firing, even on "
        "random play's screens, go back to the newest kept checkpoint that is still alive (not "
        "the paper's; on by default for Pong)",
        negation=("--no_revive_dead_policy", "never go back to an earlier checkpoint (the paper)"))
    render_episodes: bool = setting(
        False, "a2c", "loop the agent's latest full episode (env 0) in a second window (needs a "
        "display; without one the run goes on without it)")
    # preferences
    synthetic_prefs: bool = setting(
        InterfaceConfig.synthetic, "prefs",
        "label clip pairs by their true reward instead of asking a person")
    clip_player: str = setting(
        "auto", "prefs", "where a person watches the clip pairs: a window, the terminal in "
        "colour, or a page in the browser (web); auto: a window when a display is available",
        choices=PLAYER_KINDS)
    web_host: str = setting(
        "127.0.0.1", "prefs", "--clip_player web: the address the page listens on (reach a "
        "remote run's page by SSH port forwarding rather than opening this)")
    web_port: int = setting(0, "prefs", "--clip_player web: the page's port (0: a free one)")
    n_initial_prefs: int = setting(
        500, "prefs", "labels gathered from the untrained policy before pretraining (App. A)")
    max_prefs: int = setting(
        TrainerConfig.max_prefs, "prefs",
        "the predictor trains on the latest this many labels (App. A)")
    max_segs: int = setting(
        InterfaceConfig.max_segs, "prefs",
        "recent clips kept by the preference interface to draw pairs from")
    max_pairs_per_clip: int = setting(
        InterfaceConfig.max_pairs_per_clip, "prefs", "offer each clip in at most this many "
        "pairs, so that synthetic labels made faster than clips arrive wait for new clips (0: no "
        "limit)")
    gather_clips: str = setting(
        "rotate", "prefs", "while gathering the initial labels: rotate: a clip per 25 steps from "
        "the envs in turn, as in training; every_env: a clip per 25 steps from each env, N times "
        "faster but from fewer episodes", choices=("rotate", "every_env"))
    teacher: str = setting(
        InterfaceConfig.teacher, "prefs", "synthetic labeller: oracle, alongside, "
        "boltzmann:beta=B, mistake:eps=E, skip:threshold=X, equal:threshold=X or myopic:gamma=G "
        "(B-Pref teachers)")
    episode_end_penalty: float | None = setting(
        None, "prefs", "synthetic labels: subtracted from a clip's true return per episode end "
        "in it (App. A); default: 1 for Atari games except Pong, else 0")
    queries: str = setting(
        InterfaceConfig.queries, "prefs", "pairs: each query a fresh pair of clips; sort: each "
        "new clip is placed among the sorted clips by comparisons (a binary search, "
        "rl-teacher-atari's sorting tree), each stored as an ordinary label",
        choices=("pairs", "sort"))
    query_selection: str = setting(
        InterfaceConfig.selection, "prefs",
        "pairs to label: random, or those the ensemble disagrees on most (App. A)",
        choices=("random", "disagreement"))
    oversampling: int = setting(
        InterfaceConfig.oversample, "prefs",
        "disagreement draws this many times more candidate pairs than it shows")
    label_schedule: str = setting(
        InterfaceConfig.label_schedule, "prefs", "none: label as fast as the predictor trains; "
        "constant or annealed (App. A: rate ~ 5e6/(T+5e6), T frames) spend --max_labels over the "
        "run", choices=("none", "constant", "annealed"))
    max_labels: int = setting(
        InterfaceConfig.max_labels, "prefs", "total label budget of a --label_schedule")
    anneal_every_frames: float = setting(
        float(InterfaceConfig.anneal_every_frames), "prefs", "annealed schedule: frames between "
        "rate decreases (App. A: 5e6; shorter runs such as MovingDot need a smaller value to "
        "anneal at all)")
    load_prefs_dir: str | None = setting(
        None, "prefs", "a run directory whose prefs.sqlite is copied into this run and used")
    # reward predictor
    ensemble_size: int = setting(TrainerConfig.n_members, "predictor", "ensemble members (App. A)")
    n_initial_epochs: int = setting(
        200, "predictor", "pretraining epochs over the initial labels (App. A)")
    dropout: float = setting(
        TrainerConfig.dropout, "predictor",
        "dropout on the conv layers (the paper's Atari setting: 0.5)")
    batchnorm: bool = setting(
        TrainerConfig.batchnorm, "predictor", "batch norm on the conv layers",
        negation=("--no_batchnorm", "no batch norm (where the environment's settings turn it on)"))
    reward_predictor_learning_rate: float = setting(
        TrainerConfig.lr, "predictor", "Adam learning rate of each member")
    load_reward_predictor_ckpt_dir: str | None = setting(
        None, "predictor", "a run directory (or its reward_predictor/ directory) to load the "
        "predictor from; skips pretraining")
    reward_predictor_ckpt_interval: int = setting(
        TrainerConfig.ckpt_interval, "predictor", "predictor training steps between checkpoints")
    frozen_reward_predictor: bool = setting(
        False, "predictor", "train the policy on the loaded predictor without collecting labels "
        "or training the predictor")
    adaptive_l2: bool = setting(
        TrainerConfig.adaptive_l2, "predictor", "adjust each member's L2 to keep validation loss "
        "at 1.1-1.5x training loss (App. A; starts at 1e-4)",
        negation=("--no_adaptive_l2", "train the predictor without L2 regularisation"))
    implied_pairs: bool = setting(
        TrainerConfig.implied_pairs, "predictor", "with --queries sort: each member's batch also "
        "holds as many pairs implied by the sorted order (clips in different classes) as labels")
    predictor_loss: str = setting(
        TrainerConfig.loss, "predictor", "with --queries sort: preference (the paper's loss on "
        "labels), rank (rl-teacher-atari's regression of sorted clips' returns on their rank "
        "through the normal quantile, instead) or both", choices=("preference", "rank", "both"))
    label_noise: float = setting(
        TrainerConfig.label_noise, "predictor", "assumed chance the labeller answered at random "
        "(App. A: 0.1); 0 gives the plain Bradley-Terry model")
    show_episode_ends: bool = setting(
        False, "predictor", "let A2C see episode ends (the paper hides them and life losses: one "
        "continuous episode); life loss is never an episode end")
    reward_std: float = setting(
        TrainerConfig.reward_std, "predictor",
        "std the predicted reward is normalised to (App. A.2: 0.05 for Atari)")
    reward_predictor_duty: float = setting(
        TrainerConfig.duty, "predictor", "fraction of wall-clock time the trainer spends training "
        "while the policy trains (it rests the rest, leaving the cores to A2C)")
    min_predictor_labels_per_step: float = setting(
        0.0, "predictor", "a floor on predictor training: A2C waits before each rollout while "
        "each member has trained on fewer labels than this per agent step (the paper's pace is "
        "about 0.1, App. A; 0: A2C never waits)")
    max_predictor_labels_per_step: float = setting(
        0.0, "predictor", "a ceiling on predictor training: the trainer rests while each member "
        "has trained on more labels than this per agent step (0: none; never below the floor); "
        "with the floor at the same value the pace no longer depends on the machine")
    predictor_pace_unit: str = setting(
        "member", "predictor", "what --min_predictor_labels_per_step counts: the labels each "
        "member trains on, or those of all members together (App. A.2 says \"the predictor\" "
        "processes about 1 label per 10 steps)", choices=("member", "ensemble"))
    reward_predictor_keep_freed_memory: bool = setting(
        TrainerConfig.keep_freed_memory, "predictor", "the predictor's trainer keeps the memory "
        "it frees for its next step: on Pong its steps are about 10% faster and it holds about "
        "300 MB more (docs/results.md)")
    reward_predictor_threads: int = setting(
        TrainerConfig.torch_threads, "predictor", "torch threads in the reward-predictor trainer "
        "process; in pretraining and while A2C waits for it, it takes --torch_threads's too as "
        "long as that makes its steps faster")
    reward_predictor_device: str = setting(
        TrainerConfig.device, "predictor", "where the trainer trains the predictor: cpu, cuda, "
        "cuda:N, or auto (cuda when torch sees a GPU); A2C still computes rewards on the CPU")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, saved: dict[str, Any]) -> "Settings":
        """A saved run's settings; a setting newer than the run takes its default, and one the
        project no longer has is dropped."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in saved.items() if k in names})


DEFAULTS = Settings()


def flag_fields() -> list:
    return [f for f in fields(Settings) if f.metadata]


def unused_settings(mode: str, env_kind: str, names: list[str]) -> list[str]:
    """Of these settings, those that do nothing in this run: the preference and predictor ones
    when the policy learns from the game's reward, and batch norm and dropout for MovingDot's
    predictor (a net of hand features without either)."""
    groups = {f.name: f.metadata["group"] for f in flag_fields()}
    return [n for n in names
            if (mode == "train_policy_with_original_rewards"
                and groups.get(n) in ("prefs", "predictor"))
            or (env_kind == "moving_dot" and n in ("batchnorm", "dropout"))]


def finite_float(text: str) -> float:
    """A float flag's value: any finite number (nan and inf would pass every range check)."""
    value = float(text)
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


def build_parser(parser_class: type = argparse.ArgumentParser, *, with_defaults: bool = True,
                 **kwargs: Any) -> argparse.ArgumentParser:
    """The command line, made from Settings: one flag per field (two for a boolean with an off
    switch, which exclude each other), in the field's group, with its default and help. Without
    `with_defaults` the parsed namespace holds only the flags given. A flag is never matched by a
    prefix of its name."""
    p = parser_class(allow_abbrev=False, **kwargs)

    def default(value: Any) -> Any:
        return value if with_defaults else argparse.SUPPRESS
    p.add_argument("mode", nargs="?", default=default(None), help=f"one of: {', '.join(MODES)}")
    p.add_argument("env_id", nargs="?", default=default(None),
                   help="MovingDotNoFrameskip-v0 (or MovingDot-v0), PongNoFrameskip-v4, "
                        "EnduroNoFrameskip-v4 or any <Game>NoFrameskip-v4")
    groups = {key: p.add_argument_group(title) for key, title in GROUPS.items()}
    for f in flag_fields():
        m, g = f.metadata, groups[f.metadata["group"]]
        flag, help_text = f"--{f.name}", m["help"].replace("%", "%%")
        if f.type == "bool":
            pair = g.add_mutually_exclusive_group() if m["negation"] else g
            pair.add_argument(flag, action="store_true", default=default(f.default),
                              help=help_text)
            if m["negation"]:
                off, off_help = m["negation"]
                pair.add_argument(off, dest=f.name, action="store_false", help=off_help,
                                  default=default(f.default))
            continue
        kind = {"int": int, "float": finite_float, "float | None": finite_float}.get(f.type)
        g.add_argument(flag, type=kind, default=default(f.default), choices=m["choices"],
                       metavar=m["metavar"], help=help_text)
    return p


def flag_tables() -> str:
    """The flags as docs/flags.md's markdown tables, one per group, defaults included."""
    out = []
    for key, title in GROUPS.items():
        out += [f"**{title[0].upper() + title[1:]}**", "", "| flag | default | meaning |",
                "|---|---|---|"]
        for f in flag_fields():
            if f.metadata["group"] != key:
                continue
            flag = f"`--{f.name}`"
            if f.metadata["choices"]:
                flag += f" ({', '.join(f.metadata['choices'])})"
            if f.metadata["negation"]:
                flag += f" / `{f.metadata['negation'][0]}`"
            default = {None: "", True: "on", False: "off"}.get(f.default, f.default) \
                if f.default is None or isinstance(f.default, bool) else f.default
            out.append(f"| {flag} | {default} | {f.metadata['help'].replace('|', '/')} |")
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


FLAG_TABLES_BEGIN, FLAG_TABLES_END = "<!-- begin flag tables -->\n", "<!-- end flag tables -->"


def with_flag_tables(doc: str) -> str:
    """docs/flags.md's text with the tables between its two markers made anew."""
    start = doc.index(FLAG_TABLES_BEGIN) + len(FLAG_TABLES_BEGIN)
    return doc[:start] + flag_tables() + doc[doc.index(FLAG_TABLES_END):]


if __name__ == "__main__":  # python -m launch.settings: docs/flags.md's tables made anew
    from pathlib import Path

    doc = Path(__file__).resolve().parent.parent / "docs" / "flags.md"
    doc.write_text(with_flag_tables(doc.read_text()))
    print(f"wrote the flag tables into {doc}")
