#!/usr/bin/env python3
"""Deep RL from Human Preferences (Christiano et al. 2017): the command line.

This file only wires things together: it checks the arguments, makes the run directory, creates
the queues and shared handles, starts the processes and supervises them.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import shlex
import signal
import sys
import time
import traceback
from pathlib import Path

from launch.deferred import Deferred
from launch.env_settings import describe as env_settings_help
from launch.env_settings import env_settings
from launch.preflight import first_error
from launch.process_setup import die_with_parent, name_process
from pref_interface.player import PLAYER_KINDS

MODES = ("gather_initial_prefs", "pretrain_reward_predictor", "train_policy_with_preferences",
         "train_policy_with_original_rewards")
EXIT_USAGE, EXIT_INTERRUPTED = 2, 130


class UsageError(Exception):
    """A mistake on the command line: reported as one line, exit status 2."""


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str):
        raise UsageError(message)


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults in the help, and the epilog (settings per environment) as written."""


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="run.py", description=__doc__.splitlines()[0],
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
    g.add_argument("--oversampling", type=int, default=10,
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
    g.add_argument("--reward_refresh_steps", type=int, default=0,
                   help="A2C takes the trainer's newest predictor only after scoring this many "
                        "agent steps on the one it holds (0: at every rollout, as in the paper)")
    g.add_argument("--reward_predictor_threads", type=int, default=1,
                   help="torch threads in the reward-predictor trainer process; while A2C "
                        "waits for it, and in pretraining, it takes --torch_threads's too")
    g.add_argument("--reward_predictor_device", default="cpu",
                   help="where the trainer trains the predictor: cpu, cuda, cuda:N, or auto "
                        "(cuda when torch sees a GPU); A2C still computes rewards on the CPU")
    return p


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
    if args.reward_refresh_steps < 0:
        raise UsageError("--reward_refresh_steps must not be negative")
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


# ---------------------------------------------------------------- processes and supervision


def _child(call: Deferred, errors) -> None:
    """Entry point of every child: Ctrl-C is the supervisor's to handle (it sets the stop event);
    an exception is sent to the supervisor as text and the child exits non-zero. The child shows
    its name in `ps` and ends if the supervisor is killed (launch/process_setup.py)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    name_process(mp.current_process().name)
    die_with_parent()
    try:
        call()
    except BaseException:  # noqa: BLE001 - reported, then the child exits non-zero
        errors.put(traceback.format_exc())
        sys.exit(1)


class Supervisor:
    """Starts the run's processes, shows the status line, and stops everything together."""

    def __init__(self, ctx, stop_event):
        self.ctx = ctx
        self.stop_event = stop_event
        self.errors = ctx.Queue()
        self.procs: dict[str, mp.Process] = {}

    def start(self, name: str, target: str, *args) -> None:
        """Start `target` ("module:function") with `args` in a child named `name`; the module is
        imported there, not here (this process never imports torch)."""
        proc = self.ctx.Process(target=_child, args=(Deferred(target, *args), self.errors),
                                name=name, daemon=False)
        proc.start()
        self.procs[name] = proc

    def wait(self, status_line=None, until=None, grace_s: float = 60.0) -> int:
        """Block until every process ends (or `until()` is true, then stop them); return an exit
        status: 0, 1 for a crashed child, 130 for Ctrl-C."""
        tty = sys.stderr.isatty()
        last_print = 0.0
        deadline = None  # once `until()` holds: when the children still running are terminated
        try:
            while any(p.is_alive() for p in self.procs.values()):
                crashed = [n for n, p in self.procs.items()
                           if not p.is_alive() and p.exitcode not in (0, None)]
                if crashed:
                    return self._fail(crashed)
                if deadline is None and until is not None and until():
                    self.stop_event.set()
                    deadline = time.monotonic() + grace_s
                if deadline is not None and time.monotonic() > deadline:
                    # A child stuck past the grace (e.g. reading a clip that A2C, exiting, left
                    # half-written in the queue) must not hold the run open: its work is saved.
                    stuck = [n for n, p in self.procs.items() if p.is_alive()]
                    sys.stderr.write(f"\nstopping {', '.join(stuck)}: not done {grace_s:.0f} s "
                                     "after the stop\n")
                    self._join(0.0)
                    return 0  # terminated by us, not failed
                now = time.monotonic()
                if status_line is not None and now - last_print >= (1.0 if tty else 30.0):
                    last_print = now
                    line = status_line()
                    if line:  # "" while a person labels: the prompt is on screen
                        sys.stderr.write(f"\r\x1b[K{line}" if tty else f"{line}\n")
                        sys.stderr.flush()
                time.sleep(0.2)
        except KeyboardInterrupt:
            sys.stderr.write("\nstopping: saving checkpoints and labels...\n")
            self.stop_event.set()
            self._join(grace_s)
            return EXIT_INTERRUPTED
        finally:
            if tty and status_line is not None:
                sys.stderr.write("\n")
        crashed = [n for n, p in self.procs.items() if p.exitcode not in (0, None)]
        return self._fail(crashed) if crashed else 0

    def _fail(self, crashed: list[str]) -> int:
        for name in crashed:
            sys.stderr.write(f"\nprocess {name!r} failed (exit {self.procs[name].exitcode})\n")
        while not self.errors.empty():
            sys.stderr.write(self.errors.get())
        self.stop_event.set()
        self._join(10.0)
        return 1

    def _join(self, grace_s: float) -> None:
        deadline = time.monotonic() + grace_s
        for proc in self.procs.values():
            proc.join(max(0.0, deadline - time.monotonic()))
        for proc in self.procs.values():
            if proc.is_alive():
                proc.terminate()
                proc.join(5.0)
            if proc.is_alive():
                proc.kill()


# ------------------------------------------------------------------------------ modes

PREFS_FILE = "prefs.sqlite"
A2C = "a2c.train:train_a2c"  # the processes' entry points, imported in the child
INTERFACE = "pref_interface.process:run_pref_interface"
ORIGINAL = "train_policy_with_original_rewards"
PREDICTOR_FILE = "reward_predictor.pt"


class Channels:
    """Everything the processes share, named in one place.

    segments: A2C -> preference interface; small, A2C drops clips when it is full.
    preferences: preference interface -> predictor trainer; unbounded, never dropped.
    reward_weights: predictor trainer -> A2C; shared-memory weights with a version number.
    answers: main process's terminal key reader -> human labeller (pref_interface.keys); one
        queue for the whole run (None when nobody labels by hand).
    page_updates (args.page_updates, passed in the interface's config): the human labeller's
        WebPlayer -> the labelling page's server in the main process (--clip_player web); one
        queue for the whole run.
    episodes: A2C -> episode viewer (--render_episodes); maxsize 1, A2C drops episodes when full.
    stop: set by the supervisor to end every process cleanly.
    """

    def __init__(self, ctx, stop, reward_weights=None, answers=None, episodes: bool = False):
        from pref_interface.episodes import EPISODE_QUEUE_MAXSIZE
        from pref_interface.process import SEGMENT_QUEUE_MAXSIZE

        self.segments = ctx.Queue(maxsize=SEGMENT_QUEUE_MAXSIZE)
        self.preferences = ctx.Queue()
        self.reward_weights = reward_weights
        self.answers = answers
        self.episodes = ctx.Queue(maxsize=EPISODE_QUEUE_MAXSIZE) if episodes else None
        self.stop = stop

    @classmethod
    def for_run(cls, ctx, args: argparse.Namespace, stop, reward_weights=None) -> "Channels":
        return cls(ctx, stop, reward_weights, getattr(args, "answers", None),
                   getattr(args, "show_episodes", False))

    def a2c_observers(self, interface_stats=None):
        """A2C's rollout observers (clip cutter, episode recorder) as one picklable factory."""
        from functools import partial

        from pref_interface.episodes import chain_observers, make_episode_observers
        from pref_interface.process import make_clip_observers

        factories = []
        if interface_stats is not None:
            factories.append(partial(make_clip_observers, self.segments,
                                     interface_stats.segments_dropped))
        if self.episodes is not None:
            factories.append(partial(make_episode_observers, self.episodes))
        return partial(chain_observers, factories) if factories else None

    def start_episode_viewer(self, sup: "Supervisor") -> None:
        if self.episodes is not None:
            sup.start("episode_viewer", "pref_interface.episodes:run_episode_viewer", self.episodes,
                      self.stop)


def a2c_config(args: argparse.Namespace, run_dir: Path):
    from a2c.config import A2CConfig, A2CRunConfig

    million = 1_000_000
    return A2CRunConfig(
        env_id=args.env_id, total_timesteps=int(args.million_timesteps * million),
        a2c=A2CConfig(n_envs=args.n_envs, ent_coef=args.ent_coef, lr=args.lr,
                      optimizer=args.optimizer,
                      lr_zero_timesteps=(args.lr_zero_million_timesteps * million
                                         if args.lr_zero_million_timesteps else None)),
        seed=args.seed, ckpt_dir=str(run_dir / "policy"), ckpt_interval=args.policy_ckpt_interval,
        load_ckpt_dir=args.load_policy_ckpt_dir, torch_threads=args.torch_threads,
        env_threads=args.env_threads, precision=args.precision, device=args.policy_device,
        hide_episode_ends=not args.show_episode_ends and args.mode != ORIGINAL)


def percent(value: float) -> str:
    return "-" if value != value else f"{value:.0%}"  # NaN until the first validation


def number(value: float) -> str:
    return "-" if value != value else f"{value:.1f}"  # NaN until the first episode ends


def a2c_status(stats) -> str:
    """One short line (fits 80 columns with the preference counters)."""
    return (f"steps {stats.timesteps.value / 1e3:,.1f}k | {stats.steps_per_sec.value:,.0f}/s | "
            f"ep {stats.episodes.value} | return {number(stats.recent_return.value)}")


def trainer_config(args: argparse.Namespace, run_dir: Path | None):
    from reward_predictor.config import TrainerConfig

    return TrainerConfig(
        env_kind=args.env_kind, n_members=args.ensemble_size, dropout=args.dropout,
        batchnorm=args.batchnorm, lr=args.reward_predictor_learning_rate, max_prefs=args.max_prefs,
        ckpt_interval=args.reward_predictor_ckpt_interval,
        ckpt_path=str(run_dir / "reward_predictor" / PREDICTOR_FILE) if run_dir else None,
        load_ckpt_path=args.reward_ckpt_path, torch_threads=args.reward_predictor_threads,
        reward_std=args.reward_std, label_noise=args.label_noise, adaptive_l2=args.adaptive_l2,
        duty=args.reward_predictor_duty, seed=args.seed, device=args.predictor_device,
        # While A2C waits for the predictor (--min_predictor_labels_per_step) or has not started
        # (pretraining) its threads are idle.
        threads_while_agent_idle=args.reward_predictor_threads + args.torch_threads,
        # MovingDot's small net reads sub-pixel dot positions: bf16's 8-bit mantissa blurs them.
        precision=args.precision if args.env_kind == "atari" else "fp32")


def interface_config(args: argparse.Namespace, stop_after_labels: int | None = None):
    from pref_interface.process import InterfaceConfig

    return InterfaceConfig(max_segs=args.max_segs, synthetic=args.synthetic_prefs,
                           max_pairs_per_clip=args.max_pairs_per_clip or None,
                           clip_player=getattr(args, "player_kind", None) or "terminal",
                           page_updates=getattr(args, "page_updates", None),
                           keep_typed_ahead=not sys.stdin.isatty(),
                           max_in_flight=None if stop_after_labels else 4,
                           stop_after_labels=stop_after_labels, seed=args.seed,
                           teacher=args.teacher, episode_end_penalty=episode_end_penalty(args),
                           selection="random" if stop_after_labels else args.query_selection,
                           oversample=args.oversampling, label_schedule=args.label_schedule,
                           max_labels=args.max_labels, initial_labels=args.n_initial_prefs,
                           anneal_every_frames=int(args.anneal_every_frames),
                           total_frames=int(args.million_timesteps * 1e6) * 4)


def episode_end_penalty(args: argparse.Namespace) -> float:
    """App. A: the synthetic oracle penalises episode ends, except in Pong (where the episode
    ends only once the game is decided)."""
    if args.episode_end_penalty is not None:
        return args.episode_end_penalty
    return 0.0 if args.env_kind != "atari" or args.env_id.startswith("Pong") else 1.0


def preference_status(a2c_stats, interface_stats=None, trainer_stats=None) -> str:
    line = a2c_status(a2c_stats)
    if interface_stats is not None:
        line += f" | labels {interface_stats.labels_total.value}"
        if interface_stats.segments_dropped.value:
            line += f" ({interface_stats.segments_dropped.value} clips dropped)"
    if trainer_stats is not None:
        line += f" | val acc {percent(trainer_stats.val_accuracy.value)}"
    return line


def gather_phase(args, run_dir: Path, ctx, n_labels: int) -> int:
    """The untrained policy acts (no updates) while clips are labelled into the store."""
    from a2c.config import A2CStats
    from pref_interface.process import InterfaceStats

    sup = Supervisor(ctx, ctx.Event())
    ch = Channels.for_run(ctx, args, sup.stop_event)
    a2c_stats, istats = A2CStats(ctx), InterfaceStats.create(ctx)
    config = a2c_config(args, run_dir)
    config.learn, config.total_timesteps = False, 2 ** 62  # runs until the labels are in
    sup.start("pref_interface", INTERFACE, interface_config(args, n_labels),
              ch.segments, None, ch.stop, istats, str(run_dir / PREFS_FILE), None,
              str(run_dir / "tb" / "labels"), ch.answers, None)
    sup.start("a2c", A2C, config, str(run_dir / "tb" / "gather"), a2c_stats, None,
              ch.a2c_observers(istats), ch.stop)
    ch.start_episode_viewer(sup)
    print(f"gathering {n_labels} labels from the untrained policy", file=sys.stderr)
    if ch.answers is not None and args.player_kind == "web" and not sys.stdin.isatty():
        print("answer on the page; Ctrl-C stops the run", file=sys.stderr)
    elif ch.answers is not None:
        print("answer " + ("on the page or " if args.player_kind == "web" else "") +
              "here: Ctrl-D stops labelling (labels kept), Ctrl-C stops the run", file=sys.stderr)
    # A person labelling sees the counters in the prompt: no status line over the player.
    return sup.wait(None if ch.answers is not None else
                    lambda: preference_status(a2c_stats, istats),
                    until=lambda: not sup.procs["pref_interface"].is_alive())


def pretrain_phase(args, run_dir: Path, ctx, prefs_path: str) -> int:
    """Pretrain the predictor on the stored labels; a resumed run does only the epochs left."""
    from reward_predictor.config import TrainerStats

    progress_file = run_dir / "reward_predictor" / "pretraining.json"
    done = json.loads(progress_file.read_text())["epochs_done"] if (
        args.reward_ckpt_path and progress_file.is_file()) else 0
    epochs = args.n_initial_epochs - done
    if epochs <= 0:
        return 0
    sup = Supervisor(ctx, ctx.Event())
    stats = TrainerStats.create(ctx)
    print(f"pretraining the reward predictor for {epochs} epochs", file=sys.stderr)
    if getattr(args, "page_updates", None) is not None:
        args.page_updates.put({"notice": f"pretraining the reward predictor ({epochs} epochs); "
                                         "labelling goes on after it"})
    sup.start("reward_predictor", "reward_predictor.process:run_pretraining",
              trainer_config(args, run_dir), prefs_path,
              epochs, sup.stop_event, stats, str(run_dir / "tb" / "pretrain"))
    code = sup.wait(lambda: f"pretraining epoch {done + stats.epoch.value}/"
                            f"{args.n_initial_epochs} | val acc {percent(stats.val_accuracy.value)}")
    args.reward_ckpt_path = str(run_dir / "reward_predictor" / PREDICTOR_FILE)
    if Path(args.reward_ckpt_path).is_file():
        progress_file.write_text(json.dumps({"epochs_done": done + stats.epoch.value}) + "\n")
    return code


def stored_labels(path: str) -> int:
    from pref_interface.store import PreferenceStore

    if not Path(path).is_file():
        return 0
    with PreferenceStore(path, create=False) as store:
        return len(store)


def copy_prefs(args, run_dir: Path) -> str:
    """This run's store: a copy of --load_prefs_dir's, so the original is never written to."""
    from pref_interface.store import PreferenceStore

    path = str(run_dir / PREFS_FILE)
    if args.prefs_path and not args.resume:
        with PreferenceStore(args.prefs_path, create=False) as src:
            src.backup_to(path)
    return path


def gather_initial_prefs(args, run_dir: Path, ctx) -> int:
    return gather_phase(args, run_dir, ctx, args.n_initial_prefs)


def pretrain_reward_predictor(args, run_dir: Path, ctx) -> int:
    return pretrain_phase(args, run_dir, ctx, copy_prefs(args, run_dir))


def train_policy_with_preferences(args, run_dir: Path, ctx) -> int:
    """Gather (unless loaded), pretrain (unless loaded), then A2C, labelling and predictor
    training all at once; or, with --frozen_reward_predictor, A2C alone on a fixed predictor."""
    from a2c.config import A2CStats
    from pref_interface.process import InterfaceStats
    from reward_predictor.config import TrainerStats
    from reward_predictor.pace import labels_per_member
    from reward_predictor.shared import SharedWeights

    if args.frozen_reward_predictor:
        sup = Supervisor(ctx, ctx.Event())
        ch = Channels.for_run(ctx, args, sup.stop_event)
        stats = A2CStats(ctx)
        sup.start("a2c", A2C, a2c_config(args, run_dir), str(run_dir / "tb"), stats,
                  Deferred("reward_predictor.reward_fn:frozen_reward", trainer_config(args, None),
                           args.reward_ckpt_path),
                  ch.a2c_observers(), sup.stop_event)
        ch.start_episode_viewer(sup)
        return sup.wait(lambda: a2c_status(stats), until=lambda: not sup.procs["a2c"].is_alive())

    prefs_path = copy_prefs(args, run_dir)
    if not args.prefs_path and stored_labels(prefs_path) < args.n_initial_prefs:
        code = gather_phase(args, run_dir, ctx, args.n_initial_prefs)
        if code:
            return code
        if stored_labels(prefs_path) == 0:  # labelling was stopped before the first label
            print("no labels to train the reward predictor on: stopping", file=sys.stderr)
            return 0
    if not args.reward_ckpt_path or args.resume:
        code = pretrain_phase(args, run_dir, ctx, prefs_path)
        if code:
            return code

    # From here on the predictor counts as pretrained, also when it was loaded from elsewhere.
    (run_dir / "reward_predictor").mkdir(exist_ok=True)
    (run_dir / "reward_predictor" / "pretraining.json").write_text(
        json.dumps({"epochs_done": args.n_initial_epochs}) + "\n")
    tconfig = trainer_config(args, run_dir)
    tconfig.initial_prefs_path = prefs_path
    weights = SharedWeights(ctx)
    sup = Supervisor(ctx, ctx.Event())
    ch = Channels.for_run(ctx, args, sup.stop_event, weights)
    a2c_stats, tstats = A2CStats(ctx), TrainerStats.create(ctx)
    istats = InterfaceStats.create(ctx, tstats.labels_received)
    sup.start("reward_predictor", "reward_predictor.process:run_trainer", tconfig, ch.preferences,
              ch.reward_weights,
              ch.stop, tstats, str(run_dir / "tb" / "reward_predictor"))
    sup.start("pref_interface", INTERFACE, interface_config(args), ch.segments,
              ch.preferences, ch.stop, istats, prefs_path, None, str(run_dir / "tb" / "labels"),
              ch.answers, tstats.val_accuracy,
              Deferred("reward_predictor.reward_fn:PreferencePredictor", ch.reward_weights, tconfig),
              a2c_stats.timesteps)
    sup.start("a2c", A2C, a2c_config(args, run_dir), str(run_dir / "tb"), a2c_stats,
              Deferred("reward_predictor.reward_fn:PredictedReward", ch.reward_weights, tconfig,
                       args.reward_refresh_steps),
              ch.a2c_observers(istats),
              ch.stop, Deferred("reward_predictor.pace:PredictorPace", ch.reward_weights,
                                labels_per_member(args.min_predictor_labels_per_step,
                                                  args.predictor_pace_unit, args.ensemble_size)))
    ch.start_episode_viewer(sup)

    def status() -> str:  # while a person labels, the counters are in the prompt instead
        if ch.answers is not None and sup.procs["pref_interface"].is_alive():
            return ""
        return preference_status(a2c_stats, istats, tstats)

    return sup.wait(status, until=lambda: not sup.procs["a2c"].is_alive())


def train_policy_with_original_rewards(args, run_dir: Path, ctx) -> int:
    from a2c.config import A2CStats

    sup = Supervisor(ctx, ctx.Event())
    ch = Channels.for_run(ctx, args, sup.stop_event)
    stats = A2CStats(ctx)
    sup.start("a2c", A2C, a2c_config(args, run_dir), str(run_dir / "tb"), stats, None,
              ch.a2c_observers(), sup.stop_event)
    ch.start_episode_viewer(sup)
    return sup.wait(lambda: a2c_status(stats), until=lambda: not sup.procs["a2c"].is_alive())


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # Ctrl-C and `kill -INT/-TERM` stop the run cleanly even when it was started in the
    # background of a script, where the shell leaves SIGINT ignored.
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        args = build_parser().parse_args(argv)
        if args.resume:
            args = apply_resume(args, argv)  # the saved settings include the env's own
        else:
            apply_env_settings(args, argv)
        check_args(args)
        page = open_labelling_page(args)
    except UsageError as e:
        print(f"run.py: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    run_dir = make_run_dir(args)
    print(f"run directory: {run_dir}", file=sys.stderr)
    ctx = mp.get_context("spawn")
    reader = start_key_reader(args, ctx)
    if page is not None:
        args.page_updates = ctx.Queue()
        page.start(args.answers, args.page_updates)
        print(f"label in your browser: {page.url}", file=sys.stderr)
    args.show_episodes = bool(getattr(args, "render_episodes", False)) and episode_window(args)
    mode = {"gather_initial_prefs": gather_initial_prefs,
            "pretrain_reward_predictor": pretrain_reward_predictor,
            "train_policy_with_preferences": train_policy_with_preferences,
            "train_policy_with_original_rewards": train_policy_with_original_rewards}[args.mode]
    try:
        return mode(args, run_dir, ctx)
    except KeyboardInterrupt:  # between phases: nothing is running
        return EXIT_INTERRUPTED
    finally:
        if reader is not None:
            reader.stop()  # the terminal gets its settings back
        if page is not None:
            page.stop()


def start_key_reader(args: argparse.Namespace, ctx):
    """When a person labels, read the terminal here, in the process that owns it (spawned
    children have stdin on /dev/null), and pass the keys on `args.answers`."""
    args.answers = None
    if not labels_by_person(args):
        return None
    from pref_interface.keys import KeyReader

    args.answers = ctx.Queue()
    args.answers.cancel_join_thread()  # keys nobody read must not hold up the exit
    if args.player_kind == "web" and not sys.stdin.isatty():
        return None  # answers come from the page; the end of piped input must not stop it
    return KeyReader(args.answers).start()


def open_labelling_page(args: argparse.Namespace):
    """With --clip_player web, the labelling page's server, listening already (a port in use is
    a usage error) but not yet serving: `start(answers, page_updates)` it once the channels exist."""
    if getattr(args, "player_kind", None) != "web":
        return None
    from pref_interface.web.server import LabellingPage

    try:
        return LabellingPage(args.web_host, args.web_port)
    except OSError as e:
        raise UsageError(f"--web_host/--web_port: cannot listen on {args.web_host}:"
                         f"{args.web_port} ({e.strerror or e})") from None


def episode_window(args: argparse.Namespace) -> bool:
    """--render_episodes: True when a window can open; otherwise say so and go on without."""
    from pref_interface.player import display_available

    if display_available():
        return True
    print("--render_episodes: no display (DISPLAY unset or Tk cannot open it); "
          "running without the episode window", file=sys.stderr)
    return False


if __name__ == "__main__":
    sys.exit(main())
