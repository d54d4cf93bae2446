"""The command line: parsing into Settings, `--resume`'s merge of saved settings, the checks that
turn every mistake into one line, and what follows from the settings (a Run, launch/rundir.py)."""
from __future__ import annotations

import argparse
import dataclasses
import time
from functools import partial
from pathlib import Path
from typing import Any

from a2c.config import checkpoint_steps, checkpoints
from a2c.entry_points import check_policy, check_start_policy
from envs import UnknownEnvError, check_seed, env_kind, same_game
from launch.env_settings import describe as env_settings_help
from launch.env_settings import env_settings
from launch.preflight import first_error
from launch.rundir import (POLICY_DIR, PREDICTOR_FILE, PREFS_FILE, SETTINGS_FILE, Run, busy_message,
                           is_run_dir, newest_policy, playable_policy, run_dir_holder,
                           saved_settings)
from launch.settings import (MODES, TRAINING_MODES, Settings, idle_settings, invalid_setting,
                             unused_settings)
from launch.settings import build_parser as settings_parser
from pref_interface.labellers.alongside import judges
from pref_interface.labellers.team import parse_labellers
from pref_interface.labellers.teachers import ENDURO_TEACHERS, teacher_kind
from reward_predictor.entry_points import check_predictor

EXIT_USAGE = 2
DESCRIPTION = "Deep RL from Human Preferences (Christiano et al. 2017): the command line."


class UsageError(Exception):
    """A mistake on the command line: reported as one line, exit status 2."""


class TargetReached(Exception):
    """--resume of a run that has reached its agent steps already: nothing to do (exit status
    0), said in one line."""


def at_target(done: int, million_timesteps: float) -> bool:
    """Whether `done` agent steps reach a run's target (--million_timesteps)."""
    return done >= million_timesteps * 1e6


def check_steps_left(run_dir: Path, done: int, million_timesteps: float) -> None:
    """TargetReached where a resumed run's `done` agent steps reach its target."""
    if at_target(done, million_timesteps):
        raise TargetReached(f"{run_dir} is at {done:,} agent steps, its target "
                            f"(--million_timesteps {million_timesteps:g}): nothing to do; give a "
                            "larger --million_timesteps to go on (and --lr_zero_million_timesteps "
                            "where A2C's rate reached 0 at the end)")


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str):
        raise UsageError(message + self.flag_hint(message))

    def flag_hint(self, message: str) -> str:
        """For an unknown flag: the nearest known ones ("--synthetic-prefs": --synthetic_prefs)."""
        from difflib import get_close_matches

        if not message.startswith("unrecognized arguments: "):
            return ""
        known = [o for o, action in self._option_string_actions.items()
                 if o.startswith("--") and action.help is not argparse.SUPPRESS]
        near = []
        for arg in message.split(": ", 1)[1].split():
            if arg.startswith("--"):
                flag = "--" + arg[2:].split("=")[0].replace("-", "_")
                longer = sorted(k for k in known if k.startswith(flag))  # a flag cut short
                near += longer[:3] or get_close_matches(flag, known, n=1)
        return f" (did you mean {', '.join(dict.fromkeys(near))}?)" if near else ""


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults in the help, and the epilog (settings per environment) as written. A boolean's
    default is shown once, on its flag, not again on its off switch; a setting with no default
    (None: unset) shows none."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.nargs == 0 and action.const is False:  # an off switch (store_false)
            return action.help
        if action.default is None:
            return action.help
        return super()._get_help_string(action)


def build_parser(with_defaults: bool = True) -> argparse.ArgumentParser:
    return settings_parser(OneLineParser, with_defaults=with_defaults, prog="run.py",
                           description=DESCRIPTION, epilog=env_settings_help(),
                           formatter_class=_HelpFormatter)


def parse_args(argv: list[str]) -> Run:
    """A run from its command line: the flags given, then the saved run's (--resume) or the
    environment's own settings, then the defaults; checked."""
    given = given_flags(argv)
    if given.get("resume"):
        return resume(Path(given["resume"]), given)  # the saved settings include the env's own
    settings = Settings(**given)
    run = resolve(with_env_settings(settings, given))
    run.unused_flags = unused_settings(settings.mode, run.env_kind, list(given))
    run.idle_flags += idle_settings(settings, [n for n in given if n not in run.unused_flags])
    return run


def given_flags(argv: list[str]) -> dict[str, Any]:
    """The flags (and positionals) given on the command line, without the parser's defaults."""
    if "-h" in argv or "--help" in argv:
        build_parser().parse_args(["--help"])  # the help with every default; exits
    return vars(build_parser(with_defaults=False).parse_args(argv))


def with_env_settings(settings: Settings, given: dict[str, Any]) -> Settings:
    """The environment's own settings (launch/env_settings.py) for every flag not given. Where
    A2C's rate decays to 0 at the end of the environment's run (Pong's, MovingDot's), it does so
    at the end of a run of another length too."""
    env = env_settings(settings.env_id)
    own = {k: v for k, v in env.items() if k not in given}
    if "million_timesteps" in given and "lr_zero_million_timesteps" in own \
            and env["lr_zero_million_timesteps"] == env.get("million_timesteps"):
        own["lr_zero_million_timesteps"] = given["million_timesteps"]
    return dataclasses.replace(settings, **own)


# Settings only a new run takes: `--resume` refuses them.
NEW_RUN_ONLY = ("log_dir", "run_name", "load_prefs_dir", "load_policy_ckpt_dir", "start_policy",
                "load_reward_predictor_ckpt_dir")


def load_settings(run_dir: Path) -> Settings:
    """A run's saved settings; UsageError when the run directory has no readable settings."""
    try:
        return Settings.from_json(saved_settings(run_dir))
    except ValueError as e:
        raise UsageError(str(e)) from None
    except TypeError as e:
        raise UsageError(f"{run_dir}: {SETTINGS_FILE} is damaged ({e})") from None


def saved_run(run_dir: Path) -> Run:
    """A saved run as a Run on the CPU, to build its parts as it built them (`trainer_config`
    gives its predictor as A2C used it); UsageError when its settings cannot be read."""
    settings = load_settings(run_dir)
    return Run(settings, run_dir, env_kind(settings.env_id), "cpu", "cpu")


def resume(run_dir: Path, given: dict[str, Any]) -> Run:
    """--resume: the run's saved settings, overridden by the flags given now, started from the
    run's own checkpoints and label store."""
    saved = load_settings(run_dir)
    if saved.mode is None or saved.env_id is None:
        raise UsageError(f"--resume: {run_dir}/{SETTINGS_FILE} names no mode or env id")
    holder = run_dir_holder(run_dir)  # checked again as the run takes it (`make_run_dir`)
    if holder:
        raise UsageError(busy_message(run_dir, holder))
    if given.get("mode") not in (None, saved.mode):
        raise UsageError(f"--resume: this run's mode is {saved.mode}" if given["mode"] in MODES
                         else f"--resume: {given['mode']} is not a mode; the run goes on with "
                         f"its own, {saved.mode} {saved.env_id}, and needs neither")
    if given.get("env_id") is not None and not same_game(given["env_id"], saved.env_id):
        raise UsageError(f"--resume: this run's env_id is {saved.env_id}")
    # The run keeps its own mode and env id (MovingDot's other name does not rename it).
    overrides = {k: v for k, v in given.items() if k not in ("resume", "mode", "env_id")}
    new_run_only = sorted(set(overrides) & set(NEW_RUN_ONLY))
    if new_run_only:
        raise UsageError(f"--resume goes on in the run's own directory from its own store and "
                         f"checkpoints: --{', --'.join(new_run_only)} "
                         f"{'applies' if len(new_run_only) == 1 else 'apply'} to a new run only")
    settings = dataclasses.replace(saved, **overrides)
    problem = invalid_setting(settings)  # a bad value is a mistake, not "nothing to do"
    if problem:
        raise UsageError(problem)
    from pref_interface.store import StoreError, stored_labels

    try:  # the labels go on from the run's store: a damaged one is said now, not at the end
        held = stored_labels(run_dir / PREFS_FILE)
    except StoreError as e:
        raise UsageError(f"--resume: {e}") from None
    policy = run_dir / POLICY_DIR
    kept = checkpoints(policy)
    if kept and settings.mode in TRAINING_MODES:
        check_steps_left(run_dir, checkpoint_steps(kept[-1]), settings.million_timesteps)
    if settings.mode == "gather_initial_prefs":
        if held >= settings.n_initial_prefs:
            raise TargetReached(f"{run_dir} holds {held:,} labels, its target (--n_initial_prefs "
                                f"{settings.n_initial_prefs}): nothing to do; give a larger "
                                "--n_initial_prefs to go on")
    predictor = run_dir / "reward_predictor" / PREDICTOR_FILE
    start = dict(prefs_path=None if (run_dir / PREFS_FILE).is_file()  # the run's own store
                 else label_store(settings),  # --load_prefs_dir's, not yet copied when stopped
                 # stopped before its first checkpoint: the policy it was started from
                 policy_ckpt_dir=str(policy) if kept else settings.load_policy_ckpt_dir,
                 reward_ckpt_path=str(predictor) if predictor.is_file() else
                 predictor_file(settings))
    run = resolve(settings, run_dir, start)
    run.resumed, run.overrides = True, overrides
    return run


def resolve(s: Settings, run_dir: Path | None = None, start: dict[str, Any] | None = None
            ) -> Run:
    """Check every setting (each mistake a UsageError, before anything is written) and compute
    what follows from them. `run_dir`, `start`: a resumed run's directory (else it must not
    exist) and the checkpoints and store it starts from."""
    if s.mode is None or s.env_id is None:
        missing = "mode, env_id" if s.mode is None else "env_id"
        raise UsageError(f"the following arguments are required: {missing} (or --resume)")
    if s.mode not in MODES:
        raise UsageError(f"unknown mode {s.mode!r}; choose one of: {', '.join(MODES)}")
    try:
        kind = env_kind(s.env_id)
    except UnknownEnvError as e:
        raise UsageError(str(e)) from None
    problem = invalid_setting(s)  # each setting's own check, declared beside it
    if problem:
        raise UsageError(problem)
    if (s.implied_pairs or s.predictor_loss != "preference") and s.queries != "sort":
        raise UsageError("--implied_pairs and --predictor_loss rank|both need --queries sort "
                         "(they come from its order)")
    if s.queries == "sort" and s.query_selection != "random":
        raise UsageError("--queries sort chooses its own comparisons: "
                         "--query_selection applies to pairs")
    if s.labellers and (s.synthetic_prefs or s.clip_player not in ("auto", "web")):
        raise UsageError("--labellers: people label on the labelling page (--clip_player web), "
                         "not with --synthetic_prefs or another player")
    if s.leave_out and s.labellers and run_dir is None and not s.load_prefs_dir:
        others = set(parse_labellers(s.leave_out)) - set(parse_labellers(s.labellers))
        if others:  # a new run's labels come from its --labellers alone
            raise UsageError(f"--leave_out {','.join(sorted(others))}: not among --labellers "
                             f"{s.labellers}")
    # (a run from a loaded store takes that store as its initial labels, whatever their number)
    if s.mode == "train_policy_with_preferences" and s.label_schedule != "none" \
            and s.max_labels < s.n_initial_prefs and not s.load_prefs_dir:
        raise UsageError(f"--max_labels {s.max_labels} is below --n_initial_prefs "
                         f"{s.n_initial_prefs}: the initial labels alone would spend more than "
                         f"the --label_schedule {s.label_schedule} budget")
    if s.labellers and s.queries == "sort":
        raise UsageError("--labellers: sorting asks one comparison at a time; several people "
                         "label --queries pairs")
    if s.teacher_reward and (s.mode != "train_policy_with_preferences" or not s.synthetic_prefs
                             or teacher_kind(s.teacher) not in ENDURO_TEACHERS
                             or s.frozen_reward_predictor or s.load_prefs_dir
                             or s.load_reward_predictor_ckpt_dir):
        raise UsageError("--teacher_reward trains a policy on a synthetic teacher's per-step score "
                         "alone: train_policy_with_preferences with --synthetic_prefs and --teacher "
                         f"{' or '.join(sorted(ENDURO_TEACHERS))}, and no --frozen_reward_predictor or "
                         "--load_* of labels or a predictor")
    if teacher_kind(s.teacher) in ENDURO_TEACHERS and not judges(s.env_id):
        raise UsageError(f"--teacher {teacher_kind(s.teacher)} reads Enduro's frames; this run is "
                         f"{s.env_id}")
    if s.demonstrations:
        from clips.demonstrations import DemonstrationsError, load_demonstrations

        try:
            load_demonstrations(s.demonstrations, s.env_id)
        except DemonstrationsError as e:
            raise UsageError(f"--demonstrations: {e}") from None
    try:
        check_seed(s.seed, s.n_envs)
    except ValueError as e:
        raise UsageError(str(e)) from None
    if run_dir is None:
        run_dir = Path(s.log_dir) if s.log_dir else Path("runs") / (
            s.run_name or f"{time.strftime('%Y%m%d-%H%M%S')}_{s.mode}_{s.env_id}")
        if run_dir.exists():
            raise UsageError(f"run directory {run_dir} already exists; choose another "
                             "--log_dir/--run_name")
    s = policy_sources(s)
    run = Run(s, run_dir, kind,
              policy_device=resolve_device(s.device, "--device"),
              predictor_device=resolve_device(s.reward_predictor_device,
                                              "--reward_predictor_device"),
              **(start if start is not None else dict(
                  policy_ckpt_dir=s.load_policy_ckpt_dir, prefs_path=label_store(s),
                  reward_ckpt_path=predictor_file(s))))
    if run.labels_by_person:
        from pref_interface.labellers.player import resolve_player
        try:
            run.player_kind = "web" if s.labellers else resolve_player(s.clip_player)
        except ValueError as e:
            raise UsageError(str(e)) from None
    check_checkpoints(run)
    zero = s.lr_zero_million_timesteps
    if s.mode in TRAINING_MODES and zero is not None and zero < s.million_timesteps:
        run.idle_flags.append(
            f"A2C's learning rate reaches 0 at {zero:g}M agent steps "
            f"(--lr_zero_million_timesteps), before the run's end at {s.million_timesteps:g}M: "
            "the policy learns nothing after it")
    return run


def policy_sources(s: Settings) -> Settings:
    """--start_policy and --load_policy_ckpt_dir with a run directory given for either: the newest
    policy it holds, and its checkpoint directory (UsageError where it holds none)."""
    if s.start_policy and is_run_dir(Path(s.start_policy)):
        policy = playable_policy(Path(s.start_policy))
        if not policy.exists():
            raise UsageError(f"--start_policy: run {s.start_policy} holds no policy yet")
        s = dataclasses.replace(s, start_policy=str(policy))
    if s.load_policy_ckpt_dir and is_run_dir(Path(s.load_policy_ckpt_dir)):
        run_dir = Path(s.load_policy_ckpt_dir)
        if not checkpoints(run_dir / POLICY_DIR):
            raise UsageError(f"--load_policy_ckpt_dir: run {run_dir} holds no A2C policy "
                             "checkpoint (its policy's weights alone: --start_policy)"
                             if newest_policy(run_dir).is_file() else
                             f"--load_policy_ckpt_dir: run {run_dir} holds no policy yet")
        s = dataclasses.replace(s, load_policy_ckpt_dir=str(run_dir / POLICY_DIR))
    return s


def check_checkpoints(run: Run) -> None:
    """Load the checkpoints the run starts from, in a child (loading needs torch)."""
    from launch.configs import trainer_config

    s = run.settings
    if s.start_policy and s.load_policy_ckpt_dir:
        raise UsageError("--start_policy and --load_policy_ckpt_dir both say where the policy "
                         "starts: give one")
    checks = ([partial(check_policy, run.policy_ckpt_dir, s.env_id)] if run.policy_ckpt_dir
              else [partial(check_start_policy, s.start_policy, s.env_id)] if s.start_policy
              else [])
    if run.reward_ckpt_path:
        checks.append(partial(check_predictor, trainer_config(run, load_from=None, save=False),
                              run.reward_ckpt_path))
    error = first_error(checks)
    if error:
        raise UsageError(error)


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


def label_store(s: Settings) -> str | None:
    """--load_prefs_dir as a store that opens and holds labels."""
    if s.mode == "pretrain_reward_predictor" and not s.load_prefs_dir:
        raise UsageError("pretrain_reward_predictor needs --load_prefs_dir")
    if not s.load_prefs_dir:
        return None
    from pref_interface.store import PreferenceStore, StoreError

    path = Path(s.load_prefs_dir)
    path = path / PREFS_FILE if path.is_dir() else path
    try:
        with PreferenceStore(str(path), create=False) as store:
            n = len(store)
    except StoreError as e:
        raise UsageError(str(e)) from None
    if n == 0:
        raise UsageError(f"the preference store {path} holds no labels")
    try:  # a run's own store: its clips are of the run's game
        source = saved_settings(path.parent).get("env_id") if path.name == PREFS_FILE else None
    except ValueError:  # a store on its own names no game
        source = None
    if isinstance(source, str) and not same_game(source, s.env_id):
        raise UsageError(f"the labels in {path} are of {source}'s clips, not {s.env_id}'s")
    return str(path)


def predictor_file(s: Settings) -> str | None:
    """--load_reward_predictor_ckpt_dir as a checkpoint file (loaded by `check_checkpoints`)."""
    if s.frozen_reward_predictor and not s.load_reward_predictor_ckpt_dir:
        raise UsageError("--frozen_reward_predictor needs --load_reward_predictor_ckpt_dir")
    if not s.load_reward_predictor_ckpt_dir:
        return None
    path = Path(s.load_reward_predictor_ckpt_dir)
    for candidate in (path / "reward_predictor" / PREDICTOR_FILE, path / PREDICTOR_FILE, path):
        if candidate.is_file():
            return str(candidate)
    return str(path)
