"""experiments.probe_policy: a policy network whose units all went dead is seen as dead."""
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from a2c.checkpoint import load_policy_weights
from a2c.policies import make_policy
from envs import full_stacks, make_vec_env
from experiments import probe_policy

RUN = Path(__file__).resolve().parent / "fixtures" / "run_29d3a96"  # MovingDot, 4,000 steps


def fixture_policy() -> torch.nn.Module:
    net = make_policy("moving_dot", 5)
    net.load_state_dict(load_policy_weights(RUN / "policy")["policy"])
    return net


def test_a_layer_with_no_unit_alive_makes_one_distribution_for_every_screen():
    obs = probe_policy.random_play("MovingDotNoFrameskip-v0", 40, 2, seed=0)
    assert obs.shape == (18, 4, 84, 84) and obs.dtype == np.uint8  # 2 x 10 kept, but each t=0's
    healthy = probe_policy.probe(fixture_policy(), obs, 4000)
    assert all(0 < a <= 1 for a in healthy.alive) and not healthy.dead
    assert healthy.logit_spread > 0

    net = fixture_policy()
    last_conv = [m for m in net.torso if isinstance(m, torch.nn.Conv2d)][-1]
    with torch.no_grad():
        last_conv.bias.fill_(-1e3)  # no input can lift a unit above zero
    dead = probe_policy.probe(net, obs, 4000)
    assert dead.alive[1] == 0.0 and dead.dead and dead.logit_spread < 1e-6
    assert "DEAD" in dead.row() and "DEAD" not in healthy.row()


def test_random_play_leaves_out_the_screens_of_an_episodes_first_steps():
    env = make_vec_env("MovingDotNoFrameskip-v0", 2, seed=0)
    screens = [env.reset()] + [env.step(np.zeros(2, dtype=np.int64)).obs for _ in range(4)]
    # the reset's stack holds one frame of play, and each step adds one: full from the third step
    assert [bool(full_stacks(o).any()) for o in screens] == [False, False, False, True, True]
    assert full_stacks(torch.from_numpy(screens[3])).all()  # torch tensors too
    assert full_stacks(probe_policy.random_play("MovingDotNoFrameskip-v0", 40, 2, seed=0)).all()


def test_a_run_directory_gives_a_row_per_checkpoint(capsys):
    assert probe_policy.main([str(RUN), "--steps", "12", "--n_envs", "1"]) == 0
    rows = re.findall(r"^ +(\d+\.\d+)M ", capsys.readouterr().out, re.MULTILINE)
    assert rows == ["0.004"]  # the fixture keeps one checkpoint, at 4,000 agent steps
    assert probe_policy.main([str(RUN), "--steps", "12", "--n_envs", "1", "--actions"]) == 0
    shown = re.findall(r"^  actions: (.*)$", capsys.readouterr().out, re.MULTILINE)
    assert len(shown) == 1
    named = dict(item.rsplit(" ", 1) for item in shown[0].split(", "))
    probs = [float(v) for v in named.values()]
    assert len(named) == 5 and sum(probs) == pytest.approx(1, abs=0.03)
    assert probs == sorted(probs, reverse=True)


def test_bad_input_is_one_line(capsys):
    for args, reason in (([str(RUN), "--from", "1"], "no checkpoint from 1.0M"),  # none that late
                         ([str(RUN / "policy")], "give --env"),  # a folder names no env
                         ([str(RUN), "--env", "PongNoFrameskip-v4"],  # another env's
                          "does not fit this environment's network"),
                         ([str(RUN), "--steps", "8"],  # one full-stack screen per env
                          "--steps must be more than 8"),
                         ([str(RUN), "--from", "nan"], "--from and --to must be numbers"),
                         ([str(RUN), "--seed", "-1"], "--seed must be in [0,")):
        assert probe_policy.main(args) == 2, args
        err = capsys.readouterr().err
        assert err.count("\n") == 1, err
        assert err.startswith("python -m experiments.probe_policy: error:") and reason in err, err
