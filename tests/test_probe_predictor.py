"""experiments/probe_predictor.py: the figures it reports about a predictor against the true reward."""
from __future__ import annotations

import numpy as np
import pytest

from experiments.probe_predictor import LAGS, Probe, collect, main, report
from pref_interface.labellers.teachers import AlongsideTeacher, ShapedAlongsideTeacher


def _events(seed: int = 0, steps: int = 400, n: int = 4) -> np.ndarray:
    rng = np.random.default_rng(seed)
    true = np.zeros((steps, n))
    true[rng.random((steps, n)) < 0.03] = -1.0
    true[rng.random((steps, n)) < 0.01] = 1.0
    return true


def test_a_predictor_that_is_an_affine_map_of_the_true_reward_agrees_everywhere():
    true = _events()
    probe = Probe(2.0 * true + 0.1, true)
    assert probe.step_correlation() == pytest.approx(1.0)
    assert probe.clip_correlation() == pytest.approx(1.0)
    assert probe.clip_agreement() == 1.0
    assert Probe(-true, true).clip_agreement() == 0.0


def test_clip_returns_are_the_sums_of_every_25_step_window():
    true = _events(1)
    pred, summed = Probe(true, true).clip_returns()
    assert len(summed) == (true.shape[0] - 24) * true.shape[1]
    assert summed.reshape(-1, true.shape[1])[0, 2] == true[:25, 2].sum()
    np.testing.assert_array_equal(pred, summed)


def test_the_average_around_events_finds_where_the_predictor_reacts():
    true = _events(2)
    predicted = np.zeros_like(true)
    for t, n in np.argwhere(true < 0):
        if t >= 3:
            predicted[t - 3, n] -= 1.0  # the predictor sees a miss coming 3 steps early
    mean, se, count = Probe(predicted, true).around_events(-1)
    assert count > 20 and LAGS[np.argmin(mean)] == -3 and np.all(se >= 0)
    assert Probe(predicted, np.zeros_like(true)).around_events(1)[2] == 0


def test_collect_scores_each_step_of_the_env():
    from envs import make_vec_env

    env = make_vec_env("MovingDotNoFrameskip-v0", 3, seed=0)
    rng = np.random.default_rng(0)
    seen = []

    def reward_fn(obs, actions):
        seen.append(obs.shape)
        return np.full(len(obs), 0.5, np.float32)

    probe = collect(env, reward_fn, lambda obs: rng.integers(0, env.num_actions, len(obs)), 60)
    env.close()
    assert probe.predicted.shape == probe.true.shape == (60, 3) and seen[0] == (3, 4, 84, 84)
    assert set(np.unique(probe.true)) <= {-1.0, 0.0, 1.0} and probe.true.any()
    assert np.isnan(probe.step_correlation())  # a constant prediction says nothing


def test_a_directory_without_a_predictor_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main([str(tmp_path)])
    assert e.value.code == 2 and "saved reward predictor" in capsys.readouterr().err


def test_validation_leak_counts_validation_labels_that_share_clips_with_training_labels():
    from clips.clip import Clip, Preference
    from experiments.validation_leak import leak

    def clip(v: int) -> Clip:
        return Clip.pack(np.full((4, 84, 84), v, np.uint8), np.zeros(1, np.int64), np.zeros(1, np.float32))

    prefs = [Preference(clip(0), clip(1), 1.0), Preference(clip(2), clip(3), 0.0),
             Preference(clip(0), clip(4), 1.0, is_validation=True),  # one clip trained on
             Preference(clip(1), clip(2), 0.5, is_validation=True),  # both
             Preference(clip(5), clip(6), 0.0, is_validation=True)]  # none
    assert leak(prefs) == (3, 2, 1)


def test_for_the_alongside_teacher_collect_counts_the_steps_level_with_a_car():
    """An alongside run's predictor is judged against what its teacher counted: each
    observation's newest frame level with a car or not, whatever the game's reward."""
    from types import SimpleNamespace

    from experiments.probe_predictor import report
    from tests.test_teachers import enduro_frame

    beside, alone = enduro_frame(cars=((62, 57, 5, 8, 100),)), enduro_frame()
    level = [True, False, False, True] * 10  # env 0's newest frame, step by step; env 1 alone
    frames = [np.stack([np.stack([beside if lv else alone] * 4), np.stack([alone] * 4)])
              for lv in level]

    class Env:
        t = 0

        def reset(self):
            return frames[0]

        def step(self, actions):
            self.t += 1
            return SimpleNamespace(obs=frames[min(self.t, len(frames) - 1)],
                                   rewards=np.ones(2, np.float32))

    probe = collect(Env(), lambda obs, a: np.zeros(len(obs)), lambda obs: np.zeros(len(obs), int),
                    len(level), AlongsideTeacher())
    assert probe.true[:, 0].tolist() == [float(v) for v in level] and not probe.true[:, 1].any()
    assert probe.target == "steps level with a car"
    assert "share of steps level with a car: 25.0%" in report(probe)


def test_the_shaped_teachers_step_scores_sum_to_the_level_steps_and_the_nearness_gained():
    """The shaped teacher's score per step (what the probe compares r̂ with) sums over a clip to
    the level steps plus `closing` times the nearness gained since the frame before its first
    step."""
    from pref_interface.labellers.alongside import clip_alongside, nearness
    from tests.test_teachers import closing_clip

    teacher = ShapedAlongsideTeacher(closing=10)
    clip = closing_clip([None] * 4 + list(range(36, 56, 2)) + [56] * 14)  # closes in, then level
    frames = clip.frames()
    stacks = np.lib.stride_tricks.sliding_window_view(frames, 4, axis=0).transpose(0, 3, 1, 2)
    total = sum(teacher.step_scores(stacks[t:t + 1])[0] for t in range(len(stacks)))
    expected = clip_alongside(clip) + 10 * (nearness(frames[-1]) - nearness(frames[2]))
    assert total == pytest.approx(expected) and clip_alongside(clip) > 0 and expected > 10


def test_a_probe_where_the_true_reward_never_changes_says_so_instead_of_nan():
    probe = Probe(np.random.default_rng(0).normal(size=(100, 2)), np.zeros((100, 2)))
    text = report(probe)
    assert "nan" not in text and "was 0 at every step: nothing to compare" in text


def test_each_action_is_held_at_every_step_from_the_same_starts():
    from envs import make_vec_env
    from experiments.probe_predictor import each_action, each_action_report

    starts = []

    def make_env():
        env = make_vec_env("MovingDotNoFrameskip-v0", 2, seed=3)
        starts.append(env.reset().copy())
        return env

    probes = each_action(make_env, lambda obs, actions: actions.astype(np.float64),
                         ["noop", "up", "right"], 30)
    assert [p.predicted.mean() for p in probes.values()] == [0.0, 1.0, 2.0]
    assert all(np.array_equal(s, starts[0]) for s in starts)
    assert not probes["noop"].true.any()  # a dot that never moves is never rewarded
    text = each_action_report(probes)
    assert text.splitlines()[1].startswith("always up") and "r̂ +1.0000 a step" in text


def test_stored_labels_scores_the_predictor_on_its_own_training_and_validation_labels(
        tmp_path, capsys):
    """`--stored_labels`: a row per split with each member's and the ensemble's accuracy; with
    every label turned round, every accuracy becomes its complement."""
    import re
    import shutil
    from pathlib import Path

    from pref_interface.store import PreferenceStore

    run = tmp_path / "run"
    shutil.copytree(Path(__file__).resolve().parent / "fixtures" / "run_29d3a96", run)

    def rows() -> dict[str, list[int]]:
        assert main([str(run), "--stored_labels"]) == 0
        found = re.findall(r"^\| (training|validation) \| (\d+) \| ([\d% /]+) \| (\d+)% \|$",
                           capsys.readouterr().out, re.MULTILINE)
        return {name: [int(n), *map(int, re.findall(r"\d+", members)), int(ensemble)]
                for name, n, members, ensemble in found}

    before = rows()
    with PreferenceStore(run / "prefs.sqlite", create=False) as store:
        decided = [(i, store.get(i).mu) for i in store.all_ids() if store.get(i).mu != 0.5]
        for i, mu in decided:
            store.set_mu(i, 1.0 - mu)
    after = rows()
    assert set(before) == {"training", "validation"} and len(before["training"]) == 5
    assert before["training"][0] + before["validation"][0] == len(decided)
    for split in before:
        assert after[split][0] == before[split][0]
        # each accuracy is rounded to a whole percent, so the two add up to 100 within 1
        assert all(abs(a + b - 100) <= 1 for a, b in zip(after[split][1:], before[split][1:]))


def test_stored_labels_gives_the_level_counts_answer_where_it_can_count(tmp_path):
    """The count column: on MovingDot's frames no car is ever level, so the count ties every
    pair and scores one half; the predictor's columns are there as without it."""
    import shutil
    from pathlib import Path

    from experiments.probe_predictor import stored_label_accuracy
    from launch.cli import saved_run

    run = tmp_path / "run"  # a copy: opening the store tidies its files
    shutil.copytree(Path(__file__).resolve().parent / "fixtures" / "run_29d3a96", run)
    table = stored_label_accuracy(saved_run(run), counted=True)
    rows = [line.split(" | ") for line in table.splitlines()[2:]]
    assert [r[0] for r in rows] == ["| training", "| validation"]
    assert all(r[-1] == "50% |" and len(r[2].split(" / ")) == 3 for r in rows)


def test_the_follower_contrast_says_how_often_each_prefers_the_followers_clips():
    """Envs 0-1 random play, 2-3 the follower: a teacher paying only the follower's steps prefers
    its clips in every pair; r̂ paying both alike ties every pair, which counts half."""
    from experiments.probe_predictor import follower_contrast

    true = np.zeros((100, 4))
    true[:, 2:] = 1.0
    line = follower_contrast(Probe(np.full((100, 4), 0.25), true, "the score"), n_random=2)
    assert "follower +0.2500, random play +0.2500" in line
    assert "r̂ prefers the follower's in 50.0%, the score in 100.0%" in line
    backwards = follower_contrast(Probe(-true, true, "the score"), n_random=2)
    assert "r̂ prefers the follower's in 0.0%" in backwards


def test_the_follower_drives_only_in_enduro_and_beside_random_play(tmp_path, capsys):
    import shutil
    from pathlib import Path

    from experiments.probe_predictor import follower_envs

    run = tmp_path / "run"  # a MovingDot run with a saved predictor
    shutil.copytree(Path(__file__).resolve().parent / "fixtures" / "run_29d3a96", run)
    with pytest.raises(SystemExit) as e:
        main([str(run), "--policy", "follower"])
    assert e.value.code == 2 and "drives in Enduro; this run is MovingDot" in capsys.readouterr().err
    assert list(follower_envs(4)) == [2, 3] and list(follower_envs(3)) == [1, 2]
    for args in (["--following", "0.5"], ["--policy", "follower", "--following", "0"],
                 ["--policy", "follower", "--following", "1.5"]):
        with pytest.raises(SystemExit) as e:
            main([str(run), *args])
        assert e.value.code == 2 and "--following is a probability in (0, 1]" in \
            capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main([str(run), "--against", "run"])
    assert e.value.code == 2 and "--against goes with --policy follower" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:  # refused before the play, not after it
        main([str(run), "--out", str(tmp_path / "probe.txt")])
    assert e.value.code == 2 and "is not a .png, .svg or .pdf file" in capsys.readouterr().err


def test_score_bands_show_r_hat_paying_random_plays_best_steps_but_not_the_followers():
    """Envs 0-1 random play, 2-3 the follower, each with steps the teacher scores 0, 1, 2 and 3:
    r̂ pays random play's scored steps and not the follower's, and the bands say so."""
    from experiments.probe_predictor import by_score_band

    true = np.tile(np.repeat([0.0, 1.0, 2.0, 3.0], 10), 4).reshape(4, 40).T  # (40, 4)
    pred = np.where(true > 0, 0.5, 0.0)
    pred[:, 2:] = -0.25
    rows = by_score_band(Probe(pred, true, "the score"), n_random=2).splitlines()
    assert rows[0] == "| the score a step | random play: share, r̂ | follower: share, r̂ |"
    assert rows[2] == "| 0 | 25%, +0.0000 | 25%, -0.2500 |"
    assert [r.split(" | ")[0] for r in rows[3:]] == ["| 1.00–1.67", "| 1.67–2.33", "| 2.33–3.00"]
    assert all(r.endswith(" | 25%, +0.5000 | 25%, -0.2500 |") for r in rows[3:])


def test_a_count_of_level_steps_has_one_band_beside_zero():
    from experiments.probe_predictor import by_score_band

    true = np.zeros((20, 2))
    true[::4] = 1.0
    rows = by_score_band(Probe(true.copy(), true, "steps"), n_random=1).splitlines()
    assert [r.split(" | ")[0] for r in rows[2:]] == ["| 0", "| 1"]
    assert rows[3] == "| 1 | 25%, +1.0000 | 25%, +1.0000 |"


def test_the_runs_policy_is_the_one_examples_ppo_saved_where_the_run_went_through_it(tmp_path):
    """`--policy run` plays the weights file a run through examples.ppo keeps, before any A2C
    checkpoint: here one that always takes the last action."""
    import shutil
    from pathlib import Path

    import torch

    from a2c.checkpoint import save_policy_weights
    from a2c.policies import make_policy
    from launch.rundir import PPO_POLICY_FILE
    from experiments.probe_predictor import load_run
    from launch.cli import saved_run

    run_dir = tmp_path / "run"
    shutil.copytree(Path(__file__).resolve().parent / "fixtures" / "run_29d3a96", run_dir)
    run = saved_run(run_dir)
    env, _, _ = load_run(run, "random", 2, 0)
    n = env.num_actions
    env.close()
    net = make_policy("moving_dot", n)
    with torch.no_grad():
        net.policy.weight.zero_()
        net.policy.bias.copy_(torch.arange(n, dtype=torch.float32) * 100)
    save_policy_weights(run_dir / PPO_POLICY_FILE, {"policy": net.state_dict(), "timesteps": 0})
    env, _, act = load_run(run, "run", 2, 0)
    try:
        obs = env.reset()
        assert (act(obs) == n - 1).all()
    finally:
        env.close()
    # Beside the follower (`--against run`), the first half of the envs play the same policy.
    env, _, act = load_run(run, "follower", 4, 0, against="run")
    try:
        assert (act(env.reset())[:2] == n - 1).all()
    finally:
        env.close()
