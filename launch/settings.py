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
from typing import Any, Callable

from a2c.config import OPTIMIZERS, A2CConfig, A2CRunConfig
from pref_interface.config import LabellingConfig
from pref_interface.labellers.player import PLAYER_KINDS
from pref_interface.queries.modes import QUERY_MODES
from pref_interface.queries.schedule import KINDS as SCHEDULE_KINDS
from pref_interface.queries.selection import SELECTIONS
from reward_predictor.config import LOSSES, PACE_UNITS, TrainerConfig
from runtime.precision import PRECISIONS

MODES = ("gather_initial_prefs", "pretrain_reward_predictor", "train_policy_with_preferences",
         "train_policy_with_original_rewards")
TRAINING_MODES = MODES[2:]  # the modes that train a policy
GROUPS = {"run": "run", "a2c": "A2C (defaults: the paper's, App. A.2)",
          "prefs": "preferences", "predictor": "reward predictor"}


# A setting's own check: what its value must be ("must be positive"), or None when it is fine.
# Rules between settings (a seed that fits the envs, sorting's options) are in launch/cli.py.
Check = Callable[[Any], "str | None"]


def positive(v: float) -> str | None:
    return None if v > 0 else "must be positive"


def non_negative(v: float) -> str | None:
    return None if v >= 0 else "must not be negative"


def at_least_one(v: int) -> str | None:
    return None if v >= 1 else "must be at least 1"


def a_pair(v: int) -> str | None:
    return None if v >= 2 else "must be at least 2 (a pair of clips)"


def fraction(v: float) -> str | None:
    return None if 0.0 <= v < 1.0 else "must be in [0, 1)"


def open_fraction(v: float) -> str | None:
    return None if 0.0 < v < 1.0 else "must be in (0, 1)"


def share(v: float) -> str | None:
    return None if 0.0 < v <= 1.0 else "must be in (0, 1]"


def port(v: int) -> str | None:
    return None if 0 <= v <= 65535 else "must be in [0, 65535]"


def plain_name(v: str) -> str | None:
    return None if v not in ("", ".", "..") and "/" not in v else \
        "is a plain name under runs/ (--log_dir takes a path)"


def not_empty(v: str) -> str | None:
    return None if v else "is empty"


def labeller_names(v: str) -> str | None:
    from pref_interface.labellers.team import parse_labellers

    try:
        parse_labellers(v)
    except ValueError as e:
        return f"is not a list of labellers: {e}"
    return None


def teacher_spec(v: str) -> str | None:
    from pref_interface.labellers.teachers import make_teacher

    try:
        make_teacher(v)
    except ValueError as e:
        return f"is not a teacher: {e}"
    return None


def setting(default: Any, group: str, help: str, *, choices: tuple | None = None,
            metavar: str | None = None, negation: tuple[str, str] | None = None,
            check: Check | None = None, old_name: str | None = None) -> Any:
    """A field of Settings: `negation` is the (flag, help) of a boolean's off switch; `check`,
    the rule its value keeps (unset values are not checked); `old_name`, the name it had before,
    still taken as a flag (not shown in --help) and read from older runs' settings.json."""
    return field(default=default, metadata=dict(group=group, help=help, choices=choices,
                                                metavar=metavar, negation=negation, check=check,
                                                old_name=old_name))


@dataclass
class Settings:
    """A run's settings. `mode` and `env_id` are the positional arguments; every other field is
    the flag `--<name>`."""

    mode: str | None = None
    env_id: str | None = None
    # run
    resume: str | None = setting(
        None, "run", "continue the stopped run in RUN_DIR from its last checkpoints and saved "
        "settings, which flags given now override (all but --log_dir, --run_name, --load_* and "
        "--start_policy)",
        metavar="RUN_DIR")
    log_dir: str | None = setting(None, "run", "directory for this run (must not exist yet)", check=not_empty)
    run_name: str | None = setting(None, "run", "name of the run directory under runs/", check=plain_name)
    seed: int = setting(0, "run", "random seed (env i gets seed + i)")
    torch_threads: int = setting(
        A2CRunConfig.torch_threads, "run", "torch threads in the A2C process", check=positive)
    env_threads: int = setting(
        A2CRunConfig.env_threads, "run", "ale-py threads stepping the envs (0: one per core)",
        check=non_negative)
    precision: str = setting(
        A2CRunConfig.precision, "run", "arithmetic of the policy and reward nets, where auto is "
        "bfloat16 autocast on a device with native bf16 (a CPU with AVX512-BF16, a GPU from "
        "Ampere on) and fp32 elsewhere",
        choices=PRECISIONS)
    device: str = setting(
        A2CRunConfig.device, "run", "where the policy acts and learns: cpu, cuda, cuda:N, or auto "
        "(cuda when torch sees a GPU)")
    # A2C
    n_envs: int = setting(A2CConfig.n_envs, "a2c", "parallel environments", check=positive)
    million_timesteps: float = setting(
        10.0, "a2c", "agent steps to train for, in millions (summed over envs)", check=positive)
    ent_coef: float = setting(A2CConfig.ent_coef, "a2c", "entropy bonus coefficient", check=non_negative)
    lr: float = setting(A2CConfig.lr, "a2c", "RMSProp learning rate", check=positive)
    optimizer: str = setting(
        A2CConfig.optimizer, "a2c", "A2C's RMSProp: torch.optim.RMSprop, or TensorFlow's (mean "
        "square from 1, eps inside the root) as in baselines' A2C, the paper's",
        choices=OPTIMIZERS)
    lr_zero_million_timesteps: float | None = setting(
        None, "a2c", "million agent steps at which the learning rate, decaying linearly, reaches "
        "zero (App. A.2: 80; unset: a constant rate)", check=positive)
    lr_warmup_million_timesteps: float | None = setting(
        None, "a2c", "million agent steps over which the learning rate first rises linearly from "
        "0 (unset or 0: none, the paper); PyTorch's RMSProp moves every weight by about ten times "
        "the rate in its first steps", check=non_negative)
    load_policy_ckpt_dir: str | None = setting(
        None, "a2c", "start from the newest policy checkpoint in this directory, or in this run "
        "directory's policy/")
    start_policy: str | None = setting(
        None, "a2c", "a new run's policy starts from these weights (a run directory, a checkpoint "
        "or a weights file such as models/*.pt) at 0 agent steps, with a fresh optimiser: to "
        "teach a policy that plays the game a new behaviour")
    policy_ckpt_interval: int = setting(
        A2CRunConfig.ckpt_interval, "a2c", "A2C updates between policy checkpoints", check=positive)
    policy_ckpts_kept: int = setting(
        A2CRunConfig.ckpt_keep, "a2c",
        "how many of the newest policy checkpoints RUN_DIR/policy keeps (0: all)", check=non_negative)
    revive_dead_policy: bool = setting(
        A2CRunConfig.revive_dead, "a2c", "when a layer of the policy has no unit firing, even on "
        "random play's screens, go back to the newest kept checkpoint still alive and not blind "
        "(its value varying at least a tenth as much as a fresh network's; not in the paper)",
        negation=("--no_revive_dead_policy", "never go back to an earlier checkpoint (the paper)"))
    render_episodes: bool = setting(
        False, "a2c", "loop the agent's latest full episode (env 0) in a second window when a "
        "display is available")
    # preferences
    synthetic_prefs: bool = setting(
        LabellingConfig.synthetic, "prefs",
        "label clip pairs by their true reward instead of asking a person")
    clip_player: str = setting(
        "auto", "prefs", "where a person watches the clip pairs: a window, the terminal in "
        "colour, a page in the browser (web), or auto, a window when a display is available",
        choices=PLAYER_KINDS)
    web_host: str = setting(
        "127.0.0.1", "prefs", "the address the labelling page listens on with --clip_player web "
        "(reach a remote run's page by SSH port forwarding)")
    web_port: int = setting(
        0, "prefs", "the labelling page's port with --clip_player web (0: a free one)", check=port)
    labellers: str | None = setting(
        None, "prefs", "several people label at once, each on their own labelling page: their "
        "names, comma-separated (ann,bob), or a count (3: p1, p2, p3); implies --clip_player web",
        metavar="NAMES", check=labeller_names)
    overlap: float = setting(
        0.0, "prefs", "with --labellers, the share of pairs shown to two people, whose agreement "
        "is measured", check=fraction)
    leave_out: str | None = setting(
        None, "prefs", "labellers whose labels the predictor does not train on (their labels "
        "stay in the store), comma-separated; e.g. on --resume, after their agreement was low",
        metavar="NAMES", check=labeller_names)
    labeller_timeout: float = setting(
        60.0, "prefs", "with --labellers, seconds after a person's page stops asking before "
        "their pairs go to another", check=positive)
    n_initial_prefs: int = setting(
        500, "prefs", "labels gathered from the untrained policy before pretraining (App. A)", check=positive)
    max_prefs: int = setting(
        TrainerConfig.max_prefs, "prefs",
        "labels the predictor holds, the latest (App. A); about 1/e of them are validation "
        "labels, never trained on", check=positive)
    max_clips: int = setting(
        LabellingConfig.max_clips, "prefs",
        "recent clips kept by labelling to draw pairs from", check=a_pair, old_name="max_segs")
    max_pairs_per_clip: int = setting(
        LabellingConfig.max_pairs_per_clip, "prefs", "offer each clip in at most this many "
        "pairs, so that synthetic labels made faster than clips arrive wait for new clips (0: no "
        "limit)", check=non_negative)
    gather_clips: str = setting(
        "rotate", "prefs", "how the initial labels' clips are cut: rotate, one per 25 steps from "
        "the envs in turn (as in training), or every_env, one per 25 steps from each env (N times "
        "faster, from fewer episodes)", choices=("rotate", "every_env"))
    teacher: str = setting(
        LabellingConfig.teacher, "prefs", "synthetic labeller: oracle, alongside, "
        "alongside_shaped:closing=C (Enduro: level steps, plus C for closing in on a car), "
        "alongside_near:near=W (Enduro: level steps, plus W times each step's nearness to a car), "
        "alongside_hold:hold=H (Enduro: alongside_near's, plus H times nearness times how nearly "
        "the nearest car's speed is held), "
        "boltzmann:beta=B, mistake:eps=E, skip:threshold=X, equal:threshold=X or myopic:gamma=G "
        "(B-Pref teachers)", check=teacher_spec)
    episode_end_penalty: float | None = setting(
        None, "prefs", "subtracted from a clip's true return for each episode end in it when "
        "labels are synthetic (App. A; unset: 1 for Atari games except Pong, else 0)")
    queries: str = setting(
        LabellingConfig.queries, "prefs", "pairs: each query a fresh pair of clips; sort: each new "
        "clip placed among the sorted ones by binary search (rl-teacher-atari's sorting tree), "
        "each comparison stored as a label",
        choices=QUERY_MODES)
    query_selection: str = setting(
        LabellingConfig.query_selection, "prefs",
        "pairs to label: random, those the ensemble disagrees on most (App. A), those whose "
        "mean predicted preference is most uncertain (B-Pref's entropy), or those least like any "
        "pair shown before (B-Pref's k-center)",
        choices=SELECTIONS)
    oversampling: int = setting(
        LabellingConfig.oversampling, "prefs",
        "disagreement, entropy and k-center draw this many times more candidate pairs than they "
        "show (App. A: 10)", check=at_least_one)
    label_schedule: str = setting(
        LabellingConfig.label_schedule, "prefs", "how labels are spread over the run: none "
        "labels as fast as the predictor trains, constant and annealed (App. A: rate ~ "
        "5e6/(T+5e6), T frames) spend --max_labels by its end",
        choices=("none", *SCHEDULE_KINDS))
    max_labels: int = setting(
        LabellingConfig.max_labels, "prefs",
        "labels a --label_schedule spends over the run, the initial ones included", check=at_least_one)
    anneal_every_frames: float = setting(
        float(LabellingConfig.anneal_every_frames), "prefs",
        "emulator frames between the annealed schedule's rate decreases (App. A: 5e6)", check=positive)
    load_prefs_dir: str | None = setting(
        None, "prefs", "a run directory whose prefs.sqlite is copied into this run and used")
    demonstrations: str | None = setting(
        LabellingConfig.demonstrations, "prefs", "a file of clips of your own play (demonstrate.py) "
        "or a scripted driver's (python -m experiments.record_demonstrations) that join the clips "
        "pairs are drawn from, labelled like the agent's", metavar="FILE")
    demonstration_share: float = setting(
        LabellingConfig.demonstration_share, "prefs",
        "with --demonstrations, the share of the clips joining the pool that are demonstrations",
        check=open_fraction)
    # reward predictor
    ensemble_size: int = setting(TrainerConfig.ensemble_size, "predictor", "ensemble members (App. A)",
                                 check=positive)
    n_initial_epochs: int = setting(
        200, "predictor", "pretraining epochs over the initial labels (App. A)", check=non_negative)
    dropout: float = setting(
        TrainerConfig.dropout, "predictor",
        "dropout rate on the conv layers (App. A.2: 0.5 for Atari)", check=fraction)
    batchnorm: bool = setting(
        TrainerConfig.batchnorm, "predictor", "batch norm on the conv layers (App. A.2)",
        negation=("--no_batchnorm", "no batch norm (where the environment's settings turn it on)"))
    reward_predictor_learning_rate: float = setting(
        TrainerConfig.lr, "predictor", "Adam learning rate of each member", check=positive)
    load_reward_predictor_ckpt_dir: str | None = setting(
        None, "predictor", "a run directory (or its reward_predictor/ directory) whose predictor "
        "is loaded in place of pretraining")
    reward_predictor_ckpt_interval: int = setting(
        TrainerConfig.ckpt_interval, "predictor", "predictor training steps between checkpoints "
        "(0: only when the trainer stops)", check=non_negative)
    frozen_reward_predictor: bool = setting(
        False, "predictor", "train the policy on the loaded predictor without collecting labels "
        "or training the predictor")
    teacher_reward: bool = setting(
        False, "predictor", "with --synthetic_prefs and an Enduro teacher (--teacher alongside, "
        "alongside_shaped, alongside_near or alongside_hold): train the policy on the teacher's "
        "own per-step score, scaled as r̂ is, without labels or a predictor (about what a "
        "predictor that learnt the teacher perfectly would give; its episode sums are "
        "charts/predicted_return)")
    adaptive_l2: bool = setting(
        TrainerConfig.adaptive_l2, "predictor", "adjust each member's L2 weight, from 1e-4, to "
        "keep its validation loss at 1.1-1.5x its training loss (App. A)",
        negation=("--no_adaptive_l2", "train the predictor without L2 regularisation"))
    implied_pairs: bool = setting(
        TrainerConfig.implied_pairs, "predictor", "with --queries sort, add to each member's "
        "batch as many pairs implied by the sorted order (clips in different classes) as labels")
    predictor_loss: str = setting(
        TrainerConfig.loss, "predictor", "the predictor's loss with --queries sort: preference "
        "(the paper's, on labels), rank (rl-teacher-atari's regression of sorted clips' returns "
        "on their rank) or both", choices=LOSSES)
    label_noise: float = setting(
        TrainerConfig.label_noise, "predictor", "assumed chance that the labeller answered at "
        "random (App. A: 0.1; 0: the plain Bradley-Terry model)", check=fraction)
    show_episode_ends: bool = setting(
        False, "predictor", "let A2C see episode ends (game overs and time limits, never life "
        "losses), which the paper hides (App. A); A2C on the game's reward always sees them")
    reward_std: float = setting(
        TrainerConfig.reward_std, "predictor",
        "std the predicted reward is normalised to (App. A.2: 0.05 for Atari)", check=positive)
    reward_predictor_duty: float = setting(
        TrainerConfig.duty, "predictor", "fraction of wall-clock time the trainer trains while "
        "the policy trains, resting the rest to leave the cores to A2C", check=share)
    min_predictor_labels_per_step: float = setting(
        0.0, "predictor", "labels per agent step each member must have trained on before A2C's "
        "next rollout, which waits until then (App. A.2: about 0.1; 0: A2C never waits)", check=non_negative)
    max_predictor_labels_per_step: float = setting(
        0.0, "predictor", "labels per agent step each member may train on before the trainer "
        "rests until A2C catches up (0: no ceiling; never below the floor)", check=non_negative)
    predictor_pace_unit: str = setting(
        "member", "predictor", "what the two pace flags count: the labels each member trains "
        "on, or those of all members together (App. A.2's \"the predictor\" may mean either)",
        choices=PACE_UNITS)
    reward_predictor_keep_freed_memory: bool = setting(
        TrainerConfig.keep_freed_memory, "predictor", "the predictor's trainer keeps the memory "
        "it frees for its next steps, which are then faster but hold more (docs/results.md)")
    reward_predictor_threads: int = setting(
        TrainerConfig.torch_threads, "predictor", "torch threads of the reward-predictor trainer, "
        "which in pretraining and while A2C waits for it also takes --torch_threads's as long as "
        "that makes its steps faster", check=positive)
    reward_predictor_device: str = setting(
        TrainerConfig.device, "predictor", "where the trainer trains the predictor: cpu, cuda, "
        "cuda:N, or auto (cuda when torch sees a GPU), while A2C computes r̂ on the CPU")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, saved: dict[str, Any]) -> "Settings":
        """A saved run's settings; a setting newer than the run takes its default, and one the
        project no longer has is dropped. TypeError naming a value of the wrong kind."""
        types = {f.name: str(f.type) for f in fields(cls)}
        renamed = {f.metadata["old_name"]: f.name for f in flag_fields() if f.metadata["old_name"]}
        saved = {renamed.get(k, k): v for k, v in saved.items()}
        kept = {k: v for k, v in saved.items() if k in types}
        for name, value in kept.items():  # a file edited by hand: "16" where 16 belongs
            if not _of_type(value, types[name]):
                raise TypeError(f"{name} is {value!r}, not {types[name]}")
        return cls(**kept)


DEFAULTS = Settings()


def _of_type(value: Any, annotation: str) -> bool:
    """Whether a saved JSON value fits a setting's annotation (`int`, `float | None`, ...)."""
    kinds = setting_kind(annotation)[1]
    if isinstance(value, bool):  # an int to isinstance, yet never a number's value
        return bool in kinds
    return isinstance(value, kinds)


def invalid_setting(s: Settings) -> str | None:
    """The first setting that breaks its own check, as "--name must be ..., got value" (the value
    named once: not again where the check's words name it)."""
    for f in fields(s):
        check, value = f.metadata.get("check"), getattr(s, f.name)
        if check is not None and value is not None:
            problem = check(value)
            if problem:
                return f"--{f.name} {problem}" + (
                    "" if repr(value) in problem else f", got {value!r}")
    return None


def flag_fields() -> list:
    return [f for f in fields(Settings) if f.metadata]


# A2C's settings that act only on its updates: nothing where the policy only plays (gathering).
POLICY_LEARNING = ("ent_coef", "lr", "optimizer", "lr_zero_million_timesteps",
                   "lr_warmup_million_timesteps", "revive_dead_policy")


def unused_settings(mode: str, env_kind: str, names: list[str]) -> list[str]:
    """Of these settings, those that do nothing in this run: the preference and predictor ones
    when the policy learns from the game's reward, A2C's when no policy plays (pretraining) and
    those of its updates when it plays without learning (gathering), and batch norm and dropout
    for MovingDot's predictor (a net of hand features without either)."""
    groups = {f.name: f.metadata["group"] for f in flag_fields()}
    return [n for n in names
            if (mode == "train_policy_with_original_rewards"
                and groups.get(n) in ("prefs", "predictor"))
            or (mode == "pretrain_reward_predictor" and groups.get(n) == "a2c")
            or (mode == "gather_initial_prefs" and n in POLICY_LEARNING)
            or (env_kind == "moving_dot" and n in ("batchnorm", "dropout"))]


def idle_settings(s: Settings, names: list[str]) -> list[str]:
    """Of these settings, those that do nothing because what they work with is not set, each
    said as "--overlap does nothing without two or more --labellers"."""
    from pref_interface.labellers.team import parse_labellers

    web = s.clip_player == "web" or bool(s.labellers)
    team = len(parse_labellers(s.labellers)) if s.labellers else 0  # (checked before this)
    needs = {"overlap": (team > 1, "without two or more --labellers"),
             "labeller_timeout": (bool(s.labellers), "without --labellers"),
             "web_host": (web, "without the labelling page (--clip_player web or --labellers)"),
             "web_port": (web, "without the labelling page (--clip_player web or --labellers)"),
             "demonstration_share": (bool(s.demonstrations), "without --demonstrations"),
             "clip_player": (not s.synthetic_prefs, "with --synthetic_prefs (nobody watches)")}
    return [f"--{n} does nothing {needs[n][1]}" for n in names
            if n in needs and not needs[n][0]]


def finite_float(text: str) -> float:
    """A float flag's value: any finite number (nan and inf would pass every range check)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


# Each annotation a setting may have: what its flag's text is parsed into (None: the text itself,
# or a switch) and the JSON values a saved run may hold for it.
_KINDS: dict[str, tuple[Callable[[str], Any] | None, tuple[type, ...]]] = {
    "bool": (None, (bool,)),
    "int": (int, (int,)),
    "float": (finite_float, (int, float)),
    "float | None": (finite_float, (int, float, type(None))),
    "str": (None, (str,)),
    "str | None": (None, (str, type(None))),
}


def setting_kind(annotation: str) -> tuple[Callable[[str], Any] | None, tuple[type, ...]]:
    """A setting's annotation as (its flag's parser, the JSON types of its saved value)."""
    if annotation not in _KINDS:
        raise TypeError(f"a setting annotated {annotation!r}: launch/settings.py reads only "
                        f"{', '.join(_KINDS)}")
    return _KINDS[annotation]


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
        kind = setting_kind(f.type)[0]
        g.add_argument(flag, type=kind, default=default(f.default), choices=m["choices"],
                       metavar=m["metavar"], help=help_text)
        if m["old_name"]:  # the flag's earlier name, for older commands and scripts
            g.add_argument(f"--{m['old_name']}", dest=f.name, type=kind, default=default(f.default),
                           choices=m["choices"], help=argparse.SUPPRESS)
    return p


def keyword_flags(keywords: dict[str, Any]) -> list[str]:
    """The command-line flags that give these settings, named without the dashes
    (`{"batchnorm": False, "seed": 3}` -> `["--no_batchnorm", "--seed", "3"]`), for
    `build_parser` to parse: a boolean is its flag or its off switch, an unset (None) value no
    flag. ValueError, in one line, for an unknown setting or a boolean that has no flag for the
    value."""
    declared = {f.name: f for f in flag_fields()}
    argv: list[str] = []
    for name, value in keywords.items():
        f = declared.get(name)
        if f is None:
            raise ValueError(f"unknown setting {name!r} (run.py's flags, without the dashes, are "
                             "the settings)")
        if f.type == "bool":
            if not isinstance(value, bool):
                raise ValueError(f"{name} is True or False, got {value!r}")
            off = f.metadata["negation"]
            if value:
                argv.append(f"--{name}")
            elif off is not None:
                argv.append(off[0])
            elif f.default:
                raise ValueError(f"{name} cannot be False")
        elif value is not None:
            argv += [f"--{name}", str(value)]
    return argv


ENV_KIND_NAMES = {"atari": "Atari games", "moving_dot": "MovingDot"}  # envs.env_kind's kinds


def unused_by(names: list[str]) -> tuple[list[str], list[str]]:
    """Where `unused_settings` says these settings do nothing: the modes that use none of them
    (on any environment), and the environment kinds on which none of them does anything."""
    modes = [m for m in MODES if unused_settings(m, "atari", names) == names]
    kinds = [k for k in ENV_KIND_NAMES
             if all(unused_settings(m, k, names) == names for m in MODES)]
    return modes, kinds


def flag_tables() -> str:
    """The flags as docs/flags.md's markdown tables, one per group, defaults included, with the
    modes and environments that do not use a group or a flag (`unused_settings`)."""
    out = [f"The modes: {', '.join(f'`{m}`' for m in MODES)}. A group or a flag that a mode "
           "or an environment does not use says so, and run.py notes such a flag when it is "
           "given, as it notes one given without what it works with (`--overlap` without "
           "`--labellers`).", ""]
    for key, title in GROUPS.items():
        group = [f for f in flag_fields() if f.metadata["group"] == key]
        out += [f"**{title[0].upper() + title[1:]}**", ""]
        modes, _ = unused_by([f.name for f in group])
        if modes:
            out += [f"Not used by {' or '.join(f'`{m}`' for m in modes)}.", ""]
        out += ["| flag | default | meaning |", "|---|---|---|"]
        for f in group:
            flag = f"`--{f.name}`"
            if f.metadata["choices"]:
                flag += f" ({', '.join(f.metadata['choices'])})"
            meaning = f.metadata["help"]
            if f.metadata["negation"]:
                off, off_help = f.metadata["negation"]
                flag += f" / `{off}`"
                meaning += f"; `{off}`: {off_help}"
            default = {None: "", True: "on", False: "off"}.get(f.default, f.default) \
                if f.default is None or isinstance(f.default, bool) else f.default
            meaning = meaning.replace("|", "/")
            flag_modes, kinds = unused_by([f.name])
            if more := [m for m in flag_modes if m not in modes]:
                meaning += f"; not used by {' or '.join(f'`{m}`' for m in more)}"
            if kinds:
                meaning += f"; not used for {' or '.join(ENV_KIND_NAMES[k] for k in kinds)}"
            out.append(f"| {flag} | {default} | {meaning} |")
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
