"""The command line: the parser, the checks that turn every mistake into one line, `--resume`'s
merge of saved settings, and the run directory."""
from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

from launch.configs import PREDICTOR_FILE, PREFS_FILE, trainer_config
from launch.deferred import Deferred
from launch.env_settings import describe as env_settings_help
from launch.env_settings import env_settings
from launch.preflight import first_error
from pref_interface.pairs import OVERSAMPLE
from pref_interface.player import PLAYER_KINDS

MODES = ("gather_initial_prefs", "pretrain_reward_predictor", "train_policy_with_preferences",
         "train_policy_with_original_rewards")
EXIT_USAGE = 2
DESCRIPTION = "Deep RL from Human Preferences (Christiano et al. 2017): the command line."


class UsageError(Exception):
    """A mistake on the command line: reported as one line, exit status 2."""


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str):
        raise UsageError(message)


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults in the help, and the epilog (settings per environment) as written."""


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="run.py", description=DESCRIPTION,
                      epilog=env_settings_help(), formatter_class=_HelpFormatter)
    p.add_argument("mode", nargs="?", help=f"one of: {', '.join(MODES)}")
    p.add_argument("env_id", nargs="?", help="MovingDotNoFrameskip-v0, PongNoFrameskip-v4, "
                                             "EnduroNoFrameskip-v4 or any <Game>NoFrameskip-v4")
    g = p.add_argument_group("run")
    g.add_argument("--resume", metavar="RUN_DIR",
                   help="continue a stopped run from its last checkpoints with its saved "
                        "settings (flags given now override them, e.g. --million_timesteps)")
    where = g.add_mutually_exclusive_group()
    where.add_argument("--log_dir", help="directory for this run (must not exist yet)")
    where.add_argument("--run_name", help="name of the run directory under runs/")
    g.add_argument("--seed", type=int, default=0, help="random seed")
    g.add_argument("--torch_threads", type=int, default=1,
                   help="torch threads in the A2C process (2 is ~25%% faster for plain A2C on an "
                        "otherwise idle 2-core machine, but stalls badly when the cores are busy)")
    g.add_argument("--env_threads", type=int, default=1, help="ale-py env threads")
    g.add_argument("--precision", choices=("auto", "fp32", "bf16"), default="auto",
                   help="arithmetic of the policy and reward nets; auto: bfloat16 autocast where "
                        "the CPU has native bf16 (AVX512-BF16), else fp32")
    g.add_argument("--device", default="cpu",
                   help="where the policy acts and learns: cpu, cuda, cuda:N, or auto (cuda when "
                        "torch sees a GPU)")
    g = p.add_argument_group("A2C (defaults: the paper's, App. A.2)")
    g.add_argument("--n_envs", type=int, default=16, help="parallel environments")
    g.add_argument("--million_timesteps", type=float, default=10.0,
                   help="agent steps to train for, in millions (summed over envs)")
    g.add_argument("--ent_coef", type=float, default=0.01, help="entropy bonus coefficient")
    g.add_argument("--lr", type=float, default=7e-4, help="RMSProp learning rate")
    g.add_argument("--optimizer", choices=("rmsprop_torch", "rmsprop_tf"), default="rmsprop_torch",
                   help="A2C's RMSProp: torch.optim.RMSprop, or TensorFlow's (mean square from 1, "
                        "eps inside the root), which baselines' A2C and so the paper used")
    g.add_argument("--lr_zero_million_timesteps", type=float, default=None,
                   help="decay the lr linearly to zero at this many million steps "
                        "(the paper: 80); default: constant lr")
    g.add_argument("--load_policy_ckpt_dir", help="start from the newest policy checkpoint here")
    g.add_argument("--policy_ckpt_interval", type=int, default=1000,
                   help="updates between policy checkpoints")
    g.add_argument("--render_episodes", action="store_true",
                   help="loop the agent's latest full episode (env 0) in a second window "
                        "(needs a display; without one the run goes on without it)")
    g = p.add_argument_group("preferences")
    g.add_argument("--synthetic_prefs", action="store_true",
                   help="label clip pairs by their true reward instead of asking a person")
    g.add_argument("--clip_player", choices=PLAYER_KINDS, default="auto",
                   help="where a person watches the clip pairs: a window, the terminal in "
                        "colour, or a page in the browser (web); auto: a window when a display "
                        "is available")
    g.add_argument("--web_host", default="127.0.0.1",
                   help="--clip_player web: the address the page listens on (reach a remote "
                        "run's page by SSH port forwarding rather than opening this)")
    g.add_argument("--web_port", type=int, default=0,
                   help="--clip_player web: the page's port (0: a free one)")
    g.add_argument("--n_initial_prefs", type=int, default=500,
                   help="labels gathered from the untrained policy before pretraining (App. A)")
    g.add_argument("--max_prefs", type=int, default=3000,
                   help="the predictor trains on the latest this many labels (App. A)")
    g.add_argument("--max_segs", type=int, default=1000,
                   help="recent clips kept by the preference interface to draw pairs from")
    g.add_argument("--max_pairs_per_clip", type=int, default=2,
                   help="offer each clip in at most this many pairs, so that synthetic labels "
                        "made faster than clips arrive wait for new clips (0: no limit)")
    g.add_argument("--teacher", default="oracle",
                   help="synthetic labeller: oracle, boltzmann:beta=B, mistake:eps=E, "
                        "skip:threshold=X, equal:threshold=X or myopic:gamma=G (B-Pref teachers)")
    g.add_argument("--episode_end_penalty", type=float, default=None,
                   help="synthetic labels: subtracted from a clip's true return per episode end "
                        "in it (App. A); default: 1 for Atari games except Pong, else 0")
    g.add_argument("--query_selection", choices=("random", "disagreement"), default="random",
                   help="pairs to label: random, or those the ensemble disagrees on most (App. A)")
    g.add_argument("--oversampling", type=int, default=OVERSAMPLE,
                   help="disagreement draws this many times more candidate pairs than it shows")
    g.add_argument("--label_schedule", choices=("none", "constant", "annealed"), default="none",
                   help="none: label as fast as the predictor trains; constant or annealed (App. "
                        "A: rate ~ 5e6/(T+5e6), T frames) spend --max_labels over the run")
    g.add_argument("--max_labels", type=int, default=3300,
                   help="total label budget of a --label_schedule")
    g.add_argument("--anneal_every_frames", type=float, default=5e6,
                   help="annealed schedule: frames between rate decreases (App. A: 5e6; shorter "
                        "runs such as MovingDot need a smaller value to anneal at all)")
    g.add_argument("--load_prefs_dir",
                   help="a run directory whose prefs.sqlite is copied into this run and used")
    g = p.add_argument_group("reward predictor")
    g.add_argument("--ensemble_size", type=int, default=3, help="ensemble members (App. A)")
    g.add_argument("--n_initial_epochs", type=int, default=200,
                   help="pretraining epochs over the initial labels (App. A)")
    g.add_argument("--dropout", type=float, default=0.0,
                   help="dropout on the conv layers (the paper's Atari setting: 0.5)")
    g.add_argument("--batchnorm", action="store_true", help="batch norm on the conv layers")
    g.add_argument("--no_batchnorm", dest="batchnorm", action="store_false",
                   help="no batch norm (where the environment's settings turn it on)")
    g.add_argument("--reward_predictor_learning_rate", type=float, default=2e-4,
                   help="Adam learning rate of each member")
    g.add_argument("--load_reward_predictor_ckpt_dir",
                   help="a run directory (or its reward_predictor/ directory) to load the "
                        "predictor from; skips pretraining")
    g.add_argument("--reward_predictor_ckpt_interval", type=int, default=500,
                   help="predictor training steps between checkpoints")
    g.add_argument("--frozen_reward_predictor", action="store_true",
                   help="train the policy on the loaded predictor without collecting labels "
                        "or training the predictor")
    g.add_argument("--adaptive_l2", action="store_true", default=True,
                   help="adjust each member's L2 to keep validation loss at 1.1-1.5x training "
                        "loss (App. A; starts at 1e-4); the default")
    g.add_argument("--no_adaptive_l2", dest="adaptive_l2", action="store_false",
                   help="train the predictor without L2 regularisation")
    g.add_argument("--label_noise", type=float, default=0.1,
                   help="assumed chance the labeller answered at random (App. A: 0.1); 0 gives "
                        "the plain Bradley-Terry model")
    g.add_argument("--show_episode_ends", action="store_true",
                   help="let A2C see episode ends (the paper hides them and life losses: one "
                        "continuous episode); life loss is never an episode end")
    g.add_argument("--reward_std", type=float, default=0.05,
                   help="std the predicted reward is normalised to (App. A.2: 0.05 for Atari)")
    g.add_argument("--reward_predictor_duty", type=float, default=0.5,
                   help="fraction of wall-clock time the trainer spends training while the "
                        "policy trains (it rests the rest, leaving the cores to A2C)")
    g.add_argument("--min_predictor_labels_per_step", type=float, default=0.0,
                   help="a floor on predictor training: A2C waits before each rollout while each "
                        "member has trained on fewer labels than this per agent step (the paper's "
                        "pace is about 0.1, App. A; 0: A2C never waits)")
    g.add_argument("--predictor_pace_unit", choices=("member", "ensemble"), default="member",
                   help="what --min_predictor_labels_per_step counts: the labels each member "
                        "trains on, or those of all members together (App. A.2 says \"the "
                        "predictor\" processes about 1 label per 10 steps)")
    g.add_argument("--reward_predictor_threads", type=int, default=1,
                   help="torch threads in the reward-predictor trainer process; while A2C "
                        "waits for it, and in pretraining, it takes --torch_threads's too")
    g.add_argument("--reward_predictor_device", default="cpu",
                   help="where the trainer trains the predictor: cpu, cuda, cuda:N, or auto "
                        "(cuda when torch sees a GPU); A2C still computes rewards on the CPU")
    return p


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The settings of a run from its command line: the flags given, then the saved run's
    (--resume) or the environment's own settings, then the parser's defaults; checked."""
    args = build_parser().parse_args(argv)
    if args.resume:
        args = apply_resume(args, argv)  # the saved settings include the env's own
    else:
        apply_env_settings(args, argv)
    check_args(args)
    return args


def load_settings(run_dir: Path) -> dict:
    """A run's saved settings; a flag newer than the run takes its default. UsageError when the
    run directory has no readable settings.json."""
    settings_file = run_dir / "settings.json"
    if not settings_file.is_file():
        raise UsageError(f"cannot resume {run_dir}: no settings.json there")
    try:
        saved = json.loads(settings_file.read_text())
    except ValueError:
        raise UsageError(f"cannot resume {run_dir}: settings.json is damaged") from None
    defaults = {a.dest: a.default for a in build_parser()._actions if a.dest != "help"}
    return {**defaults, **saved}


def given_flags(argv: list[str]) -> dict:
    """The flags (and positionals) given on the command line, without the parser's defaults."""
    explicit = build_parser()
    for action in explicit._actions:
        action.default = argparse.SUPPRESS
    return vars(explicit.parse_args(argv))


def apply_env_settings(args: argparse.Namespace, argv: list[str]) -> None:
    """Give the environment's own settings (launch/env_settings.py) to every flag not given."""
    given = given_flags(argv)
    for name, value in env_settings(args.env_id).items():
        if name not in given:
            setattr(args, name, value)


def apply_resume(args: argparse.Namespace, argv: list[str]) -> argparse.Namespace:
    """With --resume: the run's saved settings, overridden by the flags given on this command
    line, pointed at the run's own checkpoints and label store."""
    run_dir = Path(args.resume)
    saved = load_settings(run_dir)
    given = given_flags(argv)
    for positional in ("mode", "env_id"):
        if given.get(positional) not in (None, saved[positional]):
            raise UsageError(f"--resume: this run's {positional} is {saved[positional]}")
    merged = argparse.Namespace(**{**saved, **given})
    merged.resume, merged.run_dir = str(run_dir), run_dir
    merged.overrides = {k: v for k, v in given.items() if k != "resume"}
    merged.load_policy_ckpt_dir = (str(run_dir / "policy")
                                   if list((run_dir / "policy").glob("policy-*.pt")) else None)
    predictor = run_dir / "reward_predictor" / PREDICTOR_FILE
    merged.load_reward_predictor_ckpt_dir = str(predictor) if predictor.is_file() else \
        saved.get("load_reward_predictor_ckpt_dir")
    merged.load_prefs_dir = None  # the run's own store is used as it is
    return merged


def check_args(args: argparse.Namespace) -> None:
    """Every mistake becomes a UsageError before anything is written."""
    from envs import UnknownEnvError, env_kind

    if args.mode is None or args.env_id is None:
        raise UsageError("the following arguments are required: mode, env_id (or --resume)")
    if args.mode not in MODES:
        raise UsageError(f"unknown mode {args.mode!r}; choose one of: {', '.join(MODES)}")
    try:
        args.env_kind = env_kind(args.env_id)
    except UnknownEnvError as e:
        raise UsageError(str(e)) from None
    for name in ("million_timesteps", "n_envs", "policy_ckpt_interval", "lr", "torch_threads",
                 "n_initial_prefs", "max_prefs", "max_segs", "ensemble_size",
                 "reward_predictor_learning_rate", "reward_predictor_ckpt_interval",
                 "reward_predictor_threads", "reward_std"):
        if getattr(args, name) <= 0:
            raise UsageError(f"--{name} must be positive, got {getattr(args, name)}")
    if args.lr_zero_million_timesteps is not None and args.lr_zero_million_timesteps <= 0:
        raise UsageError("--lr_zero_million_timesteps must be positive")
    if args.ent_coef < 0 or args.env_threads < 0 or args.max_pairs_per_clip < 0:
        raise UsageError("--ent_coef, --env_threads and --max_pairs_per_clip must not be negative")
    if not 0.0 <= args.label_noise < 1.0 or args.oversampling < 1 or args.max_labels < 1:
        raise UsageError("--label_noise is in [0, 1); --oversampling and --max_labels >= 1")
    if args.min_predictor_labels_per_step < 0:
        raise UsageError("--min_predictor_labels_per_step must not be negative")
    if not 0.0 < args.reward_predictor_duty <= 1.0:
        raise UsageError("--reward_predictor_duty must be in (0, 1]")
    if args.anneal_every_frames <= 0:
        raise UsageError("--anneal_every_frames must be positive")
    args.predictor_device = resolve_device(args.reward_predictor_device, "--reward_predictor_device")
    args.policy_device = resolve_device(args.device, "--device")
    try:
        from pref_interface.teachers import make_teacher
        make_teacher(args.teacher)
    except ValueError as e:
        raise UsageError(f"--teacher: {e}") from None
    if args.n_initial_epochs < 0 or not 0.0 <= args.dropout < 1.0:
        raise UsageError("--n_initial_epochs must not be negative and --dropout is in [0, 1)")
    check_preference_args(args)
    args.player_kind = None
    if labels_by_person(args):
        from pref_interface.player import resolve_player
        try:
            args.player_kind = resolve_player(getattr(args, "clip_player", "auto"))
        except ValueError as e:
            raise UsageError(str(e)) from None
    checks = [Deferred("a2c.checkpoint:load_policy", args.load_policy_ckpt_dir)
              ] if args.load_policy_ckpt_dir else []
    if args.reward_ckpt_path:
        checks.append(Deferred("reward_predictor.reward_fn:load_ensemble",
                               trainer_config(args, None), args.reward_ckpt_path))
    error = first_error(checks)  # loading a checkpoint needs torch: done in a child
    if error:
        raise UsageError(error)
    if args.resume:
        return
    run_dir = Path(args.log_dir) if args.log_dir else Path("runs") / (
        args.run_name or f"{time.strftime('%Y%m%d-%H%M%S')}_{args.mode}_{args.env_id}")
    if run_dir.exists():
        raise UsageError(f"run directory {run_dir} already exists; choose another "
                         "--log_dir/--run_name")
    args.run_dir = run_dir


def resolve_device(name: str, flag: str) -> str:
    """A torch device name from a device flag; UsageError when it is not there. Only a GPU
    (or `auto`) makes this process import torch to look."""
    if name == "cpu":
        return name
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(name)
    except RuntimeError:
        raise UsageError(f"{flag}: unknown device {name!r} (cpu, cuda, cuda:N or auto)") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise UsageError(f"{flag} {name}: torch sees no GPU here")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise UsageError(f"{flag} {name}: only {torch.cuda.device_count()} GPU(s) here")
    elif device.type != "cpu":
        raise UsageError(f"{flag}: {name!r} is not supported (cpu or cuda)")
    return name


def check_preference_args(args: argparse.Namespace) -> None:
    """Resolve --load_prefs_dir / --load_reward_predictor_ckpt_dir to files that open."""
    args.prefs_path = args.reward_ckpt_path = None
    if args.mode == "pretrain_reward_predictor" and not args.load_prefs_dir:
        raise UsageError("pretrain_reward_predictor needs --load_prefs_dir")
    if args.frozen_reward_predictor and not args.load_reward_predictor_ckpt_dir:
        raise UsageError("--frozen_reward_predictor needs --load_reward_predictor_ckpt_dir")
    if args.load_prefs_dir:
        from pref_interface.store import PreferenceStore, StoreError
        path = Path(args.load_prefs_dir)
        path = path / PREFS_FILE if path.is_dir() else path
        try:
            with PreferenceStore(str(path), create=False) as store:
                n = len(store)
        except StoreError as e:
            raise UsageError(str(e)) from None
        if n == 0:
            raise UsageError(f"the preference store {path} holds no labels")
        args.prefs_path = str(path)
    if args.load_reward_predictor_ckpt_dir:
        path = Path(args.load_reward_predictor_ckpt_dir)
        for candidate in (path / "reward_predictor" / PREDICTOR_FILE, path / PREDICTOR_FILE, path):
            if candidate.is_file():
                path = candidate
                break
        args.reward_ckpt_path = str(path)  # check_args loads it


def labels_by_person(args: argparse.Namespace) -> bool:
    """True when this run asks a person for labels, and so reads the terminal."""
    return (args.mode in ("gather_initial_prefs", "train_policy_with_preferences")
            and not args.synthetic_prefs and not args.frozen_reward_predictor)


def make_run_dir(args: argparse.Namespace) -> Path:
    """Create the run directory and record the exact command and settings (a resumed run
    appends its command and writes the flags it overrode into the settings file, so that the
    next resume keeps them)."""
    run_dir: Path = args.run_dir
    run_dir.mkdir(parents=True, exist_ok=bool(args.resume))
    with open(run_dir / "command.txt", "a") as f:
        f.write(shlex.join([sys.executable] + sys.argv) + "\n")
    if not args.resume:
        settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()
                    if k not in ("run_dir", "env_kind", "prefs_path", "reward_ckpt_path",
                                 "predictor_device", "policy_device")}
    else:
        settings = {**json.loads((run_dir / "settings.json").read_text()), **args.overrides}
    tmp = run_dir / "settings.json.tmp"
    tmp.write_text(json.dumps(settings, indent=2) + "\n")
    tmp.replace(run_dir / "settings.json")  # never a half-written settings file
    return run_dir
