"""A2C: returns and loss on hand-computed cases, checkpoints, and learning MovingDot."""
import math
import time

import numpy as np
import pytest
import torch

from a2c.a2c import A2C, A2CConfig, a2c_loss, discounted_returns
from a2c.checkpoint import (CheckpointError, check_fits, load_policy, load_policy_weights, save_policy,
                            save_policy_weights)
from a2c.policies import make_policy
from a2c.rollout import sample_actions
from a2c.config import A2CRunConfig
from envs.moving_dot import MovingDotVecEnv
from launch.loop import run_agent


def test_discounted_returns_bootstrap_and_stop_at_episode_end():
    rewards = torch.tensor([[1.0, 0.0], [0.0, 1.0], [2.0, 0.0]])
    dones = torch.tensor([[False, False], [True, False], [False, False]])
    last_value = torch.tensor([10.0, -1.0])
    g = 0.5
    ret = discounted_returns(rewards, dones, last_value, g)
    # env 0: the episode ends on step 1, so step 0 and 1 see no bootstrap from step 2.
    assert ret[2, 0] == pytest.approx(2 + g * 10)
    assert ret[1, 0] == pytest.approx(0.0)
    assert ret[0, 0] == pytest.approx(1.0)
    # env 1: no end, plain n-step return with V(s_T).
    assert ret[0, 1] == pytest.approx(0 + g * (1 + g * (0 + g * -1)))


def test_a2c_loss_matches_hand_computation():
    logits = torch.log(torch.tensor([[0.25, 0.75], [0.5, 0.5]]))
    values = torch.tensor([1.0, 0.0])
    actions = torch.tensor([1, 0])
    returns = torch.tensor([3.0, -1.0])
    loss, stats = a2c_loss(logits, values, actions, returns, ent_coef=0.01, vf_coef=0.5)
    pg = -(math.log(0.75) * 2.0 + math.log(0.5) * -1.0) / 2
    vf = (2.0 ** 2 + 1.0 ** 2) / 2
    ent = (-(0.25 * math.log(0.25) + 0.75 * math.log(0.75)) + math.log(2)) / 2
    assert stats["policy_loss"] == pytest.approx(pg, rel=1e-5)
    assert stats["value_loss"] == pytest.approx(vf, rel=1e-5)
    assert stats["entropy"] == pytest.approx(ent, rel=1e-5)
    assert loss.item() == pytest.approx(pg + 0.5 * vf - 0.01 * ent, rel=1e-5)


def test_an_update_reports_the_gradient_norm_before_it_is_clipped():
    torch.manual_seed(0)
    policy = make_policy("moving_dot", 5)
    algo = A2C(policy, A2CConfig(max_grad_norm=1e-6))  # every gradient gets clipped
    obs = torch.randint(0, 256, (2, 3, 4, 84, 84), dtype=torch.uint8)
    logits, values = policy(obs.flatten(0, 1))
    logits, values = logits.view(2, 3, -1), values.view(2, 3)
    actions, rewards = torch.zeros(2, 3, dtype=torch.long), torch.full((2, 3), 100.0)
    stats = algo.update(logits, values, actions, rewards, torch.zeros(2, 3), torch.zeros(3), 0)
    grads = [p.grad for p in policy.parameters() if p.grad is not None]
    clipped = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    assert clipped.item() == pytest.approx(1e-6, rel=1e-3)
    assert stats["grad_norm"] > 1.0  # what the loss gave, not what the step used


def test_the_telemetry_keeps_the_largest_value_since_its_last_dump(tmp_path):
    from experiments.runlog import scalars
    from runtime.scalars import Telemetry

    t = Telemetry(tmp_path)
    for v in (0.5, 9.0, 2.0):
        t.record_max("losses/grad_norm_max", v)
    t.dump(10)
    t.record_max("losses/grad_norm_max", 1.0)
    t.dump(20)
    for v in (float("nan"), 3.0):  # a gradient that blew up to NaN is not hidden by the next
        t.record_max("losses/grad_norm_max", v)
    t.dump(30)
    t.close()
    points = scalars(tmp_path, "losses/grad_norm_max")[:, 2]
    assert points[:2].tolist() == [9.0, 1.0] and np.isnan(points[2])


def test_the_loop_side_records_the_blocks_and_measures_speed_over_pauses(tmp_path, monkeypatch):
    """A learner that stops stepping for seconds to learn (PPO's epochs) gets its real rate: the
    steps over the whole window the scalars are written over, its pause included, not the rate
    while it steps. The pace's wait, the episodes (each at its own block), r̂'s spread and the
    counters go along."""
    import multiprocessing as mp
    from types import SimpleNamespace

    import runtime.scalars
    from a2c.config import A2CStats
    from a2c.loop_side import LoopSide
    from a2c.rollout import Rollout
    from envs.vec_env import EpisodeRecord
    from experiments.runlog import scalars

    now = [0.0]
    monkeypatch.setattr(runtime.scalars, "time", SimpleNamespace(monotonic=lambda: now[0],
                                                                 time=time.time))

    class Pace:
        def wait(self, agent_steps: int, stop_event=None, timeout_s=None) -> float:
            now[0] += 0.01
            return 0.01

        def labels_per_step(self, agent_steps: int) -> float:
            return 0.25

    class Observer(list):
        closed = False

        def __call__(self, rollout):
            self.append(rollout.actions.size)

        def close(self):
            self.closed = True

    stats, seen = A2CStats(mp.get_context("spawn")), Observer()
    side = LoopSide(tmp_path / "tb", every_s=10.0, stats=stats, observers=[seen], pace=Pace(),
                    predicted=True)
    T, n = 5, 4
    rewards = np.tile(np.array([0.0, 1.0], np.float32), (T, n // 2))  # spread 0.5

    def block(steps: int, finished=()) -> int:
        side.wait(steps)
        now[0] += 0.02  # stepping: 1,000 agent steps a second
        rollout = Rollout(np.zeros((T + 1, n, 4, 84, 84), np.uint8), np.zeros((T, n), np.int64),
                          np.zeros((T, n), np.float32), rewards, np.zeros((T, n), bool),
                          list(finished))
        side.observe(rollout)
        side.record(rollout, steps + T * n)
        return steps + T * n

    steps = block(0, [EpisodeRecord(0, 21.0, 250, train_return=0.7)])
    for _ in range(99):
        steps = block(steps)
    assert stats.steps_per_sec.value == 0.0  # 3 s: nothing written yet
    now[0] += 7.0  # the learner's own update
    steps = block(steps)
    side.close(steps)
    assert steps == 2020 and seen == [20] * 101 and seen.closed
    sps = scalars(tmp_path / "tb", "charts/SPS")
    assert sps[:, 1:].tolist() == [[2020, pytest.approx(2020 / 10.03)]]  # not 1,000 a second
    assert stats.steps_per_sec.value == pytest.approx(2020 / 10.03)
    assert stats.timesteps.value == 2020 and stats.episodes.value == 1
    assert stats.recent_return.value == 21.0
    waiting = scalars(tmp_path / "tb", "charts/waiting_for_predictor")[:, 2]
    assert waiting.tolist() == [pytest.approx(1.01 / 10.03)]
    for tag, value in [("charts/predictor_labels_per_step", 0.25), ("charts/reward_std", 0.5),
                       ("charts/episodic_return", 21.0), ("charts/episodic_length", 250),
                       ("charts/predicted_return", 0.7)]:
        assert scalars(tmp_path / "tb", tag)[:, 2].tolist() == [pytest.approx(value)], tag
    # The episode is drawn where it ended, in the first block, not where its scalars were written.
    assert scalars(tmp_path / "tb", "charts/episodic_return")[:, 1].tolist() == [20]


def test_an_agent_the_pace_holds_still_writes_its_scalars(tmp_path, monkeypatch):
    """A silence in A2C's logs then means a stopped process (experiments.runlog), not a wait: a
    hold of 25 s writes a point (no steps, all waiting) every 10 s."""
    from types import SimpleNamespace

    import runtime.scalars
    from a2c.loop_side import HELD_POINT_S, LoopSide
    from experiments.runlog import scalars

    now = [0.0]
    monkeypatch.setattr(runtime.scalars, "time", SimpleNamespace(monotonic=lambda: now[0],
                                                                 time=time.time))

    class CatchesUpAt25s:
        def wait(self, agent_steps: int, stop_event=None, timeout_s=None) -> float:
            waited = max(0.0, min(timeout_s, 25.0 - now[0]))
            now[0] += waited
            return waited

        def labels_per_step(self, agent_steps: int) -> float:
            return 0.1

    side = LoopSide(tmp_path / "tb", every_s=1.0, pace=CatchesUpAt25s(), timesteps=800)
    side.wait(1600)
    assert now[0] == 25.0 and HELD_POINT_S == 10.0
    side.close(1600)
    # the 800 steps since the last point count over the first 10 s; none are taken after them
    assert scalars(tmp_path / "tb", "charts/SPS")[:, 1:].tolist() == [[1600, 80.0], [1600, 0.0]]
    waiting = scalars(tmp_path / "tb", "charts/waiting_for_predictor")[:, 2]
    assert waiting.tolist() == [pytest.approx(1.0), pytest.approx(1.0)]


def test_learning_rate_decays_linearly_to_zero():
    algo = A2C(make_policy("moving_dot", 5), A2CConfig(lr=1e-3, lr_zero_timesteps=1000))
    assert algo.learning_rate(0) == pytest.approx(1e-3)
    assert algo.learning_rate(500) == pytest.approx(5e-4)
    assert algo.learning_rate(2000) == 0.0


def test_learning_rate_warms_up_linearly_then_decays():
    algo = A2C(make_policy("moving_dot", 5),
               A2CConfig(lr=1e-3, lr_warmup_timesteps=100, lr_zero_timesteps=1000))
    assert algo.learning_rate(0) == 0.0
    assert algo.learning_rate(50) == pytest.approx(0.5 * 1e-3 * 0.95)
    assert algo.learning_rate(500) == pytest.approx(5e-4)  # warmed: the decay alone


def test_rmsprop_tf_follows_tensorflows_update_rule():
    """ms starts at 1 and eps sits inside the root (baselines' A2C); torch's RMSprop differs."""
    from a2c.optim import RMSpropTF

    w = torch.tensor([1.0, -2.0, 0.5], requires_grad=True)
    opt = RMSpropTF([w], lr=0.1, alpha=0.9, eps=1e-3)
    expected, ms = w.detach().numpy().astype(np.float64).copy(), np.ones(3)
    for g in ([0.5, -1.0, 0.0], [2.0, 0.1, -0.3], [0.01, 0.01, 0.01]):
        w.grad = torch.tensor(g)
        opt.step()
        ms = 0.9 * ms + 0.1 * np.square(g)
        expected -= 0.1 * np.array(g) / np.sqrt(ms + 1e-3)
        np.testing.assert_allclose(w.detach().numpy(), expected, rtol=1e-6)
    torch_w = torch.tensor([1.0, -2.0, 0.5], requires_grad=True)
    torch_w.grad = torch.tensor([0.5, -1.0, 0.0])
    torch.optim.RMSprop([torch_w], lr=0.1, alpha=0.9, eps=1e-3).step()
    assert abs(torch_w[0].item() - 1.0) > 0.3  # ~lr / sqrt(1 - alpha): the large first step
    with pytest.raises(ValueError):
        RMSpropTF([w], alpha=1.0)


def test_a2c_optimiser_states_load_across_the_two_rmsprops():
    """A run made with torch's RMSprop can be resumed with --optimizer rmsprop_tf and back."""
    from a2c.optim import load_state_keeping_settings

    policy = make_policy("moving_dot", 5)
    obs = torch.randint(0, 255, (4, 4, 84, 84), dtype=torch.uint8)
    for first, second in (("rmsprop_torch", "rmsprop_tf"), ("rmsprop_tf", "rmsprop_torch")):
        algo = A2C(policy, A2CConfig(optimizer=first))
        policy(obs)[1].sum().backward()
        algo.optimizer.step()
        other = A2C(policy, A2CConfig(optimizer=second))
        load_state_keeping_settings(other.optimizer, algo.optimizer.state_dict())
        saved = [s["square_avg"] for s in algo.optimizer.state.values()]
        assert len(other.optimizer.state) == len(saved) > 0  # the running mean carried over
        assert all(torch.equal(s["square_avg"], k)
                   for s, k in zip(other.optimizer.state.values(), saved))
        policy.zero_grad()
        policy(obs)[1].sum().backward()
        other.optimizer.step()
        assert all(torch.isfinite(p).all() for p in policy.parameters())


def test_policy_checkpoint_round_trip(tmp_path):
    policy = make_policy("atari", 6)
    algo = A2C(policy, A2CConfig())
    save_policy(tmp_path, policy, algo.optimizer, timesteps=800, updates=10,
                env_id="PongNoFrameskip-v4")
    state = load_policy(tmp_path)
    fresh = make_policy("atari", 6)
    fresh.load_state_dict(state["policy"])
    obs = torch.randint(0, 255, (2, 4, 84, 84), dtype=torch.uint8)
    assert torch.equal(fresh(obs)[0], policy(obs)[0])
    assert (state["timesteps"], state["updates"]) == (800, 10)
    # The weights alone, to share a trained agent: no optimiser state, the same policy.
    save_policy_weights(tmp_path / "shared.pt", load_policy_weights(tmp_path))
    weights = load_policy_weights(tmp_path / "shared.pt")
    assert weights["timesteps"] == 800 and weights["env_id"] == "PongNoFrameskip-v4"
    fresh.load_state_dict(weights["policy"])
    assert torch.equal(fresh(obs)[0], policy(obs)[0])
    assert set(torch.load(tmp_path / "shared.pt", weights_only=True)) == {
        "policy", "timesteps", "env_id"}
    check_fits("PongNoFrameskip-v4", weights, tmp_path / "shared.pt")
    with pytest.raises(CheckpointError, match="a policy for PongNoFrameskip-v4, not Space"):
        check_fits("SpaceInvadersNoFrameskip-v4", weights, tmp_path / "shared.pt")
    # a file written before files named their game: checked by the network's shape alone
    save_policy_weights(tmp_path / "unnamed.pt", {**weights, "env_id": None})
    unnamed = load_policy_weights(tmp_path / "unnamed.pt")
    assert unnamed["env_id"] is None
    check_fits("SpaceInvadersNoFrameskip-v4", unnamed, tmp_path / "unnamed.pt")
    with pytest.raises(CheckpointError):
        load_policy(tmp_path / "shared.pt")  # resuming training needs the optimiser's state


@pytest.mark.parametrize("keep, kept", [(2, [400, 500]), (0, [100, 200, 300, 400, 500])])
def test_a_run_keeps_its_newest_policy_checkpoints_or_all_of_them(keep, kept, tmp_path):
    policy = make_policy("moving_dot", 5)
    algo = A2C(policy, A2CConfig())
    for steps in (100, 200, 300, 400, 500):
        save_policy(tmp_path, policy, algo.optimizer, timesteps=steps, updates=1, keep=keep)
    assert [int(p.stem.split("-")[1]) for p in sorted(tmp_path.glob("policy-*.pt"))] == kept
    with pytest.raises(CheckpointError):
        load_policy_weights(tmp_path / "missing.pt")
    (tmp_path / "policy-999999999999.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError):
        load_policy(tmp_path)
    with pytest.raises(CheckpointError):
        load_policy(tmp_path / "missing")


def evaluate(policy, episodes_envs: int = 64, seed: int = 123) -> float:
    env = MovingDotVecEnv(episodes_envs, seed=seed)
    obs = env.reset()
    returns = []
    for _ in range(250):
        result = env.step(sample_actions(policy, obs))
        obs = result.obs
        returns += [e.true_return for e in result.finished]
    return float(np.mean(returns))


def scripted_return(episodes_envs: int = 64, seed: int = 123) -> float:
    env = MovingDotVecEnv(episodes_envs, seed=seed)
    env.reset()
    return float(np.mean([e.true_return for _ in range(250)
                          for e in env.step(env.scripted_actions()).finished]))


@pytest.mark.slow  # 70 s; the default suite's preference-learning test needs A2C to learn too
def test_a2c_on_original_rewards_approaches_the_scripted_policy_on_moving_dot(tmp_path):
    config = A2CRunConfig("MovingDotNoFrameskip-v0", total_timesteps=100_000,
                          a2c=A2CConfig(ent_coef=0.02), seed=0, ckpt_dir=str(tmp_path / "p"),
                          torch_threads=1)
    run_agent(config, log_dir=str(tmp_path / "tb"))
    policy = make_policy("moving_dot", 5)
    policy.load_state_dict(load_policy(tmp_path / "p")["policy"])
    learned, scripted = evaluate(policy), scripted_return()
    assert learned >= 0.8 * scripted, (learned, scripted)


def test_a_given_reward_function_replaces_the_env_reward_and_is_summed_per_episode():
    from a2c.rollout import RolloutCollector
    from envs import make_vec_env

    env = make_vec_env("MovingDotNoFrameskip-v0", 4)
    seen = []

    def reward_fn(obs, actions):
        seen.append(obs.shape)
        return np.full(len(actions), 0.5, np.float32)

    collector = RolloutCollector(env, make_policy("moving_dot", 5), 5, reward_fn=reward_fn)
    episodes = []
    for _ in range(60):
        rollout = collector.collect()
        assert (rollout.rewards == 0.5).all()
        episodes += rollout.finished
    assert seen[0] == (20, 4, 84, 84)  # one batched call per rollout, all T x N steps
    assert len(episodes) == 4 and all(e.train_return == 125.0 for e in episodes)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_a2c_trains_a_policy_on_the_gpu_and_its_checkpoint_loads_on_the_cpu(tmp_path):
    config = A2CRunConfig("MovingDotNoFrameskip-v0", total_timesteps=4_000, seed=0,
                          ckpt_dir=str(tmp_path / "p"), torch_threads=1, device="cuda")
    assert run_agent(config, log_dir=str(tmp_path / "tb")) == 4_000
    state = load_policy(tmp_path / "p")
    policy = make_policy("moving_dot", 5)
    policy.load_state_dict(state["policy"])  # a CPU policy from a GPU run's checkpoint
    obs = MovingDotVecEnv(3, seed=1).reset()
    assert sample_actions(policy, obs).shape == sample_actions(policy.cuda(), obs).shape == (3,)
    resumed = A2CRunConfig("MovingDotNoFrameskip-v0", total_timesteps=8_000, seed=0,
                           ckpt_dir=str(tmp_path / "p"), load_ckpt_dir=str(tmp_path / "p"),
                           torch_threads=1, device="cuda")
    assert run_agent(resumed, log_dir=str(tmp_path / "tb")) == 8_000  # optimiser state onto the GPU


def test_a_new_run_starts_from_a_saved_policys_weights_at_zero_steps(tmp_path):
    # --start_policy: the weights of a shared policy (a weights file), a fresh optimiser, the
    # agent steps counted from 0 (not from the weights' own 12,345).
    from a2c.train import A2CAgent

    torch.manual_seed(7)
    shared = make_policy("moving_dot", 5)
    save_policy_weights(tmp_path / "shared.pt", {"policy": shared.state_dict(), "timesteps": 12_345})
    config = A2CRunConfig("MovingDotNoFrameskip-v0", total_timesteps=800, seed=0,
                          ckpt_dir=str(tmp_path / "p"), start_weights=str(tmp_path / "shared.pt"))
    agent = A2CAgent(config, log_dir=str(tmp_path / "tb"))
    try:
        assert agent.timesteps == 0
        for name, w in shared.state_dict().items():
            assert torch.equal(agent.policy.state_dict()[name], w), name
        assert not agent.algo.optimizer.state  # nothing of the shared run's optimiser
    finally:
        agent.close()
    assert run_agent(config, log_dir=str(tmp_path / "tb")) == 800


def test_a_resumed_run_takes_over_the_curves_from_its_checkpoint(tmp_path):
    # A run killed after its last checkpoint had logged steps that the resumed run plays again:
    # after the checkpoint's step, TensorBoard (and experiments.runlog) show only the new points.
    from pathlib import Path

    from experiments.runlog import scalars
    from runtime.scalars import ScalarWriter

    tb, ckpt = str(tmp_path / "tb"), str(tmp_path / "p")
    first = A2CRunConfig("MovingDotNoFrameskip-v0", total_timesteps=4_000, seed=0, ckpt_dir=ckpt,
                         torch_threads=1)
    assert run_agent(first, log_dir=tb) == 4_000
    lost = ScalarWriter(tb)  # what the killed run logged past its checkpoint
    for step in range(4_400, 12_001, 400):
        lost.add_scalar("charts/episodic_return", -99.0, step)
    lost.close()
    time.sleep(1.0)  # event files are read in name order, which starts with the second opened
    resumed = A2CRunConfig("MovingDotNoFrameskip-v0", total_timesteps=8_000, seed=0,
                           ckpt_dir=ckpt, load_ckpt_dir=ckpt, torch_threads=1)
    assert run_agent(resumed, log_dir=tb) == 8_000
    returns = scalars(Path(tb), "charts/episodic_return")
    assert len(returns) > 0 and (returns[:, 2] != -99.0).all()
    assert (np.diff(returns[:, 1]) >= 0).all()  # one pass along the step axis
    assert returns[:, 1].max() > 4_000  # the resumed run's own points are there


def test_weights_gone_to_nan_are_never_saved_over_a_good_checkpoint(tmp_path, capsys):
    from a2c.config import checkpoint_steps, checkpoints
    from a2c.train import A2CAgent

    config = A2CRunConfig("MovingDotNoFrameskip-v0", total_timesteps=800, seed=0,
                          ckpt_dir=str(tmp_path / "p"), ckpt_keep=1)
    agent = A2CAgent(config, log_dir=str(tmp_path / "tb"))
    try:
        agent.learn(agent.act())
        agent.checkpoint()
        saved = checkpoints(tmp_path / "p")
        assert [checkpoint_steps(c) for c in saved] == [80]
        agent.learn(agent.act())
        with torch.no_grad():
            agent.policy.torso[0].weight.fill_(float("nan"))
    finally:
        agent.close()  # the run's last checkpoint: refused
    assert checkpoints(tmp_path / "p") == saved  # the good one kept, not replaced
    assert "not finite at 160 agent steps: not saved" in capsys.readouterr().err


def test_a_check_of_a_policy_whose_layer_died_says_since_when(tmp_path):
    import multiprocessing as mp

    from a2c.config import ALIVE_TAG, LOGIT_SPREAD_TAG, VALUE_SPREAD_TAG, A2CStats
    from a2c.train import A2CAgent
    from experiments.runlog import scalars

    stats = A2CStats(mp.get_context("spawn"))
    config = A2CRunConfig("MovingDotNoFrameskip-v0", total_timesteps=800, seed=0,
                          ckpt_dir=str(tmp_path / "p"))
    agent = A2CAgent(config, log_dir=str(tmp_path / "tb"), stats=stats)
    first_layer = agent.policy.torso[0]
    bias = first_layer.bias.detach().clone()
    try:
        agent.checkpoint()  # before any rollout: nothing to look at, nothing said
        agent.learn(agent.act())
        agent.checkpoint()  # alive
        assert stats.dead_since.value == -1
        with torch.no_grad():  # no screen can lift the first layer's units above zero
            first_layer.bias.fill_(-1e3)
        for _ in range(2):
            agent.learn(agent.act())
            agent.checkpoint()
            assert stats.dead_since.value == 160  # the first check that found it dead
        with torch.no_grad():
            first_layer.bias.copy_(bias)
        agent.learn(agent.act())
        agent.checkpoint()
        assert stats.dead_since.value == -1  # alive again at the latest check
        with torch.no_grad():
            first_layer.bias.fill_(-1e3)
        agent.learn(agent.act())
        agent.telemetry.dump(agent.timesteps)
        agent.checkpoint()
    finally:
        agent.close()
    layer1 = scalars(tmp_path / "tb", f"{ALIVE_TAG}1")[:, 2]
    assert layer1[0] > 0 and layer1[-1] == 0.0  # the curve shows it
    assert len(scalars(tmp_path / "tb", f"{ALIVE_TAG}3")) > 0  # MovingDot's torso: 3 ReLUs
    # the logits vary across the screens while it sees them, not once its first layer is silent
    for tag in (LOGIT_SPREAD_TAG, VALUE_SPREAD_TAG):
        spread = scalars(tmp_path / "tb", tag)[:, 2]
        assert len(spread) == len(layer1) and spread[0] > 0 and spread[-1] < 1e-6


def test_the_alive_check_leaves_out_the_screens_of_an_episodes_first_steps(tmp_path, monkeypatch):
    import a2c.train
    from a2c.train import A2CAgent
    from envs import full_stacks

    measured = []
    measure = a2c.train.alive_and_spread
    monkeypatch.setattr(a2c.train, "alive_and_spread",
                        lambda net, obs, autocast: measured.append(obs) or measure(net, obs, autocast))
    config = A2CRunConfig("MovingDotNoFrameskip-v0", total_timesteps=800, seed=0,
                          ckpt_dir=str(tmp_path / "p"))
    agent = A2CAgent(config, log_dir=str(tmp_path / "tb"))
    try:
        agent.learn(agent.act())  # the first rollout begins at the envs' reset
        rollout = torch.from_numpy(agent.collector.obs[:-1].reshape(-1, 4, 84, 84))
        agent.checkpoint()
    finally:
        agent.close()
    full = full_stacks(rollout)
    assert 0 < int(full.sum()) < len(rollout)  # the reset's padded stacks are in the rollout
    assert measured and all(torch.equal(screens, rollout[full]) for screens in measured)


def test_a_dead_policy_is_revived_from_the_newest_live_checkpoint(tmp_path, capsys):
    import multiprocessing as mp

    from a2c.config import A2CStats, checkpoints
    from a2c.train import A2CAgent
    from experiments.runlog import scalars

    stats = A2CStats(mp.get_context("spawn"))
    config = A2CRunConfig("MovingDotNoFrameskip-v0", total_timesteps=800, seed=0,
                          ckpt_dir=str(tmp_path / "p"), ckpt_keep=0, revive_dead=True,
                          precision="bf16")  # the autocast a bf16 machine trains under
    agent = A2CAgent(config, log_dir=str(tmp_path / "tb"), stats=stats)
    first_layer = agent.policy.torso[0]
    try:
        agent.learn(agent.act())
        agent.checkpoint()  # alive, at 80 agent steps
        live = {k: v.clone() for k, v in agent.policy.state_dict().items()}
        live_ms = [agent.algo.optimizer.state[p]["square_avg"].clone()
                   for p in agent.policy.parameters()]
        # a newer file that is a policy's weights alone: passed over
        save_policy_weights(tmp_path / "p" / "policy-000000000100.pt",
                            load_policy_weights(tmp_path / "p"))
        with torch.no_grad():
            first_layer.bias.fill_(-1e3)
        agent.learn(agent.act())
        agent.checkpoint()  # found dead at 160, put back to 80's, saved as that
        assert stats.dead_since.value == -1 and stats.revivals.value == 1
        assert agent.timesteps == 160  # the count of agent steps goes on
        assert all(torch.equal(v, live[k]) for k, v in agent.policy.state_dict().items())
        assert all(torch.equal(agent.algo.optimizer.state[p]["square_avg"], ms)
                   for p, ms in zip(agent.policy.parameters(), live_ms))
        newest = load_policy(tmp_path / "p")
        assert newest["timesteps"] == 160
        assert torch.equal(newest["policy"]["torso.0.bias"], live["torso.0.bias"])
        agent.telemetry.dump(agent.timesteps)
        with torch.no_grad():  # dead again, at the run's end: saved as it is, not revived
            first_layer.bias.fill_(-1e3)
        agent.learn(agent.act())
    finally:
        agent.close()
    assert stats.dead_since.value == 240 and stats.revivals.value == 1
    assert (load_policy(tmp_path / "p")["policy"]["torso.0.bias"] == -1e3).all()
    assert checkpoints(tmp_path / "p")[-1].name == "policy-000000000240.pt"
    err = capsys.readouterr().err
    assert "policy dead at 160 agent steps: revived from its checkpoint at 80" in err
    assert "passing over" in err and "policy-000000000100.pt" in err
    assert err.count("policy dead") == 1
    assert scalars(tmp_path / "tb", "charts/revived_from")[:, 1:].tolist() == [[160, 80]]


def test_a_later_death_reads_only_the_checkpoints_saved_since(tmp_path, monkeypatch):
    import a2c.checkpoint
    import a2c.revive
    from a2c.revive import Reviver

    policy = make_policy("moving_dot", 5)
    algo = A2C(policy, A2CConfig())
    monkeypatch.setattr(a2c.revive, "random_play",
                        lambda *_, **__: np.zeros((8, 4, 84, 84), dtype=np.uint8))
    read, real = [], a2c.checkpoint.read_checkpoint
    monkeypatch.setattr(a2c.checkpoint, "read_checkpoint", lambda p: read.append(p) or real(p))
    reviver, autocast = Reviver("MovingDotNoFrameskip-v0", 0, tmp_path), torch.autocast("cpu")
    save_policy(tmp_path, policy, algo.optimizer, timesteps=80, updates=1, keep=0)
    assert [c.timesteps for c in reviver.candidates(policy, autocast)] == [80]
    save_policy(tmp_path, policy, algo.optimizer, timesteps=160, updates=2, keep=0)
    assert [c.timesteps for c in reviver.candidates(policy, autocast)] == [80, 160]
    assert [p.name for p in read] == ["policy-000000000080.pt", "policy-000000000160.pt"]


def test_a_layer_silent_on_the_rollout_but_alive_in_random_play_is_left_as_it_is(tmp_path,
                                                                                  monkeypatch):
    import multiprocessing as mp

    import a2c.revive
    from a2c.config import A2CStats
    from a2c.revive import Reviver
    from a2c.train import A2CAgent

    stats = A2CStats(mp.get_context("spawn"))
    config = A2CRunConfig("MovingDotNoFrameskip-v0", total_timesteps=800, seed=0,
                          ckpt_dir=str(tmp_path / "p"), ckpt_keep=0, revive_dead=True)
    agent = A2CAgent(config, log_dir=str(tmp_path / "tb"), stats=stats)
    # Random play's screens, here bright everywhere, light up a first layer that the rollout's
    # dark screens with one small dot leave silent: the rollout's are not all the game.
    monkeypatch.setattr(a2c.revive, "random_play",
                        lambda *_, **__: np.full((8, 4, 84, 84), 255, dtype=np.uint8))
    looked, real_is_dead = [], Reviver.is_dead
    monkeypatch.setattr(Reviver, "is_dead",
                        lambda *a: looked.append(real_is_dead(*a)) or looked[-1])
    monkeypatch.setattr(Reviver, "candidates", lambda *_: pytest.fail("no checkpoint is read"))
    try:
        agent.learn(agent.act())
        agent.checkpoint()
        first = agent.policy.torso[0]
        with torch.no_grad():  # each unit: the mean of its 256 inputs (0 to 1), less a half
            first.weight.fill_(1 / first.weight[0].numel())
            first.bias.fill_(-0.5)
        agent.learn(agent.act())
        agent.checkpoint()
        assert looked == [False]  # silent on the rollout, so random play was looked at
        assert stats.dead_since.value == -1 and stats.revivals.value == 0
        assert (first.bias == -0.5).all()  # nothing put back
    finally:
        agent.close()


def test_a_run_whose_kept_checkpoints_are_all_blind_is_not_taken_back_to_one(tmp_path, monkeypatch,
                                                                             capsys):
    import multiprocessing as mp
    from pathlib import Path

    from a2c.config import A2CStats
    from a2c.revive import Candidate, Reviver
    from a2c.train import A2CAgent

    stats = A2CStats(mp.get_context("spawn"))
    config = A2CRunConfig("MovingDotNoFrameskip-v0", total_timesteps=800, seed=0,
                          ckpt_dir=str(tmp_path / "p"), ckpt_keep=0, revive_dead=True)
    agent = A2CAgent(config, log_dir=str(tmp_path / "tb"), stats=stats)
    blind = Candidate(Path("policy-80.pt"), 80, [1.0, 0.5], 0.00001, 0.0002)
    monkeypatch.setattr(Reviver, "is_dead", lambda *_: True)
    monkeypatch.setattr(Reviver, "candidates", lambda *_: [blind])
    monkeypatch.setattr(Reviver, "fresh_value_spread", lambda *_: 0.012)
    try:
        agent.learn(agent.act())
        with torch.no_grad():
            agent.policy.torso[0].bias.fill_(-1e3)
        agent.learn(agent.act())
        agent.checkpoint()
        assert stats.dead_since.value == agent.timesteps and stats.revivals.value == 0
    finally:
        agent.close()
    assert "no kept checkpoint tells screens apart: their value's spread is at most 0.0002, a " \
           "fresh network's 0.0120" in capsys.readouterr().err


def test_a_revival_takes_the_newest_checkpoint_that_still_tells_screens_apart():
    from pathlib import Path

    from a2c.revive import Candidate, choose

    def kept(steps, alive, spread, value_spread=0.3):
        return Candidate(Path(f"policy-{steps}.pt"), steps, [1.0, alive], spread, value_spread)

    healthy, sick, dead = kept(3_840, 0.8, 0.9), kept(4_160, 0.1, 0.04), kept(4_240, 0.0, 0.0)
    assert choose([kept(3_520, 0.8, 1.3), healthy, sick, dead]) is healthy
    assert choose([sick, dead]) is sick  # the most any live one varies sets the bar
    assert choose([dead]) is None
    # blind: units fire, but its value varies far less than a fresh network's
    blind = kept(4_000, 0.5, 0.00002, value_spread=0.0003)
    assert choose([blind, healthy], fresh_value_spread=0.01) is healthy
    assert choose([blind], fresh_value_spread=0.01) is None
    assert choose([blind]) is blind  # with no fresh network to compare, only death counts


def test_a_fresh_networks_spread_is_drawn_from_the_runs_seed_and_leaves_its_random_state(tmp_path,
                                                                                       monkeypatch):
    import a2c.revive
    from a2c.revive import Reviver

    screens = np.random.default_rng(0).integers(0, 256, (32, 4, 84, 84), dtype=np.uint8)
    monkeypatch.setattr(a2c.revive, "random_play", lambda *_, **__: screens)
    policy, autocast = make_policy("moving_dot", 5), torch.autocast("cpu", enabled=False)
    with torch.no_grad():
        policy.value.weight.zero_()  # the run's own network: its value is the same everywhere
    before = torch.random.get_rng_state()
    spread = Reviver("MovingDotNoFrameskip-v0", 3, tmp_path).fresh_value_spread(policy, autocast)
    assert torch.equal(torch.random.get_rng_state(), before)
    assert spread > 0 and not policy.value.weight.detach().any()  # a copy was drawn anew
    again = Reviver("MovingDotNoFrameskip-v0", 3, tmp_path).fresh_value_spread(policy, autocast)
    assert again == spread


def test_a_resumed_run_checks_its_policy_after_its_first_update(tmp_path):
    import multiprocessing as mp

    from a2c.config import A2CStats
    from a2c.train import A2CAgent

    config = A2CRunConfig("MovingDotNoFrameskip-v0", total_timesteps=800, seed=0,
                          ckpt_dir=str(tmp_path / "p"))
    agent = A2CAgent(config, log_dir=str(tmp_path / "tb"))
    with torch.no_grad():
        agent.policy.torso[0].bias.fill_(-1e3)
    agent.learn(agent.act())
    agent.close()  # saved dead at 80 steps
    stats = A2CStats(mp.get_context("spawn"))
    config.load_ckpt_dir = config.ckpt_dir
    resumed = A2CAgent(config, log_dir=str(tmp_path / "tb"), stats=stats)
    try:
        resumed.learn(resumed.act())
        resumed.checkpoint_if_due()  # update 2 of interval 1000: no checkpoint, but a check
        assert stats.dead_since.value == 160
    finally:
        resumed.close()


def test_a_resumed_run_goes_on_counting_episodes_and_their_recent_return(tmp_path):
    # The status line and the end summary of a resumed run start from the stopped run's
    # episodes and latest returns, not from nothing.
    import multiprocessing as mp

    from a2c.config import A2CStats
    from a2c.train import A2CAgent

    config = A2CRunConfig("MovingDotNoFrameskip-v0", total_timesteps=16_000, seed=0,
                          ckpt_dir=str(tmp_path / "p"), torch_threads=1)
    first = A2CStats(mp.get_context("spawn"))
    assert run_agent(config, log_dir=str(tmp_path / "tb"), stats=first) == 16_000
    assert first.episodes.value == 64  # 1,000 frames, 250 agent steps, an episode in 16 envs
    saved = load_policy(config.ckpt_dir)
    assert saved["episodes"] == 64 and len(saved["recent_returns"]) == 64
    stats = A2CStats(mp.get_context("spawn"))
    config.load_ckpt_dir = config.ckpt_dir
    resumed = A2CAgent(config, log_dir=str(tmp_path / "tb"), stats=stats)
    try:
        assert stats.episodes.value == 64
        assert stats.recent_return.value == pytest.approx(first.recent_return.value)
        assert list(resumed.side.recent_returns) == saved["recent_returns"].tolist()
    finally:
        resumed.close()
    # A checkpoint written before it kept them: the counts start again, as they used to.
    from a2c.config import checkpoints

    newest = checkpoints(config.ckpt_dir)[-1]
    state = torch.load(newest, weights_only=True)
    torch.save({k: v for k, v in state.items() if k not in ("episodes", "recent_returns")}, newest)
    stats = A2CStats(mp.get_context("spawn"))
    A2CAgent(config, log_dir=str(tmp_path / "tb"), stats=stats).close()
    assert stats.episodes.value == 0 and math.isnan(stats.recent_return.value)
