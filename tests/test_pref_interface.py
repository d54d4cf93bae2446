"""From the agent's rollouts to stored labels: clips, pairs, query selection (§2.2.4), the label
schedule (App. A) and the labelling process."""
from __future__ import annotations

import faulthandler
import multiprocessing as mp
import os
import queue
import signal
import sys
import threading
import time

import numpy as np
import pytest
import torch

from clips.clip import Clip, Preference
from clips.cutter import ClipCutter, EveryEnvCutter
from clips.sender import QueueSender
from launch.loop import Channels, run_labelling
from pref_interface.config import LabellingConfig
from pref_interface.labellers.teachers import Labeller, OracleTeacher
from pref_interface.labelling import LabellingStats, increment
from pref_interface.process import CLIP_QUEUE_MAXSIZE
from pref_interface.queries.modes import QUERY_MODES, QueryMode, make_query_mode
from pref_interface.queries.pairs import OVERSAMPLE, ClipBuffer, select_pairs
from pref_interface.queries.schedule import LabelSchedule
from pref_interface.queries.selection import disagreement_score, make_pair_scorer
from pref_interface.store import PreferenceStore
from reward_predictor import MovingDotRewardNet, RewardPredictorEnsemble
from tests.helpers import NonBlockingOnly, reward_clip, wait_until


def tiny_clip(value: int, reward: float = 0.0, steps: int = 1) -> Clip:
    return Clip.pack(np.full((steps + 3, 84, 84), value % 256, np.uint8), np.zeros(steps, np.int64),
                   np.full(steps, reward, np.float32))


# ---- cutting rollouts into clips ---------------------------------------------------------------

class FakeVecEnv:
    """N envs whose every frame is distinct noise; episodes of random length. Each action is
    tagged with (step, env) so a clip can be traced back to the observations the agent saw."""

    def __init__(self, n_envs: int, n_steps: int, episode_len: tuple[int, int], seed: int = 0):
        rng = np.random.default_rng(seed)
        self.n_envs, self.n_steps = n_envs, n_steps
        self.obs = np.empty((n_steps + 1, n_envs, 4, 84, 84), np.uint8)
        self.episode = np.empty((n_steps + 1, n_envs), np.int64)  # episode number of each obs
        self.dones = np.zeros((n_steps, n_envs), bool)
        for i in range(n_envs):
            stack, episode, left = None, 0, 0
            for t in range(n_steps + 1):
                frame = rng.integers(0, 256, (84, 84), dtype=np.uint8)
                if left == 0:  # a new episode: the first frame repeated
                    stack, left = np.stack([frame] * 4), int(rng.integers(*episode_len))
                    if t > 0:
                        self.dones[t - 1, i], episode = True, episode + 1
                else:
                    stack = np.concatenate([stack[1:], frame[None]])
                self.obs[t, i], self.episode[t, i] = stack, episode
                left -= 1
        self.actions = np.arange(n_steps)[:, None] * n_envs + np.arange(n_envs)[None, :]
        self.rewards = rng.normal(size=(n_steps, n_envs)).astype(np.float32)

    def rollouts(self, lengths):
        """Chop the stream into rollouts of the given lengths: (obs, actions, rewards, dones)."""
        t = 0
        for T in lengths:
            if t + T > self.n_steps:
                return
            yield self.obs[t:t + T + 1], self.actions[t:t + T], self.rewards[t:t + T], self.dones[t:t + T]
            t += T


def cut(env: FakeVecEnv, lengths, clip_length: int = 25) -> tuple[list[Clip], ClipCutter]:
    cutter = ClipCutter(env.n_envs, clip_length)
    clips = []
    for rollout in env.rollouts(lengths):
        clips += cutter.observe(*rollout)
    return clips, cutter


def test_cutter_clips_are_exactly_what_the_agent_saw_from_every_env():
    env = FakeVecEnv(n_envs=4, n_steps=600, episode_len=(20, 90))
    clips, cutter = cut(env, [5] * 200)
    assert len(clips) == cutter.n_emitted > 10 and cutter.n_discarded == 0
    envs_used, last_end, crossing = [], -1, 0
    for clip in clips:
        steps, envs = clip.actions // env.n_envs, clip.actions % env.n_envs
        i, start = int(envs[0]), int(steps[0])
        assert len(clip) == 25 and (envs == i).all() and (steps == start + np.arange(25)).all()
        assert np.array_equal(clip.true_rewards, env.rewards[steps, i])
        assert np.array_equal(clip.dones, env.dones[steps, i])  # episode ends are marked
        # The frames rebuild every stack the agent saw, but the 3 after an episode end, whose
        # older frames come from the episode before.
        stale = np.zeros(25, bool)
        for k in np.flatnonzero(clip.dones[:-1]):
            stale[k + 1:k + 4] = True
        assert np.array_equal(clip.stacks()[~stale], env.obs[steps[~stale], i])
        assert np.array_equal(clip.stacks()[:, -1], env.obs[steps, i, -1])  # newest frames all right
        crossing += int(clip.dones[:-1].any())
        assert start > last_end  # one clip at a time
        last_end = int(steps[-1])
        envs_used.append(i)
    assert set(envs_used) == set(range(env.n_envs))
    assert crossing > 0  # clips that span an episode end are kept (App. A: they get a penalty)

    long_episodes = FakeVecEnv(n_envs=3, n_steps=300, episode_len=(1000, 1001))
    clips, _ = cut(long_episodes, [5] * 60)
    assert [int(s.actions[0] % 3) for s in clips] == [0, 1, 2] * 4  # env i, then i + 1, ...


def test_cutter_does_not_assume_the_rollout_length():
    env = FakeVecEnv(n_envs=3, n_steps=400, episode_len=(30, 80), seed=1)
    by_fives, _ = cut(env, [5] * 80)
    uneven, _ = cut(env, list(np.random.default_rng(0).integers(1, 9, size=400)))
    one_rollout, _ = cut(env, [400])
    n = min(len(by_fives), len(uneven), len(one_rollout))
    assert n > 5
    for a, b, c in zip(by_fives[:n], uneven[:n], one_rollout[:n]):
        assert np.array_equal(a.actions, b.actions) and np.array_equal(a.actions, c.actions)
        assert np.array_equal(a.frames(), b.frames()) and np.array_equal(a.frames(), c.frames())


def test_the_every_env_cutter_cuts_each_env_whole_and_staggered():
    """Gathering's cutter: every env's stream is cut into consecutive clips, exactly as the
    one-env cutter cuts it, and the envs' clips do not all end in one step."""
    env = FakeVecEnv(n_envs=4, n_steps=300, episode_len=(20, 90), seed=2)
    cutter, clips = EveryEnvCutter(env.n_envs), []
    for rollout in env.rollouts(list(np.random.default_rng(1).integers(1, 9, size=300))):
        clips += cutter.observe(*rollout)
    assert len(clips) == cutter.n_emitted and cutter.n_discarded == 0
    for i in range(env.n_envs):
        own = [c for c in clips if int(c.actions[0] % env.n_envs) == i]
        late, one = i * 25 // env.n_envs, slice(i, i + 1)  # env i starts its first clip late
        alone = ClipCutter(1).observe(env.obs[late:, one], env.actions[late:, one],
                                      env.rewards[late:, one], env.dones[late:, one])
        # A clip per 25 steps from every env (the rollouts leave out the stream's last steps).
        assert len(alone) - 1 <= len(own) <= len(alone) and len(own) >= 10
        for a, b in zip(own, alone):
            assert np.array_equal(a.actions, b.actions)
            assert np.array_equal(a.frames(), b.frames())
    ends = {int(c.actions[-1] // env.n_envs) for c in clips}
    assert len(ends) == len(clips)  # no two clips end at the same step


def test_cutter_keeps_a_clip_that_ends_with_its_episode():
    env = FakeVecEnv(n_envs=1, n_steps=250, episode_len=(25, 26))  # every episode exactly 25 steps
    clips, cutter = cut(env, [5] * 50)
    assert cutter.n_discarded == 0 and len(clips) == 10


def test_cutter_discards_a_clip_whose_stacks_stop_overlapping():
    """An env that resets without saying so (e.g. gymnasium's next-step autoreset) must not
    produce a clip that jumps between episodes."""
    env = FakeVecEnv(n_envs=1, n_steps=100, episode_len=(30, 31))
    env.dones[:] = False  # hide the resets
    with pytest.warns(RuntimeWarning, match="do not share frames"):
        clips, cutter = cut(env, [5] * 20)
    assert cutter.n_discarded >= 2
    for clip in clips:
        assert len(set(env.episode[clip.actions, 0])) == 1


# ---- choosing pairs ----------------------------------------------------------------------------

def test_pairs_are_never_offered_twice():
    rng = np.random.default_rng(0)
    buf = ClipBuffer(max_clips=6)
    for v in range(6):
        buf.add(tiny_clip(v))
    offered, lefts = [], set()
    while batch := buf.sample_new_pairs(4, rng):
        offered += [frozenset((a, b)) for a, _, b, _ in batch]
        lefts |= {a for a, _, _, _ in batch}
    assert len(offered) == len(set(offered)) == 15 and all(len(p) == 2 for p in offered)
    assert len(lefts) > 1  # which clip is shown left is random
    new_id = buf.add(tiny_clip(6))  # evicts clip 0 and forgets its pairs
    assert len(buf) == 6 and buf.n_unoffered_pairs == 5
    fresh = buf.sample_new_pairs(10, rng)
    assert len(fresh) == 5 and all(new_id in (a, b) and 0 not in (a, b) for a, _, b, _ in fresh)
    assert set().union(*buf._offered) == {tuple(sorted(p)) for p in offered if 0 not in p} | {
        (min(a, b), max(a, b)) for a, _, b, _ in fresh}


def test_pairs_stay_new_in_a_full_buffer():
    rng = np.random.default_rng(1)
    clip, buf = tiny_clip(0), ClipBuffer(max_clips=1000)
    for _ in range(1000):
        buf.add(clip)
    seen = set()
    for _ in range(300):
        for a, _, b, _ in buf.sample_new_pairs(10, rng):
            assert a != b and frozenset((a, b)) not in seen
            seen.add(frozenset((a, b)))
    assert len(seen) == 3000


@pytest.mark.parametrize("val_fraction", [0.0, 1 / np.e])
def test_a_clip_is_offered_in_at_most_max_pairs_per_clip_pairs(val_fraction):
    """Labels made faster than clips arrive wait for new clips instead of reusing the few there
    are."""
    rng = np.random.default_rng(3)
    buf = ClipBuffer(max_clips=1000, val_fraction=val_fraction, seed=4, max_pairs_per_clip=2)
    clip = tiny_clip(0)
    uses: dict[int, int] = {}
    n_offered = 0
    for n_clips in range(1, 301):
        buf.add(clip)
        for scored in (None, lambda cs: np.arange(len(cs), dtype=float)):
            for a, _, b, _ in buf.sample_new_pairs(16, rng, score=scored):
                assert buf.is_validation(a) == buf.is_validation(b)
                uses[a], uses[b] = uses.get(a, 0) + 1, uses.get(b, 0) + 1
                n_offered += 1
        assert max(uses.values(), default=0) <= 2 and n_offered <= n_clips
    assert n_offered >= 280  # the cap binds (about one pair per clip), it does not stall
    # Without a cap the same buffer gives 16 pairs at once from a handful of clips.
    free = ClipBuffer(max_clips=1000)
    for _ in range(8):
        free.add(clip)
    assert len(free.sample_new_pairs(16, rng)) == 16


def test_a_pair_answered_after_its_clips_left_the_buffer_keeps_their_split():
    """A person away, or a team's slow tab, answers a pair whose clips the buffer has since
    evicted: the label still gets the split its clips had when they arrived."""
    rng = np.random.default_rng(0)
    buf = ClipBuffer(max_clips=4, val_fraction=0.5, seed=7)
    clip = tiny_clip(0)
    for _ in range(4):
        buf.add(clip)
    arrived = {i: buf.is_validation(i) for i in range(4)}
    assert set(arrived.values()) == {False, True}  # both splits, so a wrong answer can show
    offered = buf.sample_new_pairs(2, rng)
    for _ in range(8):  # every clip of the pairs is evicted
        buf.add(clip)
    assert len(buf) == 4 and offered
    for a, _, b, _ in offered:
        assert buf.is_validation(a) == buf.is_validation(b) == arrived[a]
    # The same seed gives the same splits; another seed others.
    again = ClipBuffer(max_clips=4, val_fraction=0.5, seed=7)
    other = ClipBuffer(max_clips=4, val_fraction=0.5, seed=8)
    assert [again.is_validation(i) for i in range(64)] == [buf.is_validation(i) for i in range(64)]
    assert [other.is_validation(i) for i in range(64)] != [buf.is_validation(i) for i in range(64)]


def test_select_pairs_queries_where_the_score_is_highest():
    """§2.2.4: of the candidate pairs, ask about those the predictors disagree on most."""
    rng = np.random.default_rng(2)
    clip = tiny_clip(0)
    candidates = [(a, clip, a + 100, clip) for a in range(30)]
    chosen = select_pairs(candidates, 3, rng, score=lambda cs: np.array([a % 7 for a, *_ in cs]))
    assert [a for a, *_ in chosen] == [6, 13, 20]
    assert len(select_pairs(candidates, 50, rng)) == 30 and select_pairs([], 3, rng) == []

    buf = ClipBuffer(max_clips=50)
    for v in range(50):
        buf.add(clip)
    seen_sizes = []
    picked = buf.sample_new_pairs(2, rng, score=lambda cs: seen_sizes.append(len(cs)) or np.zeros(len(cs)))
    assert seen_sizes == [20] and len(picked) == 2  # 10x more candidates than queries


# ---- teachers ----------------------------------------------------------------------------------

def test_oracle_prefers_the_clip_with_more_true_reward():
    oracle = OracleTeacher()
    assert isinstance(oracle, Labeller) and oracle.source == "synthetic"
    good, bad = tiny_clip(0, reward=1.0, steps=3), tiny_clip(0, reward=-1.0, steps=3)
    assert oracle.label(good, bad) == 1.0
    assert oracle.label(bad, good) == 0.0
    assert oracle.label(good, tiny_clip(9, reward=1.0, steps=3)) == 0.5


# ---- the process -------------------------------------------------------------------------------

def test_sender_never_blocks_on_a_full_queue():
    ctx = mp.get_context("spawn")
    clip_queue, dropped = ctx.Queue(maxsize=2), ctx.Value("i", 0)
    sender = QueueSender(NonBlockingOnly(clip_queue), dropped)
    sent = [sender.send(tiny_clip(v)) for v in range(6)]
    assert sent == [True, True, False, False, False, False]
    assert (sender.sent, sender.dropped, dropped.value) == (2, 4, 4)
    assert clip_queue.get(timeout=5).frames()[0, 0, 0] == 0


def send_and_exit(q, sent) -> None:
    """An A2C that sends one item far larger than a pipe holds and exits while the reader has
    not yet taken it: the feeder thread is blocked part-way through writing it."""
    sender = QueueSender(q)
    sender.send(np.arange(4_000_000, dtype=np.int64))
    time.sleep(0.5)  # pickled, and the first 64 KB written
    sent.set()
    sender.close(timeout_s=60)  # the whole item through the pipe however loaded the machine


def test_closing_the_sender_lets_a_late_reader_get_the_whole_item():
    """Labelling drains clip_queue between labels, so it may start on a clip only after A2C
    has begun to exit. Without `close` the sender dies half-way through the write and the reader
    waits forever for the rest (checked by making `close` return at once: the reader hangs)."""
    ctx = mp.get_context("spawn")
    q, sent = ctx.Queue(maxsize=4), ctx.Event()
    sender = ctx.Process(target=send_and_exit, args=(q, sent))
    sender.start()
    assert sent.wait(60)
    time.sleep(1.0)  # busy labelling while A2C exits
    got: list = []
    reader = threading.Thread(target=lambda: got.append(q.get(timeout=10)), daemon=True)
    reader.start()
    reader.join(20)
    sender.join(20)
    assert not reader.is_alive(), "the reader is stuck on half an item"
    assert got and np.array_equal(got[0], np.arange(4_000_000))
    assert sender.exitcode == 0


def slow_consumer(pref_queue, stats: LabellingStats, n: int, max_in_flight: int) -> list[Preference]:
    """A trainer that takes a label every 20 ms."""
    received = []
    for _ in range(n):
        received.append(pref_queue.get(timeout=30))
        assert stats.labels_in_flight <= max_in_flight
        time.sleep(0.02)
        increment(stats.labels_received)
    return received


def test_no_preference_is_dropped_when_the_trainer_is_slow(tmp_path):
    ctx = mp.get_context("spawn")
    clip_queue, pref_queue = ctx.Queue(CLIP_QUEUE_MAXSIZE), ctx.Queue()
    stop_event, stats = ctx.Event(), LabellingStats.create(ctx)
    # 12 clips all kept: at least 30 pairs within the splits, however the clips fall in them
    config = LabellingConfig(max_clips=12, max_in_flight=3, stop_after_labels=25, seed=0,
                             synthetic=True, max_pairs_per_clip=None)
    store_path = str(tmp_path / "prefs.sqlite")
    proc = ctx.Process(target=run_labelling, args=(config, Channels(stop_event, clip_queue, pref_queue)),
                       kwargs=dict(stats=stats, store_path=store_path))
    proc.start()
    try:
        feeder = threading.Thread(target=lambda: [clip_queue.put(tiny_clip(v, reward=v % 3), timeout=30)
                                                  for v in range(12)])
        feeder.start()
        received = slow_consumer(pref_queue, stats, 25, config.max_in_flight)
        feeder.join()
        proc.join(timeout=30)
        assert proc.exitcode == 0
    finally:
        if proc.is_alive():
            proc.kill()
    assert stats.labels_total.value == 25 and stats.clips_received.value == 12
    with PreferenceStore(store_path, create=False) as store:
        stored = [store.get(i) for i in store.all_ids()]
    assert len(stored) == 25
    for got, want in zip(received, stored):  # every label, in order; the clips travel packed
        assert got.left.expanded is None and got.left.frames_z == want.left.frames_z
        assert np.array_equal(got.left.frames(), want.left.frames())
        assert np.array_equal(got.right.frames(), want.right.frames())
        assert (got.mu, got.is_validation, got.source) == (want.mu, want.is_validation, "synthetic")
        assert got.mu == OracleTeacher().label(got.left, got.right)


def test_gathering_initial_labels_stops_at_the_requested_number(tmp_path):
    ctx = mp.get_context("spawn")
    clip_queue, stop_event, stats = queue.Queue(), threading.Event(), LabellingStats.create(ctx)
    for v in range(20):  # about 1/e of the clips (and so of the labels) are validation
        clip_queue.put(tiny_clip(v, reward=v % 2))
    config = LabellingConfig(max_clips=20, stop_after_labels=12, seed=0,
                             synthetic=True, max_pairs_per_clip=None)
    path = str(tmp_path / "prefs.sqlite")
    channels = Channels(stop_event, clip_queue)  # no trainer reads labels
    run_labelling(config, channels, stats=stats, store_path=path)
    with PreferenceStore(path) as store:
        assert len(store) == 12 and stats.labels_total.value == 12
        validation = [p.is_validation for p in store.latest(12)]
        assert 0 < sum(validation) < 12
    run_labelling(config, channels, stats=stats, store_path=path)  # resuming: already done
    assert stats.labels_total.value == 12 and not stop_event.is_set()


def test_incomparable_pairs_are_not_stored_and_stop_event_ends_the_loop(tmp_path):
    class Undecided(Labeller):
        source = "human"

        def __init__(self):
            self.asked = 0

        def label(self, left, right):
            self.asked += 1
            return None if self.asked % 2 else 0.5

    clip_queue, stop_event = queue.Queue(), threading.Event()
    stats = LabellingStats.create(mp.get_context("spawn"))
    for v in range(4):
        clip_queue.put(tiny_clip(v))
    labeller, path = Undecided(), str(tmp_path / "prefs.sqlite")
    worker = threading.Thread(target=run_labelling, args=(
        LabellingConfig(seed=0, val_fraction=0.0, synthetic=True, max_pairs_per_clip=None),
        Channels(stop_event, clip_queue)),
        kwargs=dict(stats=stats, store_path=path, labeller=labeller))
    worker.start()
    wait_until(lambda: labeller.asked >= 6 and stats.labels_total.value >= 3, 60,
               "6 pairs asked and 3 labels stored", poll_s=0.01)
    stop_event.set()
    worker.join(timeout=30)
    assert not worker.is_alive()
    assert labeller.asked == 6  # all 6 pairs of 4 clips, each asked once
    with PreferenceStore(path) as store:
        assert len(store) == 3 == stats.labels_total.value
        assert all(p.source == "human" and p.mu == 0.5 for p in store.latest(3))


def test_the_interface_process_labels_and_logs_without_importing_torch(tmp_path):
    """With random selection nothing in labelling needs torch (and its memory)."""
    import subprocess
    import sys

    script = f"""
import multiprocessing as mp, queue, sys, threading
from pref_interface.labelling import LabellingStats
from pref_interface.config import LabellingConfig
from launch.loop import Channels, run_labelling
run_labelling(LabellingConfig(synthetic=True, stop_after_labels=0),
              Channels(threading.Event(), queue.Queue(), queue.Queue()),
              stats=LabellingStats.create(mp.get_context("spawn")),
              store_path={str(tmp_path / "p.sqlite")!r}, log_dir={str(tmp_path / "tb")!r})
print("torch" in sys.modules)
"""
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"
    assert any(p.name.startswith("events.out.tfevents") for p in (tmp_path / "tb").iterdir())


def test_human_labelling_is_refused_without_a_terminal_to_read_answers_from(tmp_path):
    with pytest.raises(ValueError, match="answers queue"):
        run_labelling(LabellingConfig(synthetic=False), Channels(threading.Event(), queue.Queue()),
                      stats=LabellingStats.create(mp.get_context("spawn")),
                      store_path=str(tmp_path / "p.sqlite"))


def _interface_that_shows_its_stacks(config: LabellingConfig, channels: Channels, **parts) -> None:
    """The labelling process, printing every thread's stack to stderr on SIGUSR1 (so that a
    test that finds it stuck can show where). Ctrl-C raises KeyboardInterrupt in it even when
    pytest was started with SIGINT ignored (as `cmd &` in a script does): a spawned child
    inherits that."""
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    run_labelling(config, channels, **parts)


@pytest.mark.parametrize("how", ["stop_event", "ctrl_c"])
def test_interface_exits_promptly_even_when_the_trainer_stopped_reading(tmp_path, how):
    ctx = mp.get_context("spawn")
    clip_queue, pref_queue = ctx.Queue(CLIP_QUEUE_MAXSIZE), ctx.Queue()
    stop_event, stats = ctx.Event(), LabellingStats.create(ctx)
    store_path = str(tmp_path / "prefs.sqlite")
    proc = ctx.Process(target=_interface_that_shows_its_stacks, args=(
        # one split: the 28 pairs of 8 clips, enough for the 16 labels awaited below
        LabellingConfig(max_in_flight=16, seed=0, val_fraction=0.0, synthetic=True,
                        max_pairs_per_clip=None),
        Channels(stop_event, clip_queue, pref_queue)),
        kwargs=dict(stats=stats, store_path=store_path))
    proc.start()
    try:
        for v in range(8):
            clip_queue.put(tiny_clip(v), timeout=30)
        wait_until(lambda: stats.labels_total.value >= 16, 30, "16 labels", poll_s=0.02)
        assert stats.labels_total.value == 16  # a full, unread queue
        if how == "stop_event":
            stop_event.set()
        else:
            os.kill(proc.pid, signal.SIGINT)
        proc.join(timeout=5)
        if proc.is_alive():  # stuck: its signal state and stacks go to this test's stderr
            with open(f"/proc/{proc.pid}/status") as status:  # pending, blocked, ignored, caught
                print(*(line for line in status if line.startswith(("Sig", "ShdPnd"))),
                      sep="", file=sys.stderr)
            os.kill(proc.pid, signal.SIGUSR1)
            time.sleep(1)  # time for it to print them before the test fails
        assert proc.exitcode == 0
    finally:
        if proc.is_alive():
            proc.kill()
    with PreferenceStore(store_path, create=False) as store:
        assert len(store) == 16


def test_validation_labels_never_share_a_clip_with_training_labels():
    """The split is per clip, pairs stay within a split, and about 1/e of the labels validate."""
    rng = np.random.default_rng(4)
    buf = ClipBuffer(max_clips=60, val_fraction=1 / np.e, seed=5)
    used = {False: set(), True: set()}
    n_labels = n_val = 0
    for step in range(600):
        buf.add(tiny_clip(step))
        for a, _, b, _ in buf.sample_new_pairs(2, rng):  # labels come faster than clips
            split = buf.is_validation(a)
            assert buf.is_validation(b) == split
            used[split] |= {a, b}
            n_labels += 1
            n_val += split
    assert not used[False] & used[True]
    clip_share = len(used[True]) / (len(used[True]) + len(used[False]))
    assert n_labels > 1100 and 0.25 < clip_share < 0.5, (n_labels, clip_share)
    assert abs(n_val / n_labels - 1 / np.e) < 0.02, n_val / n_labels  # App. A: 1/e held out


# ---- query selection (§2.2.4, App. A) ----------------------------------------------------------

def fake_predictor(calls: list | None = None):
    """Three 'members' whose predictions for a pair spread by a known amount: the pair (a, b) of
    clips tagged a and b (in true_rewards[0]) gets P = 0.5 + d * (-1, 0, 1), d = ((7a + 13b) % 41)
    / 100, so its variance across members is 2 d^2 / 3."""
    def predict(left, right):
        a = np.array([s.true_rewards[0] for s in left])
        b = np.array([s.true_rewards[0] for s in right])
        if calls is not None:
            calls.append(len(left))
        d = ((7 * a + 13 * b) % 41) / 100
        return 0.5 + d[None, :] * np.array([-1.0, 0.0, 1.0])[:, None]
    return predict


def known_variance(a: float, b: float) -> float:
    return 2 * (((7 * a + 13 * b) % 41) / 100) ** 2 / 3


def test_selection_picks_the_highest_variance_pairs():
    rng = np.random.default_rng(0)
    clips = [reward_clip([float(i)]) for i in range(40)]
    candidates = [(i, clips[i], j, clips[j]) for i, j in rng.integers(40, size=(60, 2)) if i != j]
    score = disagreement_score(fake_predictor())
    assert np.allclose(score(candidates), [known_variance(i, j) for i, _, j, _ in candidates])
    chosen = select_pairs(candidates, 5, rng, score)
    variances = sorted((known_variance(i, j) for i, _, j, _ in candidates), reverse=True)
    assert sorted((known_variance(i, j) for i, _, j, _ in chosen), reverse=True) == variances[:5]


def test_buffer_offers_the_most_disagreed_of_ten_times_more_candidates():
    buf = ClipBuffer(max_clips=100)
    for i in range(100):
        buf.add(reward_clip([float(i)]))
    calls: list[int] = []
    seen: list = []
    predict = fake_predictor(calls)
    score = disagreement_score(predict)

    def spy(cands):
        seen.extend(cands)
        return score(cands)

    chosen = buf.sample_new_pairs(3, np.random.default_rng(1), score=spy)
    assert calls == [3 * OVERSAMPLE] and len(seen) == 3 * OVERSAMPLE  # App. A: 10x the queries
    top = sorted((known_variance(a, b) for a, _, b, _ in seen), reverse=True)[:3]
    assert sorted((known_variance(a, b) for a, _, b, _ in chosen), reverse=True) == top
    assert len(buf.sample_new_pairs(2, np.random.default_rng(1), score=spy, oversampling=1)) == 2
    assert calls[-1] == 2


def test_random_selection_does_not_depend_on_the_predictor():
    def boom(left, right):
        raise AssertionError("random selection must not ask the predictor")

    assert make_pair_scorer("random", boom) is None and make_pair_scorer("random") is None
    picks = []
    for _ in range(2):
        buf = ClipBuffer(max_clips=50)
        for i in range(50):
            buf.add(reward_clip([float(i)]))
        picks.append([(a, b) for a, _, b, _ in buf.sample_new_pairs(5, np.random.default_rng(3),
                                                                    make_pair_scorer("random"))])
    assert picks[0] == picks[1]
    assert make_pair_scorer("disagreement", fake_predictor()) is not None
    with pytest.raises(ValueError, match="random, disagreement, entropy, k_center"):
        make_pair_scorer("coverage", fake_predictor())
    with pytest.raises(ValueError):
        make_pair_scorer("disagreement")


def test_entropy_selection_asks_about_the_pairs_whose_mean_preference_is_nearest_a_coin_toss():
    """B-Pref's entropy sampler: the members' mean P[left > right] closest to 0.5 scores highest,
    whatever the members' spread (where disagreement would pick the split pair)."""
    table = {0: [0.5, 0.5, 0.5],   # sure it is a coin toss: highest entropy, no disagreement
             1: [0.1, 0.9, 0.5],   # split members, mean 0.5: as high
             2: [0.95, 0.9, 1.0],  # sure of the left clip: low
             3: [0.2, 0.3, 0.25]}  # leaning right: between

    def predict(left, right):
        return np.array([table[int(c.true_rewards[0])] for c in left]).T

    candidates = [(k, reward_clip([float(k)]), 9, reward_clip([9.0])) for k in table]
    scores = make_pair_scorer("entropy", predict)(candidates)
    assert scores[0] == pytest.approx(np.log(2)) and scores[1] == pytest.approx(np.log(2))
    assert scores[2] < scores[3] < scores[0]
    chosen = select_pairs(candidates, 2, np.random.default_rng(0), make_pair_scorer("entropy",
                                                                                    predict))
    assert sorted(c[0] for c in chosen) == [0, 1]
    assert make_pair_scorer("entropy", predict)([]).shape == (0,)


def flat_clip(level: int) -> Clip:
    """A 2-step clip whose every pixel is `level`."""
    return Clip.pack(np.full((5, 84, 84), level, np.uint8), np.zeros(2, np.int64),
                     np.zeros(2, np.float32))


def test_k_center_asks_first_about_the_pairs_least_like_those_shown():
    """B-Pref's k-center: farthest-first from the pairs shown, and from each other."""
    score = make_pair_scorer("k_center", None)
    clips = {v: flat_clip(v) for v in (0, 10, 100, 200, 205, 210, 215)}
    rng = np.random.default_rng(0)
    shown = select_pairs([(0, clips[0], 10, clips[10])], 1, rng, score)
    assert len(shown) == 1 and score.n_shown == 1  # told what was shown
    a, b, c = ((200, clips[200], 210, clips[210]), (205, clips[205], 215, clips[215]),
               (100, clips[100], 100, clips[100]))
    # b is farthest from the shown (0, 10); then c, as a lies next to b though far from (0, 10)
    assert list(np.argsort(-score([a, b, c]))) == [1, 2, 0]
    chosen = select_pairs([a, b, c], 2, rng, score)
    assert [x[0] for x in chosen] == [205, 100] and score.n_shown == 3
    assert score([]).shape == (0,)
    buf = ClipBuffer(max_clips=20, val_fraction=0)
    for v in range(20):
        buf.add(flat_clip(12 * v))
    assert len(buf.sample_new_pairs(3, rng, score=score)) == 3 and score.n_shown == 6


def test_disagreement_is_the_variance_of_the_ensembles_predicted_preferences():
    torch.manual_seed(0)
    ens = RewardPredictorEnsemble(MovingDotRewardNet, ensemble_size=3)
    rng = np.random.default_rng(0)
    clips = [Clip.pack(rng.integers(0, 256, (5, 84, 84), dtype=np.uint8), rng.integers(0, 5, 2),
                    np.zeros(2, np.float32)) for _ in range(8)]
    candidates = [(i, clips[i], i + 4, clips[i + 4]) for i in range(4)]
    p = ens.predict_preference(clips[:4], clips[4:])
    assert p.shape == (3, 4)
    assert np.allclose(disagreement_score(ens.predict_preference)(candidates), p.var(0), atol=1e-7)


# ---- label schedule (App. A) -------------------------------------------------------------------

def test_schedule_rate_halves_after_5e6_frames():
    s = LabelSchedule("annealed", max_labels=3000, total_frames=40_000_000, n_initial=500)
    r0 = s.rate(0)
    assert r0 > 0
    assert s.rate(4_999_999) == r0  # constant within a block of 5e6 frames
    assert s.rate(5_000_000) == pytest.approx(r0 / 2)  # 5e6 / (5e6 + 5e6)
    assert s.rate(9_999_999) == pytest.approx(r0 / 2)
    assert s.rate(10_000_000) == pytest.approx(r0 / 3)  # 5e6 / (1e7 + 5e6)
    assert s.rate(35_000_000) == pytest.approx(r0 / 8)
    # Labels made in the first block are twice those of the second.
    first = s.labels_due(5_000_000) - s.labels_due(0)
    second = s.labels_due(10_000_000) - s.labels_due(5_000_000)
    assert first == pytest.approx(2 * second, abs=1)


def test_schedule_spends_the_budget_and_never_exceeds_it():
    for kind in ("annealed", "constant"):
        s = LabelSchedule(kind, max_labels=3000, total_frames=50_000_000, n_initial=500)
        frames = np.linspace(0, 60_000_000, 2001)
        due = [s.labels_due(t) for t in frames]
        assert due[0] == 500 and all(isinstance(d, int) for d in due)
        assert all(b >= a for a, b in zip(due, due[1:]))  # monotone
        assert max(due) == 3000 and s.labels_due(50_000_000) == 3000
        assert s.labels_due(49_000_000) < 3000
    const = LabelSchedule("constant", 3000, 50_000_000, 500)
    assert const.labels_due(25_000_000) == 1750  # linear in T
    annealed = LabelSchedule("annealed", 3000, 50_000_000, 500)
    assert annealed.labels_due(25_000_000) > const.labels_due(25_000_000)  # front-loaded
    for bad in (dict(kind="hyperbolic"), dict(n_initial=4000), dict(total_frames=0)):
        with pytest.raises(ValueError):
            LabelSchedule(**{"kind": "annealed", "max_labels": 3000, "total_frames": 1000, **bad})


# ---- episode ends in the clips the cutter makes ------------------------------------------

def test_cutter_marks_a_clip_that_ends_with_its_episode():
    frames = [np.full((84, 84), v, np.uint8) for v in range(20)]
    # One env: an episode whose last step is step 2, then a new one (first frame repeated).
    stacks = [np.stack(frames[t:t + 4]) for t in range(3)] + [np.stack([frames[10]] * 4)]
    for t in range(3):
        stacks.append(np.concatenate([stacks[-1][1:], frames[11 + t][None]]))
    obs = np.stack(stacks)[:, None]  # (7, 1, 4, 84, 84)
    dones = np.zeros((6, 1), bool)
    dones[2, 0] = True
    clips = ClipCutter(1, clip_length=3).observe(obs, np.zeros((6, 1), np.int64),
                                                      np.zeros((6, 1), np.float32), dones)
    assert len(clips) == 2
    assert clips[0].dones.tolist() == [False, False, True] and clips[1].dones.tolist() == [False] * 3


@pytest.mark.parametrize("name", QUERY_MODES)
@pytest.mark.parametrize("person", [False, True])
def test_every_query_mode_asks_through_the_same_steps(name, person):
    """Each --queries mode answers every step Labelling calls, and a drawn query goes through
    split, answered and scalars, its split the clip pool's."""
    buffer = ClipBuffer(8, val_fraction=0.0, seed=0)
    mode = make_query_mode(LabellingConfig(queries=name, max_clips=8, val_fraction=0.0), buffer,
                           [], np.random.default_rng(0), person, None, send=None)
    steps = [n for n in vars(QueryMode) if not n.startswith("_")] + list(
        QueryMode.__annotations__)
    assert all(callable(getattr(mode, n)) or getattr(mode, n) is None for n in steps)
    mode.show = lambda state: None
    for i in range(4):
        clip = reward_clip([float(i)] * 3, value=i)
        mode.offer(buffer.add(clip), clip)
    queries = []
    for _ in range(20):  # a person's first pair is held back a moment for the next one
        queries = mode.draw(2)
        if queries:
            break
        time.sleep(0.2)
    assert 1 <= len(queries) <= (1 if person else 2)
    left_id = queries[0][0]
    split = mode.split(left_id)
    assert split is False and split == buffer.is_validation(left_id)
    mode.answered(split, 1.0)
    assert all(np.isfinite(v) for v in mode.scalars().values())


def test_a_person_is_never_kept_waiting_on_the_trainer_a_teacher_is():
    """Labels not yet taken by the trainer hold back synthetic labelling (it would flood the
    trainer), never the one person labelling: the pair shown and the next one."""
    from types import SimpleNamespace

    from pref_interface.process import _labels_wanted

    config = LabellingConfig(max_in_flight=4)
    busy = SimpleNamespace(labels_in_flight=4)
    common = dict(schedule=None, n_stored=10, agent_steps=None, has_trainer=True)
    assert _labels_wanted(config, busy, human=True, **common) == 2
    assert _labels_wanted(config, busy, human=False, **common) == 0
    assert _labels_wanted(config, SimpleNamespace(labels_in_flight=1), human=False, **common) == 3
    assert _labels_wanted(config, busy, human=False, team_pairs=0, **common) == 0


def test_labelling_records_the_stored_labels_share_of_ties(tmp_path):
    """`labels/tie_share` in TensorBoard: near 1, r̂ has almost nothing to learn an order from
    (Enduro's random play ties nearly every pair); counted over the store, earlier labels too."""
    from dataclasses import replace

    from experiments.runlog import scalars
    from pref_interface.process import Labelling
    from tests.helpers import random_pref

    path = tmp_path / "prefs.sqlite"
    rng = np.random.default_rng(0)
    with PreferenceStore(path) as store:
        for mu in (0.5, 0.5, 0.5, 1.0):
            store.add(replace(random_pref(rng), mu=mu))
        assert store.tie_share() == 0.75
    labelling = Labelling(LabellingConfig(synthetic=True, seed=0, max_pairs_per_clip=None),
                          Channels(None, queue.Queue()),
                          stats=LabellingStats.create(mp.get_context("spawn")),
                          store_path=str(path), log_dir=str(tmp_path / "tb"))
    labelling.telemetry.last_dump = -1e9  # due now
    labelling.record()
    labelling.close()
    assert scalars(tmp_path / "tb", "labels/tie_share")[:, 2].tolist() == [0.75]
    with PreferenceStore(tmp_path / "empty.sqlite") as empty:
        assert empty.tie_share() is None
