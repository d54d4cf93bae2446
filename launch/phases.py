"""The modes: gathering labels, pretraining the predictor, and training the policy, each as the
processes it starts and supervises."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from launch.configs import PREDICTOR_FILE, PREFS_FILE, a2c_config, interface_config, trainer_config
from launch.deferred import Deferred
from launch.summary import RunReport
from launch.supervisor import (Channels, Progress, Supervisor, a2c_status, percent,
                               preference_status)

A2C = "a2c.train:train_a2c"  # the processes' entry points, imported in the child
INTERFACE = "pref_interface.process:run_pref_interface"


def gather_phase(args, run_dir: Path, ctx, n_labels: int,
                 report: RunReport | None = None) -> int:
    """The untrained policy acts (no updates) while clips are labelled into the store."""
    from a2c.config import A2CStats
    from pref_interface.process import InterfaceStats

    sup = Supervisor(ctx, ctx.Event())
    ch = Channels.for_run(ctx, args, sup.stop_event)
    a2c_stats, istats = A2CStats(ctx), InterfaceStats.create(ctx)
    if report is not None:
        report.agent_stats = a2c_stats
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
    progress = None if ch.answers is not None else Progress(
        "labels", n_labels, "label", lambda: (istats.labels_total.value, a2c_status(a2c_stats)))
    return sup.wait(progress=progress, until=lambda: not sup.procs["pref_interface"].is_alive())


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
    code = sup.wait(progress=Progress(
        "pretraining", args.n_initial_epochs, "epoch",
        lambda: (done + stats.epoch.value, f"val acc {percent(stats.val_accuracy.value)}")))
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


def gather_initial_prefs(args, run_dir: Path, ctx, report: RunReport) -> int:
    return gather_phase(args, run_dir, ctx, args.n_initial_prefs, report)


def pretrain_reward_predictor(args, run_dir: Path, ctx, report: RunReport) -> int:
    return pretrain_phase(args, run_dir, ctx, copy_prefs(args, run_dir))


def train_policy_with_preferences(args, run_dir: Path, ctx, report: RunReport) -> int:
    """Gather (unless loaded), pretrain (unless loaded), then A2C, labelling and predictor
    training all at once; or, with --frozen_reward_predictor, A2C alone on a fixed predictor."""
    from a2c.config import A2CStats

    if args.frozen_reward_predictor:
        sup = Supervisor(ctx, ctx.Event())
        ch = Channels.for_run(ctx, args, sup.stop_event)
        stats = report.agent_stats = A2CStats(ctx)
        sup.start("a2c", A2C, a2c_config(args, run_dir), str(run_dir / "tb"), stats,
                  Deferred("reward_predictor.reward_fn:frozen_reward", trainer_config(args, None),
                           args.reward_ckpt_path),
                  ch.a2c_observers(), sup.stop_event)
        ch.start_episode_viewer(sup)
        return sup.wait(progress=training_progress(args, stats, lambda: a2c_status(stats, False)),
                        until=lambda: not sup.procs["a2c"].is_alive())

    code, prefs_path = prepare_predictor(args, run_dir, ctx, report)
    if code or prefs_path is None:
        return code
    loop = PreferenceLoop(args, run_dir, ctx, prefs_path)
    report.agent_stats = loop.agent_stats
    loop.sup.start("a2c", A2C, a2c_config(args, run_dir), str(run_dir / "tb"), loop.agent_stats,
                   loop.reward_fn, loop.observers, loop.ch.stop, loop.pace)
    loop.ch.start_episode_viewer(loop.sup)
    # While a person labels, the counters are in the prompt: no bar over the player.
    progress = None if loop.ch.answers is not None else training_progress(
        args, loop.agent_stats, lambda: loop.status(steps=False))
    return loop.sup.wait(loop.status, until=lambda: not loop.sup.procs["a2c"].is_alive(),
                         progress=progress)


def training_progress(args, stats, status) -> Progress:
    """The policy's training as a progress bar of agent steps, `status()` beside it."""
    return Progress("agent steps", int(args.million_timesteps * 1e6), "step",
                    lambda: (stats.timesteps.value, status()), unit_scale=True)


def prepare_predictor(args, run_dir: Path, ctx, report: RunReport | None = None
                      ) -> tuple[int, str | None]:
    """Gather the initial labels and pretrain the predictor on them, unless a store or predictor
    was loaded; returns an exit status and the run's store (None: no label to train on)."""
    prefs_path = copy_prefs(args, run_dir)
    if not args.prefs_path and stored_labels(prefs_path) < args.n_initial_prefs:
        code = gather_phase(args, run_dir, ctx, args.n_initial_prefs, report)
        if code:
            return code, None
        if stored_labels(prefs_path) == 0:  # labelling was stopped before the first label
            print("no labels to train the reward predictor on: stopping", file=sys.stderr)
            return 0, None
    if not args.reward_ckpt_path or args.resume:
        code = pretrain_phase(args, run_dir, ctx, prefs_path)
        if code:
            return code, None
    # From here on the predictor counts as pretrained, also when it was loaded from elsewhere.
    (run_dir / "reward_predictor").mkdir(exist_ok=True)
    (run_dir / "reward_predictor" / "pretraining.json").write_text(
        json.dumps({"epochs_done": args.n_initial_epochs}) + "\n")
    return 0, prefs_path


class PreferenceLoop:
    """The processes beside the agent: the predictor's trainer and the preference interface,
    started; and what the agent needs from them, as calls made in the agent's own process:
    `reward_fn()` (r̂), `observers(n_envs)` (the clip cutter) and `pace()`. The agent is run.py's
    A2C process or, through launch/preference_env.py, any library's training loop."""

    def __init__(self, args, run_dir: Path, ctx, prefs_path: str) -> None:
        from a2c.config import A2CStats
        from pref_interface.process import InterfaceStats
        from reward_predictor.config import TrainerStats
        from reward_predictor.pace import labels_per_member
        from reward_predictor.shared import SharedWeights

        tconfig = trainer_config(args, run_dir)
        tconfig.initial_prefs_path = prefs_path
        self.sup = sup = Supervisor(ctx, ctx.Event())
        self.ch = ch = Channels.for_run(ctx, args, sup.stop_event, SharedWeights(ctx))
        self.agent_stats, self.trainer_stats = A2CStats(ctx), TrainerStats.create(ctx)
        self.interface_stats = InterfaceStats.create(ctx, self.trainer_stats.labels_received)
        sup.start("reward_predictor", "reward_predictor.process:run_trainer", tconfig,
                  ch.preferences, ch.reward_weights, ch.stop, self.trainer_stats,
                  str(run_dir / "tb" / "reward_predictor"))
        sup.start("pref_interface", INTERFACE, interface_config(args), ch.segments,
                  ch.preferences, ch.stop, self.interface_stats, prefs_path, None,
                  str(run_dir / "tb" / "labels"), ch.answers, self.trainer_stats.val_accuracy,
                  Deferred("reward_predictor.reward_fn:PreferencePredictor", ch.reward_weights,
                           tconfig),
                  self.agent_stats.timesteps)
        self.reward_fn = Deferred("reward_predictor.reward_fn:PredictedReward", ch.reward_weights,
                                  tconfig)
        self.observers = ch.a2c_observers(self.interface_stats)
        self.pace = Deferred("reward_predictor.pace:PredictorPace", ch.reward_weights,
                             labels_per_member(args.min_predictor_labels_per_step,
                                               args.predictor_pace_unit, args.ensemble_size))

    def status(self, steps: bool = True) -> str:
        """The status line; "" while a person labels (the counters are in the prompt)."""
        if self.ch.answers is not None and self.sup.procs["pref_interface"].is_alive():
            return ""
        return preference_status(self.agent_stats, self.interface_stats, self.trainer_stats,
                                 steps)


def train_policy_with_original_rewards(args, run_dir: Path, ctx, report: RunReport) -> int:
    from a2c.config import A2CStats

    sup = Supervisor(ctx, ctx.Event())
    ch = Channels.for_run(ctx, args, sup.stop_event)
    stats = report.agent_stats = A2CStats(ctx)
    sup.start("a2c", A2C, a2c_config(args, run_dir), str(run_dir / "tb"), stats, None,
              ch.a2c_observers(), sup.stop_event)
    ch.start_episode_viewer(sup)
    return sup.wait(progress=training_progress(args, stats, lambda: a2c_status(stats, False)),
                    until=lambda: not sup.procs["a2c"].is_alive())


MODE_RUNNERS = {"gather_initial_prefs": gather_initial_prefs,
                "pretrain_reward_predictor": pretrain_reward_predictor,
                "train_policy_with_preferences": train_policy_with_preferences,
                "train_policy_with_original_rewards": train_policy_with_original_rewards}
