"""The scripted teachers: B-Pref's (Lee et al. 2021) and the episode-end penalty, and Enduro's
"keep alongside other cars" (its frame detector on hand-made frames and on the emulator's, its
labels counted, shaped, by nearness and by holding a car's speed, and `--teacher alongside`
and `alongside_shaped`)."""
import math

import numpy as np
import pytest

from clips.clip import STACK, Clip
from pref_interface.labellers.alongside import (
    HOLD_ROWS,
    alongside_share,
    clip_alongside,
    clip_closing,
    find_player,
    gap_ahead,
    holding,
    is_alongside,
    nearest_car,
    nearness,
)
from pref_interface.labellers.teachers import (
    AlongsideTeacher,
    BoltzmannTeacher,
    EqualTeacher,
    Labeller,
    MistakeTeacher,
    MyopicTeacher,
    OracleTeacher,
    ShapedAlongsideTeacher,
    SkipTeacher,
    make_teacher,
    teacher_return,
)
from tests.helpers import reward_clip

DAY, NIGHT, SNOW = 40, 0, 236  # the ground's grey in the 84x84 frames


def enduro_frame(ground: int = DAY, player: int = 40, top: int = 57,
                 cars: tuple[tuple[int, int, int, int, int], ...] = ()) -> np.ndarray:
    """A hand-made 84x84 frame: the player's 9-wide car (a fringe row, three rows of grey 192, a
    wheel row) with its top row at `top`, and other cars as (col, top, rows, width, grey) blocks."""
    f = np.full((84, 84), ground, np.uint8)
    f[:, :4] = 0  # the Atari's left border
    f[62:] = 0  # the blanked panel
    f[top, player - 4:player + 5] = 120
    f[top + 1:top + 4, player - 4:player + 5] = 192
    f[top + 4, player - 4:player + 5] = 130
    for col, car_top, rows, width, grey in cars:
        f[car_top:car_top + rows, col:col + width] = grey
    return f


def with_road(f: np.ndarray, grey: int = 110) -> np.ndarray:
    """The two road edges, 2 pixels wide, running diagonally down to the panel."""
    for r in range(30, 62):
        f[r, 42 - (r - 28):44 - (r - 28)] = grey
        f[r, 48 + (r - 28):50 + (r - 28)] = grey
    return f


def test_the_player_is_found_by_its_grey_192_body_and_other_cars_192s_do_not_move_it():
    assert find_player(enduro_frame(player=40)) == (57, 62, 40)
    assert find_player(enduro_frame(player=25, top=54)) == (54, 59, 25)  # raised when fast
    stray = enduro_frame(player=40)
    stray[59, 70] = stray[60, 71] = 192  # another car's blurred edge
    assert find_player(stray) == (57, 62, 40)
    snow = enduro_frame(SNOW)
    snow[58:62, 36:45] = 200  # in the snow the player's body is 193-210 ...
    snow[60:62, 40] = 192  # ... with as few as two pixels of 192
    snow[54:56, 12:18], snow[54:56, 16] = 130, 192  # and a car ahead has as many
    assert find_player(snow) == (57, 62, 40)
    blank = np.zeros((84, 84), np.uint8)
    assert find_player(blank) is None and not is_alongside(blank)


@pytest.mark.parametrize("cars, level", [
    ((), False),
    (((15, 57, 5, 8, 100),), True),  # beside it, on the left
    (((62, 58, 4, 8, 100),), True),  # on the right
    (((20, 45, 5, 8, 100),), False),  # ahead
    (((20, 51, 5, 8, 100),), False),  # just ahead: its last row above the player's first
    (((20, 53, 5, 8, 100),), True),  # half a car ahead: rows 53-57 share row 57
    (((20, 60, 2, 8, 100),), True),  # mostly below the panel, two rows still showing
    (((45, 57, 5, 8, 100),), False),  # touching the player: a collision, not alongside
    (((48, 57, 5, 8, 100),), True),  # three columns away
    (((20, 59, 1, 4, 100),), False),  # one row 4 wide: a road edge's kink on a curve
    (((20, 58, 2, 4, 100),), True),  # 4 wide in two rows: a small car
])
def test_day_frames_level_exactly_when_another_car_shares_the_players_rows(cars, level):
    assert is_alongside(enduro_frame(cars=cars)) is level
    assert is_alongside(with_road(enduro_frame(cars=cars))) is level  # road edges change nothing


def test_night_taillights_snow_and_a_raised_player():
    lights = ((20, 58, 1, 2, 115), (24, 58, 1, 2, 115))  # one row, two dots, a gap of two
    assert is_alongside(enduro_frame(NIGHT, cars=lights))
    high_lights = ((20, 52, 1, 2, 115), (24, 52, 1, 2, 115))
    assert not is_alongside(enduro_frame(NIGHT, cars=high_lights))
    far_lights = ((20, 58, 1, 2, 115), (27, 58, 1, 2, 115))  # a gap of five: two dots, no car
    assert not is_alongside(enduro_frame(NIGHT, cars=far_lights))
    assert is_alongside(enduro_frame(SNOW, cars=((20, 58, 3, 5, 200),)))
    assert not is_alongside(enduro_frame(SNOW, cars=((20, 58, 3, 5, 225),)))  # too faint to tell
    ahead = ((20, 51, 4, 8, 100),)  # rows 51-54
    assert is_alongside(enduro_frame(top=54, cars=ahead)) and not is_alongside(enduro_frame(cars=ahead))


def clip(level: list[bool], rewards: float = 0.0) -> Clip:
    """A clip whose step t ends on a frame with a car beside the player iff level[t]; the stack's
    first three frames (before step 0) all have one."""
    beside, alone = enduro_frame(cars=((15, 57, 5, 8, 100),)), enduro_frame()
    frames = np.stack([beside] * (STACK - 1) + [beside if x else alone for x in level])
    return Clip.pack(frames, np.zeros(len(level), np.int64), np.full(len(level), rewards, np.float32))


def test_the_teacher_prefers_the_clip_with_more_level_steps_whatever_the_reward():
    more = clip([True] * 10 + [False] * 15)
    fewer = clip([False] * 19 + [True] * 6, rewards=5.0)
    same = clip([True] * 5 + [False] * 10 + [True] * 5 + [False] * 5)
    assert clip_alongside(more) == 10 and clip_alongside(fewer) == 6
    assert clip_alongside(clip([False] * 25)) == 0  # the three frames before step 0 do not count
    teacher = AlongsideTeacher()
    assert teacher.label(more, fewer) == 1.0 and teacher.label(fewer, more) == 0.0
    assert teacher.label(more, same) == 0.5 and teacher.label(same, more) == 0.5
    assert teacher.source == "synthetic" and isinstance(teacher, Labeller)


def test_alongside_share_is_the_share_of_level_frames():
    beside, alone = enduro_frame(cars=((62, 57, 5, 8, 100),)), enduro_frame()
    assert alongside_share(np.stack([beside, beside, alone, beside])) == 0.75
    assert alongside_share(np.stack([alone] * 3)) == 0.0
    assert alongside_share(np.zeros((0, 84, 84), np.uint8)) == 0.0


def test_teacher_alongside_is_a_command_line_choice(tmp_path):
    from launch import cli

    teacher = make_teacher("alongside", rng=0, episode_end_penalty=1.0)
    assert type(teacher) is AlongsideTeacher
    with pytest.raises(ValueError) as e:
        make_teacher("alongside:eps=0.1")
    assert "\n" not in str(e.value) and "'alongside' takes no parameters" in str(e.value)
    argv = ["train_policy_with_preferences", "EnduroNoFrameskip-v4", "--synthetic_prefs",
            "--log_dir", str(tmp_path / "never")]
    assert cli.parse_args([*argv, "--teacher", "alongside"]).settings.teacher == "alongside"
    with pytest.raises(cli.UsageError):
        cli.parse_args([*argv, "--teacher", "alongside:x=1"])
    with pytest.raises(cli.UsageError, match="reads Enduro's frames"):
        cli.parse_args([argv[0], "PongNoFrameskip-v4", *argv[2:], "--teacher", "alongside"])


def test_on_the_emulators_frames_the_player_is_found_in_every_frame_and_follows_the_steering():
    """400 steps of Enduro (about 1 s): accelerate, steer left, right, left, accelerate. The
    detector finds the player's car in every frame, in the rows it can be in, and its column
    moves the way the car is steered; some frames but not most have a car level with it."""
    from envs import make_vec_env

    fire, rightfire, leftfire = 1, 7, 8  # Enduro's minimal action set
    plan = [fire] * 100 + [leftfire] * 40 + [rightfire] * 80 + [leftfire] * 40 + [fire] * 140
    env = make_vec_env("EnduroNoFrameskip-v4", 1, seed=3)
    try:
        env.reset()
        frames = np.stack([env.step(np.array([a])).obs[0, -1].copy() for a in plan])
    finally:
        env.close()
    players = [find_player(f) for f in frames]
    assert all(p is not None for p in players)
    tops, stops, cols = np.array(players).T
    assert tops.min() >= 54 and stops.max() <= 62 and 4 <= (stops - tops).min() <= (stops - tops).max() <= 6
    assert cols[139] < cols[99] - 5 and cols[219] > cols[139] + 5 and cols[259] < cols[219] - 5
    assert 0.0 < alongside_share(frames) < 0.5


@pytest.mark.parametrize("cars, gap", [
    ((), None),
    (((15, 57, 5, 8, 100),), 0),  # level
    (((20, 44, 3, 6, 100),), 11),  # ahead: rows 44-46, the player's top row 57
    (((20, 44, 3, 6, 100), (60, 50, 3, 7, 100)), 5),  # the nearer of two
    (((40, 50, 4, 8, 100),), 4),  # right in front of it
    (((20, 26, 2, 3, 100),), None),  # far up the road: a few pixels, not told from an edge
    (((34, 44, 1, 4, 100),), None),  # one row 4 wide: an edge's kink
])
def test_the_gap_to_the_nearest_car_ahead_in_rows(cars, gap):
    assert gap_ahead(enduro_frame(cars=cars)) == gap
    assert gap_ahead(with_road(enduro_frame(cars=cars))) == gap  # road edges change nothing


def test_nearness_falls_from_level_to_nothing_at_the_top_of_the_rows_searched():
    assert nearness(enduro_frame(cars=((15, 57, 5, 8, 100),))) == 1.0
    assert nearness(enduro_frame(cars=((20, 34, 1, 7, 100),))) == 0.0  # in row 34 (AHEAD_TOP)
    assert nearness(enduro_frame(cars=((20, 44, 3, 6, 100),))) == pytest.approx(1 - 11 / 23)
    assert nearness(enduro_frame()) == 0.0


def closing_clip(tops: list[int | None]) -> Clip:
    """A clip whose frames (the stack's first three, then one per step) show a car ahead with its
    top row at tops[i] (None: no car)."""
    frames = np.stack([enduro_frame(cars=() if t is None else ((20, t, 4, 8, 100),)) for t in tops])
    n = len(tops) - STACK + 1
    return Clip.pack(frames, np.zeros(n, np.int64), np.zeros(n, np.float32))


def test_a_clip_closing_in_on_a_car_is_preferred_where_counting_level_steps_ties():
    none = [None] * 28
    approach = [None] * 4 + list(range(36, 48)) + [48] * 12  # from nothing ahead to 6 rows off
    falls_back = approach[::-1]
    flicker = approach[:-1] + [None]  # missed in its last frame only
    assert clip_closing(closing_clip(none)) == 0.0
    # the player's top row is 57, so a gap runs from 0 (level) to 57 - AHEAD_TOP = 23 rows
    assert clip_closing(closing_clip(approach)) == pytest.approx(1 - 6 / 23)
    assert clip_closing(closing_clip(falls_back)) == pytest.approx(-(1 - 6 / 23))
    assert clip_closing(closing_clip(flicker)) == clip_closing(closing_clip(approach))
    counted, shaped = AlongsideTeacher(), make_teacher("alongside_shaped")
    pairs = [(approach, none), (none, falls_back), (approach, falls_back)]
    for better, worse in (tuple(map(closing_clip, pair)) for pair in pairs):
        assert counted.label(better, worse) == 0.5
        assert shaped.label(better, worse) == 1.0 and shaped.label(worse, better) == 0.0
    # level steps count too: 8 at the end of a clip that starts level outweigh closing in from
    # nothing to 6 rows off with closing=10, not with closing=20
    level = clip([False] * 17 + [True] * 8)
    assert shaped.label(level, closing_clip(approach)) == 1.0
    assert ShapedAlongsideTeacher(closing=20).label(level, closing_clip(approach)) == 0.0


def test_the_near_teacher_sums_each_steps_level_and_nearness_to_a_car():
    """`alongside_near`: a clip is worth its level steps plus `near` times the nearness of each
    step's frame, so sitting close behind a car beats none seen, and a step level with a car is
    worth 1 + near."""
    none, far, close = [None] * 28, [36] * 28, [48] * 28  # a car 18 and 6 rows ahead, or none
    near = make_teacher("alongside_near")
    assert near.near == 1.0 and make_teacher("alongside_near:near=3").near == 3.0
    with pytest.raises(ValueError, match="near must be >= 0"):
        make_teacher("alongside_near:near=-1")
    worth = near.returns(*map(closing_clip, (close, far)))
    # the player's top row is 57: gaps of 6 and 18 rows of 23, over 25 steps
    assert worth == pytest.approx((25 * (1 - 6 / 23), 25 * (1 - 18 / 23)))
    assert near.label(closing_clip(close), closing_clip(far)) == 1.0
    assert near.label(closing_clip(none), closing_clip(far)) == 0.0
    assert AlongsideTeacher().label(closing_clip(close), closing_clip(none)) == 0.5
    level = clip([True] * 5 + [False] * 20)
    assert near.returns(level, level)[0] == pytest.approx(5 * 2.0)
    # per step, as --teacher_reward trains on it: the newest frame of each observation
    obs = np.stack([closing_clip(close).frames()[:STACK], closing_clip(none).frames()[:STACK]])
    np.testing.assert_allclose(near.step_scores(obs), [1 - 6 / 23, 0.0])


def test_the_hold_teacher_credits_a_car_that_stays_in_its_row_over_one_that_moves():
    """`alongside_hold`: each step is worth the near teacher's, plus `hold` times its nearness
    times how nearly the nearest car keeps its row from the frame before (1 in place, 0 at
    HOLD_ROWS rows or more)."""
    assert HOLD_ROWS == 3
    assert holding(50, 50) == 1.0 and holding(50, 49) == pytest.approx(2 / 3)
    assert holding(50, 53) == 0.0 and holding(None, 50) == holding(50, None) == 0.0
    # a car 4 rows tall with its top in row 44: its lowest row 47, 10 rows above the player's top
    assert nearest_car(enduro_frame(cars=((20, 44, 4, 8, 100),))) == (pytest.approx(1 - 10 / 23), 47)
    assert nearest_car(enduro_frame()) == (0.0, None)

    hold = make_teacher("alongside_hold")
    assert hold.hold == 1.0 and make_teacher("alongside_hold:hold=2").hold == 2.0
    with pytest.raises(ValueError, match="hold must be >= 0"):
        make_teacher("alongside_hold:hold=-1")
    held = closing_clip([44] * 28)
    jumpy = closing_clip([42, 46] * 14)  # as near on average, but 4 rows from one frame to the next
    assert hold.returns(held, held)[0] == pytest.approx(25 * 2 * (1 - 10 / 23))
    near = make_teacher("alongside_near")
    assert hold.returns(jumpy, jumpy)[0] == pytest.approx(near.returns(jumpy, jumpy)[0])
    assert near.returns(held, held)[0] == pytest.approx(25 * (1 - 10 / 23))
    assert hold.label(held, jumpy) == 1.0
    # a level step stays worth 1 + near, plus the hold term when the car holds its row
    level = clip([True] * 25)
    assert hold.returns(level, level)[0] == pytest.approx(25 * 3.0)
    # per step, from the newest frame of each observation and the one before
    obs = np.stack([held.frames()[:STACK], jumpy.frames()[:STACK]])
    np.testing.assert_allclose(hold.step_scores(obs), [2 * (1 - 10 / 23), 1 - 8 / 23])


def test_teacher_alongside_shaped_is_a_command_line_choice_for_enduro(tmp_path):
    from launch import cli

    assert make_teacher("alongside_shaped:closing=4").closing == 4.0
    assert make_teacher("alongside_shaped").closing == 10.0
    with pytest.raises(ValueError, match="closing must be >= 0"):
        make_teacher("alongside_shaped:closing=-1")
    argv = ["train_policy_with_preferences", "PongNoFrameskip-v4", "--synthetic_prefs",
            "--log_dir", str(tmp_path / "never"), "--teacher", "alongside_shaped:closing=4"]
    with pytest.raises(cli.UsageError, match="alongside_shaped reads Enduro's frames"):
        cli.parse_args(argv)


def test_teacher_reward_is_the_teachers_step_score_normalised_as_r_hat_is(tmp_path):
    """`--teacher_reward`: A2C's reward is the counting teacher's level steps, at mean 0 and std
    --reward_std over the steps seen; the flag is refused without an Enduro teacher."""
    from launch import cli
    from reward_predictor.entry_points import teacher_reward

    beside, alone = enduro_frame(cars=((62, 57, 5, 8, 100),)), enduro_frame()
    obs = np.stack([np.stack([f] * STACK) for f in [beside, alone, alone, beside] * 8])
    reward = teacher_reward("alongside", 0.05)
    r = reward(obs, np.zeros(len(obs), np.int64))
    assert r.dtype == np.float32 and r.shape == (32,)
    # level: half a step above the mean of 0.5, over the std of 0.5 (and the variance's floor)
    np.testing.assert_allclose(r[::4], 0.05 * 0.5 / math.sqrt(0.25 + 0.01), rtol=1e-5)
    np.testing.assert_allclose(r[1::4], -0.05 * 0.5 / math.sqrt(0.25 + 0.01), rtol=1e-5)
    # the statistics run on: 32 more steps, none level, bring the mean to 0.25, the variance
    # to 0.1875
    r = reward(np.stack([np.stack([alone] * STACK)] * 32), np.zeros(32, np.int64))
    np.testing.assert_allclose(r, -0.05 * 0.25 / math.sqrt(0.1875 + 0.01), rtol=1e-5)
    argv = ["train_policy_with_preferences", "EnduroNoFrameskip-v4", "--synthetic_prefs",
            "--teacher_reward", "--log_dir", str(tmp_path / "never")]
    assert cli.parse_args([*argv, "--teacher", "alongside_shaped"]).settings.teacher_reward
    shaped = [*argv, "--teacher", "alongside_shaped"]
    for refused in (argv,  # the default teacher, the game's reward, scores no step
                    [*argv, "--teacher", "oracle"],
                    [a for a in shaped if a != "--synthetic_prefs"],
                    ["gather_initial_prefs", *shaped[1:]],
                    [*shaped, "--load_prefs_dir", str(tmp_path)]):
        with pytest.raises(cli.UsageError, match="--teacher_reward trains a policy on"):
            cli.parse_args(refused)


def test_a_run_on_the_teachers_reward_trains_a2c_alone_with_no_labels(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    d = tmp_path / "run"
    r = subprocess.run(
        [sys.executable, "run.py", "train_policy_with_preferences", "EnduroNoFrameskip-v4",
         "--synthetic_prefs", "--teacher", "alongside_shaped", "--teacher_reward", "--n_envs", "2",
         "--million_timesteps", "0.001", "--log_dir", str(d)],
        cwd=Path(__file__).resolve().parent.parent, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "run finished" in r.stderr and "labels" not in r.stderr.split("run finished")[1]
    assert list((d / "policy").glob("policy-*.pt")) and not (d / "prefs.sqlite").exists()
    assert not (d / "reward_predictor").exists()


def test_an_enduro_runs_episodes_record_their_share_of_level_steps(tmp_path):
    """The level-share observer reads one step in `every` of each env, sets each ended
    episode's share on its record, and the agent's side writes it to TensorBoard."""
    from types import SimpleNamespace

    from a2c.loop_side import LoopSide
    from envs.vec_env import EpisodeRecord
    from experiments.runlog import scalars
    from pref_interface.labellers.alongside import LevelShare

    beside, alone = enduro_frame(cars=((62, 57, 5, 8, 100),)), enduro_frame()
    stack = {True: np.stack([beside] * STACK), False: np.stack([alone] * STACK)}
    # two envs, eight steps: env 0 level on steps 0-3, env 1 on steps 0 and 2; env 0's episode
    # ends at step 5, env 1's at step 7; the observer reads steps 0, 2, 4 and 6
    level = [[t < 4, t in (0, 2)] for t in range(8)]
    obs = np.stack([np.stack([stack[a], stack[b]]) for a, b in level + [[False, False]]])
    dones = np.zeros((8, 2), bool)
    dones[5, 0] = dones[7, 1] = True
    finished = [EpisodeRecord(0, 0.0, 6), EpisodeRecord(1, 0.0, 8)]
    LevelShare(2, every=2)(SimpleNamespace(obs=obs, dones=dones, finished=finished))
    assert [ep.alongside_share for ep in finished] == [2 / 3, 2 / 4]
    side = LoopSide(tmp_path, every_s=0.0)
    side.record(SimpleNamespace(finished=finished, rewards=np.zeros((8, 2))), 16)
    side.close(16)
    assert list(scalars(tmp_path, "charts/alongside_share")[:, 2]) == pytest.approx([2 / 3, 0.5])


# ---- scripted teachers (B-Pref, Lee et al. 2021) -----------------------------------------------

def random_pairs(rng: np.random.Generator, n: int, steps: int = 1, scale: float = 2.0):
    return [(reward_clip(rng.normal(0, scale, steps)), reward_clip(rng.normal(0, scale, steps)))
            for _ in range(n)]


def test_boltzmann_teacher_agrees_as_often_as_the_sigmoid_says():
    teacher = BoltzmannTeacher(beta=1.0, rng=0)
    assert isinstance(teacher, Labeller) and teacher.source == "synthetic"
    n = 3000
    for diff in (0.5, 1.0, 2.0):
        left, right = reward_clip([diff]), reward_clip([0.0])
        agree = np.mean([teacher.label(left, right) for _ in range(n)])
        p = 1 / (1 + math.exp(-diff))
        assert agree == pytest.approx(p, abs=4 * math.sqrt(p * (1 - p) / n))
    coin = BoltzmannTeacher(0.0, rng=1)  # beta 0: coin flips
    flips = [coin.label(reward_clip([5.0]), reward_clip([0.0])) for _ in range(2000)]
    assert np.mean(flips) == pytest.approx(0.5, abs=0.05)
    assert BoltzmannTeacher(float("inf"), rng=1).label(reward_clip([0.1]), reward_clip([0.0])) == 1.0


def test_mistake_teacher_flips_the_oracle_label_with_probability_eps():
    rng = np.random.default_rng(1)
    pairs = random_pairs(rng, 4000)
    oracle, teacher = OracleTeacher(), MistakeTeacher(eps=0.2, rng=2)
    flipped = np.mean([teacher.label(a, b) != oracle.label(a, b) for a, b in pairs])
    assert flipped == pytest.approx(0.2, abs=4 * math.sqrt(0.2 * 0.8 / 4000))
    # a tie stays one
    assert all(teacher.label(reward_clip([1.0]), reward_clip([1.0])) == 0.5 for _ in range(50))


def test_skip_teacher_skips_exactly_the_pairs_where_both_clips_are_poor():
    rng = np.random.default_rng(3)
    teacher, oracle = SkipTeacher(threshold=0.5), OracleTeacher()
    for a, b in random_pairs(rng, 500):
        both_low = a.true_return < 0.5 and b.true_return < 0.5
        got = teacher.label(a, b)
        assert (got is None) == both_low
        if not both_low:
            assert got == oracle.label(a, b)


def test_equal_teacher_ties_exactly_the_close_pairs():
    rng = np.random.default_rng(4)
    teacher, oracle = EqualTeacher(threshold=1.0), OracleTeacher()
    n_ties = 0
    for a, b in random_pairs(rng, 500):
        close = abs(a.true_return - b.true_return) < 1.0
        n_ties += close
        assert teacher.label(a, b) == (0.5 if close else oracle.label(a, b))
    assert 50 < n_ties < 450


def test_myopic_teacher_prefers_reward_late_in_the_clip():
    early, late = reward_clip([1.0, 0, 0, 0, 0]), reward_clip([0, 0, 0, 0, 1.0])
    assert OracleTeacher().label(early, late) == 0.5
    assert MyopicTeacher(gamma=0.9).label(early, late) == 0.0
    big_early = reward_clip([2.0, 0, 0, 0, 0])  # more reward, but long ago
    assert OracleTeacher().label(big_early, late) == 1.0
    assert MyopicTeacher(gamma=0.5).label(big_early, late) == 0.0  # 2 * 0.5^4 < 1
    assert teacher_return(reward_clip([1.0, 2.0, 3.0]), gamma=0.5) == pytest.approx(0.25 + 1.0 + 3.0)


def test_synthetic_teachers_penalise_episode_ends_inside_a_clip():
    """App. A: the synthetic oracle replaces episode ends by a penalty (except in Pong)."""
    dies = reward_clip([1.0, 1.0], dones=[False, True])
    idle = reward_clip([0.0, 0.0], dones=[False, False])
    assert OracleTeacher().label(dies, idle) == 1.0  # 0 disables the penalty (Pong)
    assert OracleTeacher(episode_end_penalty=5.0).label(dies, idle) == 0.0
    assert teacher_return(dies, episode_end_penalty=5.0) == pytest.approx(-3.0)
    assert teacher_return(reward_clip([1.0, 1.0]), episode_end_penalty=5.0) == 2.0  # dones None: no end
    for spec in ("mistake:eps=0", "skip:threshold=-100", "equal:threshold=0", "myopic:gamma=1",
                 "boltzmann:beta=inf"):
        assert make_teacher(spec, rng=0, episode_end_penalty=5.0).label(dies, idle) == 0.0, spec
    with pytest.raises(ValueError):
        OracleTeacher(episode_end_penalty=-1.0)


def test_teacher_spec_parser_builds_each_teacher_and_rejects_junk():
    cases = {"oracle": (OracleTeacher, None, None), "boltzmann:beta=2.5": (BoltzmannTeacher, "beta", 2.5),
             "mistake:eps=0.1": (MistakeTeacher, "eps", 0.1),
             "skip:threshold=0": (SkipTeacher, "threshold", 0.0),
             "equal:threshold=0.5": (EqualTeacher, "threshold", 0.5),
             "myopic:gamma=0.9": (MyopicTeacher, "gamma", 0.9), "mistake": (MistakeTeacher, "eps", 0.1)}
    for spec, (cls, attr, value) in cases.items():
        teacher = make_teacher(spec, rng=0)
        assert type(teacher) is cls and isinstance(teacher, Labeller), spec
        if attr:
            assert getattr(teacher, attr) == value
    a, b = random_pairs(np.random.default_rng(5), 1)[0]
    labels = [[make_teacher("boltzmann:beta=0.3", rng=7).label(a, b) for _ in range(20)] for _ in range(2)]
    assert labels[0] == labels[1]  # seeded: reproducible
    for junk in ("", "human", "oracle:beta=1", "mistake:eps=2", "mistake:eps=abc", "boltzmann:gamma=1",
                 "myopic:gamma=0", "equal:threshold=-1", "skip:threshold=nan", "mistake:eps"):
        with pytest.raises(ValueError) as e:
            make_teacher(junk)
        assert "\n" not in str(e.value) and "oracle, boltzmann" in str(e.value), junk


def test_the_scripted_follower_closes_in_beside_a_car_then_holds_its_speed():
    from experiments.alongside_teachers import _ACTIONS, Follower

    names = {i: n for n, i in _ACTIONS.items()}
    follower = Follower()
    # a car ahead, to the left: accelerate towards a point a car's width and more to its right
    assert names[follower(enduro_frame(player=60, cars=((30, 44, 3, 6, 100),)))] == "leftfire"
    assert names[follower(enduro_frame(player=47, cars=((30, 44, 3, 6, 100),)))] == "fire"
    # level, on its left: it drifts back (its rows go down) -> brake; then ahead -> accelerate
    follower = Follower()
    assert names[follower(enduro_frame(player=37, cars=((20, 56, 4, 8, 100),)))] == "noop"
    assert names[follower(enduro_frame(player=37, cars=((20, 57, 4, 8, 100),)))] == "down"
    assert names[follower(enduro_frame(player=37, cars=((20, 55, 4, 8, 100),)))] == "fire"
    # nothing ahead: accelerate
    assert names[Follower()(enduro_frame())] == "fire"


def test_the_teachers_experiment_prints_a_row_per_driver_and_draws_the_follower(capsys, tmp_path):
    from PIL import Image

    from experiments.alongside_teachers import main

    gif = tmp_path / "follower.gif"
    assert main(["--episodes", "1", "--steps", "60", "--pairs", "4", "--gif", str(gif),
                 "--gif_steps", "12"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    drivers = ["| random", "| fire", "| down", "| follower"]
    assert [r.split(" | ")[0] for r in rows[1:5] + rows[6:]] == drivers * 2
    # the level term per step is 0 or 1: its variance is p (1 - p), p the driver's level share
    for shares, terms in zip(rows[1:5], rows[6:]):
        p = float(shares.split(" | ")[1].rstrip("%")) / 100
        assert float(terms.split(" | ")[1].split(" / ")[0]) == pytest.approx(p * (1 - p), abs=2e-3)
        # the near teacher gives a level step 2 and any other step its nearness, 0 to 1; the
        # holding teacher adds at most the nearness again
        near, hold = map(float, shares.split(" | ")[2].split(" / "))
        assert 2 * p - 1e-3 <= near <= 1 + p + 1e-3 and near <= hold <= 2 * near + 1e-3
    with Image.open(gif) as drawn:
        assert drawn.n_frames == 12 and drawn.size == (84 * 3, 84 * 3)
    with pytest.raises(SystemExit):
        main(["--steps", "10"])


def test_mixed_drivers_take_their_action_with_its_probability(capsys):
    import numpy as np

    from experiments.alongside_teachers import _ACTIONS, driver_policy, main

    fast = {i for name, i in _ACTIONS.items() if name.endswith("fire")}
    assert len(fast) == 3
    frame = np.zeros((84, 84), np.uint8)
    for p in (0.0, 0.7, 1.0):
        act = driver_policy(f"accelerating:{p}", np.random.default_rng(0))
        share = np.mean([act(frame) in fast for _ in range(2000)])
        assert share == pytest.approx(p, abs=0.04)
    # a mix with the follower: with nothing ahead it accelerates, at random 1 time in 9
    blank = enduro_frame()
    for p in (0.0, 0.5, 1.0):
        act = driver_policy(f"following:{p}", np.random.default_rng(0))
        share = np.mean([act(blank) == _ACTIONS["fire"] for _ in range(2000)])
        assert share == pytest.approx(p + (1 - p) / 9, abs=0.04)
    assert main(["--accelerating", "0.5", "1", "--following", "1", "--episodes", "1",
                 "--steps", "60"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    assert [r.split(" | ")[0] for r in rows] == [
        "| accelerating", "| 0.50", "| 1.00", "| following", "| 1.00"]
    for row in rows[1:3] + rows[4:]:  # the near teacher gives a level step 2, the holding one more
        p = float(row.split(" | ")[1].rstrip("%")) / 100
        near, hold = map(float, row.split(" | ")[3].rstrip(" |").split(" / "))
        assert 2 * p - 1e-3 <= near <= hold
    for bad in (["--accelerating", "1.5"], ["--following", "-0.1"]):
        with pytest.raises(SystemExit):
            main(bad)


def test_a_saved_policy_drives_with_its_own_sampled_actions(tmp_path):
    import numpy as np
    import torch

    from a2c.checkpoint import save_policy_weights
    from a2c.policies import make_policy
    from clips.clip import STACK
    from experiments.alongside_teachers import _ACTIONS, driver_policy

    net = make_policy("atari", len(_ACTIONS))
    with torch.no_grad():  # a policy that always brakes, whatever it sees
        net.policy.weight.zero_()
        net.policy.bias.fill_(-50.0)
        net.policy.bias[_ACTIONS["down"]] = 50.0
    save_policy_weights(tmp_path / "brakes.pt", {"policy": net.state_dict(), "timesteps": 0})
    act = driver_policy(f"policy:{tmp_path / 'brakes.pt'}", np.random.default_rng(0))
    frames = np.random.default_rng(1).integers(0, 255, (6, 84, 84), dtype=np.uint8)
    act(frames[0])  # the first stack: black frames before the first, as the game's
    assert len(act.stack) == STACK and not np.any(act.stack[:-1]) and (act.stack[-1] == frames[0]).all()
    assert [act(f) for f in frames[1:]] == [_ACTIONS["down"]] * 5
    assert len(act.stack) == STACK and (act.stack[-1] == frames[-1]).all()
    # a run directory: its newest policy (an examples.ppo run's weights file)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "settings.json").write_text("{}")
    save_policy_weights(tmp_path / "run" / "ppo_policy.pt", {"policy": net.state_dict(),
                                                             "timesteps": 0})
    assert driver_policy(f"policy:{tmp_path / 'run'}", np.random.default_rng(0))(frames[0]) == (
        _ACTIONS["down"])


def test_the_score_teachers_ties_are_counted_per_driver(capsys):
    """experiments.score_ties: a pair is decided when its clips score differently; random play's
    first 400 steps of Enduro pass no car (every pair a tie), holding the accelerator does."""
    import numpy as np

    from experiments.score_ties import decided_share, main
    from tests.helpers import reward_clip

    rng = np.random.default_rng(0)
    assert decided_share([reward_clip([0.0] * 5)] * 3, 50, rng) == 0.0
    assert decided_share([reward_clip([0.0] * 5), reward_clip([0, 1, 0, 0, 0])], 50, rng) == 1.0
    # one scoring clip of three: a pair holds it in 2 of the 3 pairs
    three = [reward_clip([0.0] * 5), reward_clip([0.0] * 5), reward_clip([0, 0, -1, 0, 0])]
    assert abs(decided_share(three, 3000, rng) - 2 / 3) < 0.03
    assert main(["--drivers", "random", "fire", "--episodes", "1", "--steps", "400",
                 "--pairs", "100"]) == 0
    rows = [r.split(" | ") for r in capsys.readouterr().out.splitlines() if r.startswith("| ")]
    assert [r[0] for r in rows[1:]] == ["| random", "| fire"]
    assert rows[1][1:] == ["+0.0", "0.0%", "0.0% |"]
    assert float(rows[2][1]) > 0 and float(rows[2][3].rstrip("% |")) > 0
    from pathlib import Path

    pong = f"policy:{Path(__file__).parents[1] / 'models' / 'pong_prefs_seed3.pt'}"  # another game
    for bad in ("nobody", "accelerating:2", "policy:/no/such.pt", pong):  # said before any play
        with pytest.raises(SystemExit) as e:
            main(["--drivers", "random", bad, "--episodes", "1", "--steps", "60"])
        out, err = capsys.readouterr()
        assert e.value.code == 2 and err.count("\n") == 1 and "--drivers: " in err and not out


def test_score_ties_counts_what_decided_a_runs_stored_labels(tmp_path, capsys):
    """--runs: ties, labels a difference in score decided (and the last one's number), labels an
    episode end alone decided; a run without a store is one line before any row."""
    import numpy as np

    from clips.clip import Preference
    from experiments.score_ties import main
    from pref_interface.store import PreferenceStore
    from tests.helpers import reward_clip

    none, point = reward_clip([0.0] * 5), reward_clip([0, 1, 0, 0, 0])
    ended = reward_clip([0.0] * 5, dones=np.array([0, 0, 0, 0, 1], dtype=bool))
    with PreferenceStore(tmp_path / "run" / "prefs.sqlite") as store:
        for pref in (Preference(none, none, 0.5), Preference(point, none, 1.0),
                     Preference(none, ended, 1.0), Preference(none, point, 0.0),
                     Preference(ended, none, 0.5), Preference(none, ended, 1.0)):
            store.add(pref)
    assert main(["--runs", str(tmp_path / "run")]) == 0
    row = capsys.readouterr().out.splitlines()[-1]
    assert row == f"| {tmp_path / 'run'} | 6 | 2 | 2 (last: no. 4) | 2 | 0 |"
    with pytest.raises(SystemExit) as e:
        main(["--runs", str(tmp_path / "run"), str(tmp_path / "none")])
    out, err = capsys.readouterr()
    assert e.value.code == 2 and err.count("\n") == 1 and "does not exist" in err and not out
