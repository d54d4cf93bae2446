"""While nobody answers and pairs enough wait, the agent cuts no clips (and, gathering, waits)."""
from __future__ import annotations

import threading
import time

import numpy as np

from a2c.rollout import Rollout
from clips.observer import ClipObserver
from pref_interface import process
from pref_interface.process import ClipDemand
from tests.helpers import wait_until


def rollout(t0: int, steps: int = 25, n_envs: int = 1) -> Rollout:
    """`steps` steps of one env whose frame k shows the number t0 + k (consecutive stacks share
    three frames, as an env's do)."""
    frames = (np.arange(t0, t0 + steps + 4) % 256).astype(np.uint8)
    obs = np.stack([np.broadcast_to(frames[k:k + 4, None, None], (4, 84, 84))
                    for k in range(steps + 1)])[:, None].repeat(n_envs, axis=1)
    zeros = np.zeros((steps, n_envs))
    return Rollout(obs, zeros.astype(np.int64), zeros.astype(np.float32),
                   zeros.astype(np.float32), zeros.astype(bool))


class Sent:
    def __init__(self):
        self.items = []

    def put_nowait(self, item):
        self.items.append(item)


def test_no_clip_is_cut_while_clips_are_not_wanted_and_the_next_starts_afresh():
    wanted, sent = threading.Event(), Sent()
    observer = ClipObserver(1, sent, wanted=wanted)
    wanted.set()
    observer(rollout(0, steps=10))  # 10 steps of a 25-step clip
    wanted.clear()
    observer(rollout(10, steps=25))
    assert sent.items == []
    wanted.set()
    observer(rollout(100, steps=25))  # a clip of these 25 steps only, not the 10 before
    assert len(sent.items) == 1
    assert sent.items[0].frames()[0, 0, 0] == 100


def test_gathering_holds_the_agent_until_clips_are_wanted_or_the_run_stops():
    wanted, stop = threading.Event(), threading.Event()
    observer = ClipObserver(1, Sent(), wanted=wanted, hold=True, stop=stop)
    done = threading.Event()
    threading.Thread(target=lambda: (observer(rollout(0)), done.set()), daemon=True).start()
    time.sleep(0.3)
    assert not done.is_set()  # held
    wanted.set()
    wait_until(done.is_set, 5, "the agent let go once clips are wanted")
    wanted.clear()
    done.clear()
    threading.Thread(target=lambda: (observer(rollout(25)), done.set()), daemon=True).start()
    stop.set()
    wait_until(done.is_set, 5, "the agent let go at the stop")


def test_clips_are_wanted_until_nobody_answers_and_pairs_enough_wait(monkeypatch):
    monkeypatch.setattr(process, "IDLE_AFTER_S", 0.3)
    event = threading.Event()
    event.set()
    demand = ClipDemand(event)
    try:
        demand.pairs_waiting = process.PAIRS_AHEAD - 1  # too few pairs: cut on
        time.sleep(1.5)
        assert event.is_set()
        demand.pairs_waiting = process.PAIRS_AHEAD
        wait_until(lambda: not event.is_set(), 5, "no clips wanted once nobody answers")
        demand.answered()
        wait_until(event.is_set, 5, "clips wanted again at an answer")
        demand.pairs_waiting = 0  # few pairs, but one person is away from the pair shown
        demand.asking = True
        wait_until(lambda: not event.is_set(), 5, "no clips wanted while a person is away")
    finally:
        demand.close()
    assert event.is_set()  # labelling over: a held agent is let go


def _wait_on(flag, ready) -> None:
    ready.put(True)
    flag.wait(60)


def test_the_agent_killed_while_held_leaves_labelling_free_to_want_clips_again():
    """The agent (A2C, gathering) waits on `clips_wanted` while held; killed there, it must not
    leave labelling's next set() or clear() blocked, which would hold up the answer given then."""
    import multiprocessing as mp
    import os
    import signal
    from types import SimpleNamespace

    from launch.loop import Channels

    ctx = mp.get_context("spawn")
    ch = Channels.for_run(ctx, SimpleNamespace(answers=ctx.Queue(), show_episodes=False), None,
                          trainer=False)
    wanted = ch.clips_wanted
    wanted.clear()
    ready = ctx.Queue()
    agent = ctx.Process(target=_wait_on, args=(wanted, ready), daemon=True)
    agent.start()
    ready.get(timeout=60)
    time.sleep(0.5)  # waiting on the flag
    os.kill(agent.pid, signal.SIGKILL)
    agent.join(10)
    done = threading.Event()
    threading.Thread(target=lambda: (wanted.set(), wanted.clear(), wanted.set(), done.set()),
                     daemon=True).start()
    assert done.wait(5), "set()/clear() blocked by the agent killed while waiting"
    assert wanted.is_set()
