"""The modes: gathering labels, pretraining the predictor, and training the policy, each as the
processes it starts and supervises."""
from __future__ import annotations

import sys
from functools import partial
from pathlib import Path
from typing import Any, Callable

from envs import MAX_SEED
from launch.configs import (MILLION, a2c_config, agent_stats, labelling_config, trainer_config,
                            trainer_environ)
from launch.loop import Channels, PreferenceLoop, run_labelling, start_agent
from launch.rundir import (PREDICTOR_FILE, PREFS_FILE, Run, epochs_pretrained,
                           record_epochs_pretrained)
from launch.session import Session
from launch.summary import RunReport
from launch.supervisor import Progress, Supervisor, a2c_status
from pref_interface.store import PreferenceStore, stored_labels
from reward_predictor import entry_points as predictor


def gather_seed(seed: int, n_envs: int, store_path: str) -> int:
    """The agent's seed for a gathering: a resumed one plays other episodes, since the run's own
    seed would replay the clips whose pairs were labelled already and ask them again. The offset
    counts every label ever stored, so deleting some never brings back an earlier offset."""
    if not Path(store_path).is_file():
        return seed
    with PreferenceStore(store_path, create=False) as store:
        ever = store.ever_stored()
    return (seed + ever * n_envs) % (MAX_SEED - n_envs + 2)


def gather_phase(run: Run, ctx, session: Session, report: RunReport | None = None) -> int:
    """The starting policy (untrained unless --start_policy) acts, with no updates, while clips
    are labelled into the store."""
    from pref_interface.labelling import LabellingStats

    n_labels = run.settings.n_initial_prefs
    sup = Supervisor(ctx, session.run_dir_fd)
    ch = Channels.for_run(ctx, session, sup.stop_event, trainer=False)
    store_path = str(run.dir / PREFS_FILE)
    a2c_stats = agent_stats(ctx, run)
    stored = stored_labels(store_path)
    labelling_stats = LabellingStats.create(ctx, labels_stored=stored)
    if report is not None:
        report.agent_stats = a2c_stats
    config = a2c_config(run)
    config.learn, config.total_timesteps = False, 2 ** 62  # runs until the labels are in
    config.seed = gather_seed(run.settings.seed, run.settings.n_envs, store_path)
    every_env = run.settings.gather_clips == "every_env"
    sup.start("labelling", run_labelling,
              labelling_config(run, session.page_updates, n_labels), ch, stats=labelling_stats,
              store_path=store_path, log_dir=str(run.dir / "tb" / "labels"))
    start_agent(sup, ch, config, log_dir=str(run.dir / "tb" / "gather"), stats=a2c_stats,
                make_observers=ch.a2c_observers(run.settings.env_id, labelling_stats, every_env,
                                                hold=True))
    whose = "the starting policy" if run.settings.start_policy else "the untrained policy"
    print(f"gathering {n_labels} labels from {whose}"
          + (f" ({stored} stored already)" if stored else ""), file=sys.stderr)
    say_how_to_answer(run, session)
    # One person labelling sees the counters in the prompt: no status line over the player;
    # several people label in their browsers, and the terminal shows the count.
    team = session.page is not None and session.page.labellers
    progress = None if ch.answers is not None and not team else Progress(
        "labels", n_labels, "label", lambda: (labelling_stats.labels_stored.value, a2c_status(a2c_stats)))
    code = sup.wait(progress=progress, until=lambda: not sup.procs["labelling"].is_alive())
    if code == 0 and ch.answers is not None and labelling_stats.labels_stored.value < n_labels:
        session.labelling_stopped = True  # Ctrl-D, or the piped answers ended: it stays so
    return code


def say_how_to_answer(run: Run, session: Session) -> None:
    """Where a person answers and how labelling and the run stop (nothing without a person);
    after Ctrl-D (or the end of piped answers) in an earlier phase, labelling stays off."""
    if session.answers is None:
        return
    if session.labelling_stopped:
        print("labelling is off: its input ended (Ctrl-D); --resume the run to label again, "
              "Ctrl-C stops it", file=sys.stderr)
    elif run.player_kind == "web" and not sys.stdin.isatty():
        print("answer on the page; Ctrl-C stops the run", file=sys.stderr)
    else:
        print("answer " + ("on the page or " if run.player_kind == "web" else "") +
              "here: Ctrl-D stops labelling (labels kept), Ctrl-C stops the run", file=sys.stderr)


def pretrain_phase(run: Run, ctx, session: Session, prefs_path: str) -> tuple[int, str | None]:
    """Pretrain the predictor on the stored labels; a resumed run does only the epochs left.
    Returns an exit status and the predictor to go on from."""
    from reward_predictor.config import TrainerStats

    n_epochs = run.settings.n_initial_epochs
    done = epochs_pretrained(run.dir) if run.reward_ckpt_path else 0
    epochs = n_epochs - done
    if epochs <= 0:
        return 0, run.reward_ckpt_path
    sup = Supervisor(ctx, session.run_dir_fd)
    stats = TrainerStats.create(ctx)
    print(f"pretraining the reward predictor for {epochs} epoch{'s' if epochs != 1 else ''}",
          file=sys.stderr)
    if session.page_updates is not None:
        session.page_updates.put({"notice": f"pretraining the reward predictor ({epochs} "
                                            "epochs); labelling goes on after it"})
    config = trainer_config(run, load_from=run.reward_ckpt_path)
    config.initial_prefs_path, config.pretrain_epochs = prefs_path, epochs
    sup.start("reward_predictor", predictor.run_pretraining, config,
              environ=trainer_environ(config), stop=sup.stop_event, stats=stats,
              log_dir=str(run.dir / "tb" / "pretrain"))
    code = sup.wait(progress=Progress(
        "pretraining", n_epochs, "epoch",
        lambda: (done + stats.epoch.value, stats.val_accuracy_text())))
    own = run.dir / "reward_predictor" / PREDICTOR_FILE
    if own.is_file():  # saved at its end however it ended, a crash included
        record_epochs_pretrained(run.dir, done + stats.epoch.value)
    return code, str(own) if own.is_file() else None


def copy_prefs(run: Run) -> str:
    """This run's store: a copy of --load_prefs_dir's, so the original is never written to. The
    copy is made beside the store and renamed into place once whole: a run stopped while copying
    has no store yet, and its resume copies again (`launch.cli`)."""
    from pref_interface.store import PreferenceStore
    from runtime.outputs import written_whole

    path = run.dir / PREFS_FILE
    if run.prefs_path:
        with PreferenceStore(run.prefs_path, create=False) as src, \
                written_whole(path, ".copying") as part:
            src.backup_to(part)
    return str(path)


def gather_initial_prefs(run: Run, ctx, session: Session, report: RunReport) -> int:
    return gather_phase(run, ctx, session, report)


def pretrain_reward_predictor(run: Run, ctx, session: Session, report: RunReport) -> int:
    return pretrain_phase(run, ctx, session, copy_prefs(run))[0]


def train_policy_with_preferences(run: Run, ctx, session: Session, report: RunReport) -> int:
    """Gather (unless loaded), pretrain (unless loaded), then A2C, labelling (unless the person
    stopped it while gathering) and predictor training all at once; or, with
    --frozen_reward_predictor, A2C alone on a fixed predictor, and with --teacher_reward, on the
    synthetic teacher's own per-step score."""
    s = run.settings
    if s.frozen_reward_predictor:
        return a2c_alone(run, ctx, session, report, partial(
            predictor.frozen_reward, trainer_config(run, load_from=None, save=False),
            run.reward_ckpt_path))
    if s.teacher_reward:
        return a2c_alone(run, ctx, session, report,
                         partial(predictor.teacher_reward, s.teacher, s.reward_std))

    code, prefs_path, predictor_path = prepare_predictor(run, ctx, session, report)
    if code or prefs_path is None:
        return code
    loop = PreferenceLoop(run, ctx, session, prefs_path, predictor_path, agent=a2c_config(run))
    report.agent_stats = loop.agent_stats
    beside = "" if session.labelling_stopped else ", labelling beside it"
    print(f"training the policy on r̂ to {int(s.million_timesteps * MILLION):,} agent steps"
          f"{beside} ({stored_labels(prefs_path):,} labels held)", file=sys.stderr)
    say_how_to_answer(run, session)
    # While a person labels, the counters are in the prompt: no bar over the player.
    person = loop.ch.answers is not None and not session.labelling_stopped
    progress = None if person else training_progress(
        run, loop.agent_stats, lambda: loop.status(steps=False))
    code = loop.sup.wait(loop.status, until=lambda: not loop.sup.procs["a2c"].is_alive(),
                         progress=progress)
    loop.ch.reward_weights.remove_left_block()
    return code


def training_progress(run: Run, stats, status) -> Progress:
    """The policy's training as a progress bar of agent steps, `status()` beside it."""
    return Progress("agent steps", int(run.settings.million_timesteps * MILLION), "step",
                    lambda: (stats.timesteps.value, status()), unit_scale=True)


def prepare_predictor(run: Run, ctx, session: Session, report: RunReport | None = None
                      ) -> tuple[int, str | None, str | None]:
    """Gather the initial labels and pretrain the predictor on them, unless a store or predictor
    was loaded. Returns an exit status, the run's store (None: no label to train on) and the
    predictor to train on from."""
    prefs_path = copy_prefs(run)
    # A run that began from a loaded store (--load_prefs_dir, kept in its settings when it is
    # resumed) has its initial labels: it never gathers.
    if not run.settings.load_prefs_dir and stored_labels(prefs_path) < run.settings.n_initial_prefs:
        code = gather_phase(run, ctx, session, report)
        if code:
            return code, None, None
        if stored_labels(prefs_path) == 0:  # labelling was stopped before the first label
            hint = ("; the answers were read from stdin, which ended first: label in a terminal, "
                    "a window (a display) or the browser (--labellers NAME), or give "
                    "--synthetic_prefs" if run.player_kind == "terminal" and not sys.stdin.isatty()
                    else "")
            print(f"no labels to train the reward predictor on: stopping{hint}", file=sys.stderr)
            return 0, None, None
    predictor_path = run.reward_ckpt_path
    own = run.dir / "reward_predictor" / PREDICTOR_FILE
    # A loaded predictor is not pretrained; a resumed run finishes its own pretraining.
    if not run.reward_ckpt_path or (run.resumed and Path(run.reward_ckpt_path).resolve() == own.resolve()):
        code, predictor_path = pretrain_phase(run, ctx, session, prefs_path)
        if code:
            return code, None, None
    # From here on the predictor counts as pretrained, also when it was loaded from elsewhere.
    record_epochs_pretrained(run.dir, run.settings.n_initial_epochs)
    return 0, prefs_path, predictor_path


def train_policy_with_original_rewards(run: Run, ctx, session: Session, report: RunReport
                                       ) -> int:
    return a2c_alone(run, ctx, session, report)


def a2c_alone(run: Run, ctx, session: Session, report: RunReport,
              make_reward_fn: Callable[[], Any] | None = None) -> int:
    """A2C with no labelling beside it, on the game's reward or `make_reward_fn`'s."""
    sup = Supervisor(ctx, session.run_dir_fd)
    ch = Channels.for_run(ctx, session, sup.stop_event, trainer=False)
    stats = report.agent_stats = agent_stats(ctx, run)
    start_agent(sup, ch, a2c_config(run), log_dir=str(run.dir / "tb"), stats=stats,
                make_reward_fn=make_reward_fn,
                make_observers=ch.a2c_observers(run.settings.env_id))
    return sup.wait(progress=training_progress(run, stats, lambda: a2c_status(stats, False)),
                    until=lambda: not sup.procs["a2c"].is_alive())


MODE_RUNNERS = {"gather_initial_prefs": gather_initial_prefs,
                "pretrain_reward_predictor": pretrain_reward_predictor,
                "train_policy_with_preferences": train_policy_with_preferences,
                "train_policy_with_original_rewards": train_policy_with_original_rewards}
