"""experiments.alongside_signal: the branching emulator and the advantage's estimate."""
from __future__ import annotations

import numpy as np
import pytest

from experiments.alongside_signal import REWARDS, BranchingEnduro, main, mean_advantages, spread
from pref_interface.labellers.alongside import find_player


def test_a_restored_state_replays_the_same_frames_and_the_player_is_found():
    env = BranchingEnduro(seed=0)
    env.reset(np.random.default_rng(0))
    for _ in range(30):
        env.step(1)  # accelerate
    state = env.save()
    actions = [1, 3, 1, 5, 0, 7, 1, 2]
    first = [env.step(a)[0] for a in actions]
    env.restore(state)
    again = [env.step(a)[0] for a in actions]
    assert all(np.array_equal(a, b) for a, b in zip(first, again))
    assert all(f.shape == (84, 84) and f.dtype == np.uint8 for f in first)
    assert all(find_player(f) is not None for f in first)  # the detector reads these frames
    assert not first[0][62:].any()  # the bottom panel is blanked, as in training


def test_the_spread_estimate_finds_a_real_advantage_and_not_the_noise():
    rng = np.random.default_rng(0)
    states, actions = 400, 9
    effect = rng.normal(0, 1.0, (states, 1, actions))  # advantage variance 1
    noisy = effect + rng.normal(0, 3.0, (states, 2, actions))  # one return's variance 9
    var, se, noise = spread(noisy)
    assert var == pytest.approx(1.0, abs=3 * se) and noise == pytest.approx(9.0, rel=0.1)
    var, se, noise = spread(rng.normal(0, 3.0, (states, 2, actions)))  # no advantage at all
    assert abs(var) < 3 * se and noise == pytest.approx(9.0, rel=0.1)
    shifted = rng.normal(0, 1.0, (states, 2, actions)) + np.arange(actions)  # state-blind shift
    mean, se = mean_advantages(shifted)
    assert mean == pytest.approx(np.arange(actions) - 4.0, abs=4 * se.max())


def test_the_experiment_prints_a_row_per_reward(capsys):
    assert main(["--states", "2", "--horizon", "4"]) == 0
    out = capsys.readouterr().out
    rows = [line.split(" | ")[0] for line in out.splitlines() if line.startswith("| ")]
    assert [r for r in rows if r[2:] in REWARDS][:len(REWARDS)] == [f"| {r}" for r in REWARDS]
    with pytest.raises(SystemExit) as e:
        main(["--horizon", "1"])
    assert e.value.code == 2 and "--horizon at least 2" in capsys.readouterr().err
