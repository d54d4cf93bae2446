"""The paper's loop: open this module first (Christiano et al. 2017, Fig. 1 and §2.2).

    agent (A2C) ───── clips ─────▶ labelling ───── preferences ─────▶ predictor trainer
        ▲                              │ label store (prefs.sqlite)           │
        └──────── r̂ and its pace ◀──────────── reward_weights ───────────────┘

Three processes run at once, each one of the loops below, and are joined by named channels
(`Channels`); once a person has stopped labelling (Ctrl-D) while gathering, training runs the
other two. The roles, and where each one lives:

- clip source: `clips.observer.ClipObserver`, in the agent's process; it cuts 25-step
  clips from every rollout and sends them on `clips` (dropped rather than waited for).
- pair selection: `pref_interface.queries.pairs.ClipBuffer` with `pref_interface.queries.selection` (random or
  by the ensemble's disagreement, §2.2.4), or with `--queries sort` each new clip placed among
  the sorted ones by comparisons (`pref_interface.queries.sorting`), run by `Labelling.draw_pairs`.
- labeller: a person or a scripted teacher (`pref_interface.labellers.teachers`), `Labelling.label`.
- label store: `pref_interface.store.PreferenceStore` (SQLite); `Labelling.commit` stores every
  label before it goes on `preferences` to the trainer (never dropped).
- predictor trainer: `reward_predictor.process.PredictorTraining`, an ensemble trained
  continuously on the newest labels (§2.2.3, App. A), its weights published to `reward_weights`.
- reward for the agent: `reward_predictor.reward_fn.PredictedReward`, r̂ read from
  `reward_weights` in the agent's process, normalised (§2.2.1).
- pace: `reward_predictor.pace.PredictorPace`, which holds the agent back while the predictor has
  trained on too few labels per agent step (App. A.2); with a ceiling the trainer rests while it
  has trained on too many (`ahead_of_agent`).

Before the loop, a run gathers its first labels (the agent's loop without learning beside the
labelling loop without a trainer; `--gather_clips` says how its clips are cut) and pretrains the
predictor on them (`reward_predictor.process.run_pretraining`): `launch/phases.py`.

This module never imports torch: the process bodies import the parts in the child.
"""
from __future__ import annotations

import time
from functools import partial
from typing import Any, Iterator, Protocol

from launch.configs import agent_stats, labelling_config, trainer_config, trainer_environ
from launch.rundir import Run
from launch.session import Session
from launch.stopping import SwitchFlag
from launch.supervisor import Supervisor, preference_status
from reward_predictor import entry_points as predictor
from reward_predictor.pace import PredictorPace, labels_per_member

IDLE_SLEEP_S = 0.02  # how long labelling sleeps when there is no pair to label yet
WAIT_FOR_LABELS_S = 0.05  # how long the trainer sleeps with no label, or ahead of the agent


class AgentSteps(Protocol):
    """The agent's steps, as `agent_loop` calls them (`a2c.train.A2CAgent`)."""

    finished: bool
    timesteps: int

    def wait_for_predictor(self, stop: Any = None) -> None: ...
    def act(self) -> Any: ...
    def learn(self, rollout: Any) -> None: ...
    def record(self, rollout: Any) -> None: ...
    def checkpoint_if_due(self) -> None: ...
    def close(self) -> None: ...


class LabellingSteps(Protocol):
    """The labelling side's steps, as `labelling_loop` calls them
    (`pref_interface.process.Labelling`)."""

    done: bool

    def take_clips(self) -> None: ...
    def record(self) -> None: ...
    def draw_pairs(self) -> list: ...
    def idle(self) -> None: ...
    def ask(self, pairs: list) -> Iterator[Any]: ...
    def commit(self, pref: Any) -> None: ...
    def close(self) -> None: ...


class TrainerSteps(Protocol):
    """The predictor trainer's steps, as `predictor_loop` calls them
    (`reward_predictor.process.PredictorTraining`)."""

    has_labels: bool
    ahead_of_agent: bool

    def take_labels(self) -> None: ...
    def train_step(self) -> None: ...
    def publish_if_due(self) -> None: ...
    def validate_if_due(self) -> None: ...
    def checkpoint_if_due(self) -> None: ...
    def close(self) -> None: ...


def agent_loop(agent: AgentSteps, stop: Any | None = None) -> int:
    """Fig. 1, left: the policy acts, learns from r̂ and is checkpointed, until it has taken its
    steps or is stopped; the last checkpoint is written on the way out. Returns the steps."""
    try:
        while not agent.finished and not (stop is not None and stop.is_set()):
            agent.wait_for_predictor(stop)
            rollout = agent.act()  # the clip source sees it
            agent.learn(rollout)
            agent.record(rollout)
            agent.checkpoint_if_due()
    except KeyboardInterrupt:
        pass
    finally:
        agent.close()
    return agent.timesteps


def labelling_loop(labelling: LabellingSteps, stop: Any) -> None:
    """Fig. 1, middle: pairs of clips are drawn, answered and committed, until stopped, until
    the run's label target is stored, or until the person stops labelling."""
    from pref_interface.labelling import LabellingStopped

    try:
        while not stop.is_set():
            labelling.take_clips()
            labelling.record()
            if labelling.done:
                return
            pairs = labelling.draw_pairs()
            answered = 0
            for pref in labelling.ask(pairs):  # incomparable pairs are not stored (§2.2.2)
                labelling.commit(pref)
                answered += 1
            if not pairs and not answered:
                labelling.idle()
                time.sleep(IDLE_SLEEP_S)
    except LabellingStopped:
        labelling.done = True  # the trainer, if any, goes on with the labels it has
    except KeyboardInterrupt:
        pass  # every label made so far is committed
    finally:
        labelling.close()


def predictor_loop(training: TrainerSteps, stop: Any) -> None:
    """Fig. 1, right: the predictor keeps fitting the labels it holds, publishing its weights to
    the agent's r̂, until stopped; the last weights are published and saved on the way out."""
    try:
        while not stop.is_set():
            training.take_labels()
            if not training.has_labels or training.ahead_of_agent:
                time.sleep(WAIT_FOR_LABELS_S)
                continue
            training.train_step()
            training.publish_if_due()
            training.validate_if_due()
            training.checkpoint_if_due()
    except KeyboardInterrupt:
        pass
    finally:
        training.close()


# The process bodies: each builds its part's steps in the child (torch is imported there) and
# runs its loop. The channels are passed whole, under their names.

def run_agent(config: Any, channels: "Channels | None" = None, **parts: Any) -> int:
    """The agent's process (`a2c.train.A2CAgent`, its reward, clip source and pace made by the
    factories in `parts`); returns the agent steps reached. Without `channels` it runs alone
    until its steps are done (benchmarks, tests)."""
    from a2c.train import A2CAgent

    return agent_loop(A2CAgent(config, **parts), channels.stop if channels else None)


def run_labelling(config: Any, channels: "Channels", **parts: Any) -> None:
    """The labelling process (`pref_interface.process.Labelling`)."""
    from pref_interface.process import Labelling

    labelling_loop(Labelling(config, channels, **parts), channels.stop)


def run_predictor_trainer(config: Any, channels: "Channels", **parts: Any) -> None:
    """The predictor trainer's process (`reward_predictor.process.PredictorTraining`)."""
    from reward_predictor.process import PredictorTraining

    predictor_loop(PredictorTraining(config, channels, **parts), channels.stop)


def start_agent(sup: Supervisor, ch: "Channels", config: Any, *, log_dir: str, stats: Any,
                make_observers: Any, make_reward_fn: Any = None, make_pace: Any = None) -> None:
    """Start the agent's process ("a2c", `run_agent`) under `sup`, stopped by `ch.stop`, and the
    episode viewer beside it when the run shows episodes. Gathering, training and A2C alone all
    start it here."""
    sup.start("a2c", run_agent, config, ch, log_dir=log_dir, stats=stats,
              make_reward_fn=make_reward_fn, make_observers=make_observers, make_pace=make_pace)
    ch.start_episode_viewer(sup)


class Channels:
    """Everything the processes share, named in one place.

    clips: the agent's clip source -> labelling; small, the agent drops clips when it is full.
    preferences: labelling -> predictor trainer; unbounded, never dropped.
    reward_weights: predictor trainer -> the agent's r̂ and pace; shared-memory weights with a
        version number.
    answers: main process's terminal key reader -> human labeller (pref_interface.labellers.keys); one
        queue for the whole run (None when nobody labels by hand).
    page_updates (the session's, passed in labelling's config): the human labeller's
        WebPlayer -> the labelling page's server in the main process (--clip_player web); one
        queue for the whole run.
    episodes: the agent -> episode viewer (--render_episodes); maxsize 1, dropped when full.
    clips_wanted: labelling -> the agent's clip source, a flag clear while a person labels,
        pairs enough wait and nobody answers (None: clips always wanted).
    stop: set once to end every process cleanly (launch/stopping.py).
    """

    def __init__(self, stop: Any, clips: Any = None, preferences: Any = None,
                 reward_weights: Any = None, answers: Any = None, episodes: Any = None,
                 clips_wanted: Any = None) -> None:
        self.stop, self.clips, self.preferences = stop, clips, preferences
        self.reward_weights, self.answers, self.episodes = reward_weights, answers, episodes
        self.clips_wanted = clips_wanted

    @classmethod
    def for_run(cls, ctx, session, stop, reward_weights=None, trainer: bool = True
                ) -> "Channels":
        """The channels of one phase, made with `ctx`; `trainer`: a predictor trainer takes the
        labels (gathering has none: `preferences` is None). The person's (answers, episodes)
        follow `session`."""
        from pref_interface.labellers.episodes import EPISODE_QUEUE_MAXSIZE
        from pref_interface.process import CLIP_QUEUE_MAXSIZE

        # Not an Event: the agent killed while waiting on one would leave labelling's set() blocked.
        wanted = SwitchFlag(ctx, True) if session.answers is not None else None  # a person labels
        return cls(stop, ctx.Queue(maxsize=CLIP_QUEUE_MAXSIZE), ctx.Queue() if trainer else None,
                   reward_weights, session.answers,
                   ctx.Queue(maxsize=EPISODE_QUEUE_MAXSIZE) if session.show_episodes else None,
                   wanted)

    def a2c_observers(self, env_id: str, labelling_stats=None, every_env: bool = False,
                      hold: bool = False):
        """The agent's rollout observers (clip source, episode recorder, Enduro's level share)
        as one picklable factory; `every_env`: clips cut from every env at once (gathering the
        first labels); `hold`: the agent waits while labelling wants no clips (gathering)."""
        from clips.observer import make_clip_observers
        from pref_interface.labellers.alongside import judges, make_level_share_observers
        from pref_interface.labellers.episodes import chain_observers, make_episode_observers

        factories = [make_level_share_observers] if judges(env_id) else []
        if labelling_stats is not None:
            factories.append(partial(make_clip_observers, self.clips,
                                     labelling_stats.clips_dropped, every_env=every_env,
                                     wanted=self.clips_wanted, hold=hold, stop=self.stop))
        if self.episodes is not None:
            factories.append(partial(make_episode_observers, self.episodes))
        return partial(chain_observers, factories) if factories else None

    def start_episode_viewer(self, sup) -> None:
        if self.episodes is not None:
            from pref_interface.labellers.episodes import run_episode_viewer

            sup.start("episode_viewer", run_episode_viewer, self.episodes, self.stop)


class PreferenceLoop:
    """The loop's roles beside the agent, started: the predictor trainer's and the labelling
    processes (no labelling once the person stopped it), and the agent's three roles as
    factories called in the agent's own process: `reward_fn()` (the reward for the agent, r̂),
    `observers(n_envs)` (the clip source) and `pace()`. With `agent` (an A2C run config) the
    loop starts run.py's A2C process with them (`start_agent`); without, the caller's process is
    the agent (launch/preference_env.py: any library's training loop), and starts the episode
    viewer itself."""

    def __init__(self, run: Run, ctx, session: Session, prefs_path: str,
                 predictor_path: str | None, agent: Any = None) -> None:
        from pref_interface.labelling import LabellingStats
        from pref_interface.store import stored_labels
        from reward_predictor.config import TrainerStats
        from reward_predictor.shared import SharedWeights

        s = run.settings
        tconfig = trainer_config(run, load_from=predictor_path)
        tconfig.initial_prefs_path = prefs_path
        self.sup = sup = Supervisor(ctx, session.run_dir_fd)
        self.page = session.page
        self.ch = ch = Channels.for_run(ctx, session, sup.stop_event, SharedWeights(ctx))
        self.agent_stats, self.trainer_stats = agent_stats(ctx, run), TrainerStats.create(ctx)
        self.labelling_stats = LabellingStats.create(ctx, self.trainer_stats.labels_received,
                                                     stored_labels(prefs_path))
        sup.start("reward_predictor", run_predictor_trainer, tconfig, ch,
                  environ=trainer_environ(tconfig), stats=self.trainer_stats,
                  log_dir=str(run.dir / "tb" / "reward_predictor"))
        # After the person stopped labelling (Ctrl-D) in gathering, no labelling process and no
        # clip source: the predictor goes on with the labels held.
        self.labelling = not session.labelling_stopped
        if self.labelling:
            sup.start("labelling", run_labelling, labelling_config(run, session.page_updates),
                      ch, stats=self.labelling_stats, store_path=prefs_path,
                      log_dir=str(run.dir / "tb" / "labels"),
                      trainer_status=self.trainer_stats.val_accuracy_text,
                      make_predictor=partial(predictor.preference_predictor, ch.reward_weights,
                                             tconfig),
                      agent_steps=self.agent_stats.timesteps)
        self.reward_fn = partial(predictor.predicted_reward, ch.reward_weights, tconfig)
        self.observers = ch.a2c_observers(run.settings.env_id,
                                          self.labelling_stats if self.labelling else None)
        self.pace = partial(PredictorPace, ch.reward_weights,
                            labels_per_member(s.min_predictor_labels_per_step,
                                              s.predictor_pace_unit, s.ensemble_size))
        if agent is not None:
            start_agent(sup, ch, agent, log_dir=str(run.dir / "tb"), stats=self.agent_stats,
                        make_reward_fn=self.reward_fn, make_observers=self.observers,
                        make_pace=self.pace)

    def status(self, steps: bool = True) -> str:
        """The status line; "" while one person labels (the counters are in the prompt); with
        several, who is on their page and how well they agree."""
        team = self.page is not None and self.page.labellers
        if (self.ch.answers is not None and self.labelling
                and self.sup.procs["labelling"].is_alive() and not team):
            return ""
        line = preference_status(self.agent_stats, self.labelling_stats, self.trainer_stats,
                                 steps)
        if team:
            line += f" | labelling now: {', '.join(self.page.present()) or 'nobody'}"
            line += "".join(f" | {s}" for s in self.page.status() if s.startswith("agreement"))
        return line
