"""The reproduction report (docs/reproduction.md): its tables are what the committed records give,
and a record added to docs/run_records/ joins them."""
import numpy as np

from experiments import report
from experiments.runrecord import RunRecord

START = "/venv/bin/python run.py train_policy_with_preferences PongNoFrameskip-v4 --synthetic_prefs"


def test_the_committed_report_is_what_the_records_give():
    doc = report.DOC.read_text()
    assert report.render(doc) == doc, "run `python -m experiments.report` to write it anew"
    for name in report.BLOCKS:
        assert f"<!-- begin {name} -->" in doc and f"<!-- end {name} -->" in doc, name


def pong_record(records, name, seed, start, since, returns=(-21.0, -20.0, 19.0, 20.0),
                settings=None):
    steps = np.arange(1, len(returns) + 1) * 1e6
    RunRecord(name, seed, "PongNoFrameskip-v4", [start, "python run.py --resume x"],
              [f"{since}\tAMD EPYC, 2 cores, avx2\tpolicy on cpu, predictor on cpu"],
              float(steps[-1]), 3600.0, steps, np.array(returns), steps / 1e3, steps,
              steps / 1e3, settings).save(records / f"{name}.json")


def test_a_new_seeds_record_joins_the_pong_table_named_by_the_defaults_of_its_day(tmp_path):
    """The same command on different days ran different defaults: the rows say which; flags
    typed win over them; the runs are in the order they started."""
    newest = report.PONG_SINCE[0][0]
    pong_record(tmp_path, "pong_prefs_seed1", 1, f"{START} --seed 1", "2026-11-25T19:09:01Z")
    table = report.pong_prefs(tmp_path, None)
    assert "No run with today's defaults" in table
    pong_record(tmp_path, "pong_prefs_seed3", 3, f"{START} --seed 3", "2026-11-29T00:56:51Z")
    pong_record(tmp_path, "pong_prefs_paper", 4, f"{START} --seed 4 --lr_zero_million_timesteps 80 "
                "--no_revive_dead_policy", "2026-11-30T00:00:00Z")
    pong_record(tmp_path, "pong_prefs_seed7", 7, f"{START} --seed 7", f"{newest}:01Z")
    pong_record(tmp_path, "pong_prefs_no_warmup", 8, f"{START} --seed 8 "
                "--lr_warmup_million_timesteps 0", f"{newest}:02Z")
    pong_record(tmp_path, "pong_true_seed0", 0, "python run.py train_policy_with_original_rewards "
                "PongNoFrameskip-v4 --seed 0", "2026-11-26T04:11:09Z")
    table = report.pong_prefs(tmp_path, None)
    runs = [line.split("|")[1].strip() for line in table.splitlines()
            if line.startswith("| from") or line.startswith("| true")]
    assert runs[:5] == ["from preferences, constant lr",
                        "from preferences, lr to 0 at 6M, revives a dead policy",
                        "from preferences, lr to 0 at 80M",
                        "from preferences, lr warm-up 0.02M, lr to 0 at 6M, revives a dead policy",
                        "from preferences, lr to 0 at 6M, revives a dead policy"]
    assert "No run with today's defaults" not in table
    assert "| true reward, constant lr | 0 |" in table  # in the table of stretches
    assert "`python run.py train_policy_with_preferences PongNoFrameskip-v4 --synthetic_prefs " \
           "--seed 3`" in table


def test_a_run_is_named_by_its_saved_settings_and_counts_as_todays_by_them(tmp_path):
    """A record with settings.json is named by them whenever it started: one that typed today's
    defaults before they were the defaults counts as a run of them; one saved before the warm-up
    existed (no key) had none."""
    def saved(warmup):
        return {"lr_zero_million_timesteps": 6.0, "revive_dead_policy": True,
                **({} if warmup is None else {"lr_warmup_million_timesteps": warmup})}

    pong_record(tmp_path, "pong_prefs_seed5", 5, f"{START} --seed 5", "2026-12-02T10:30:56Z",
                settings=saved(None))
    assert "No run with today's defaults" in report.pong_prefs(tmp_path, None)
    pong_record(tmp_path, "pong_prefs_seed6", 6, f"{START} --seed 6 --lr_warmup_million_timesteps "
                "0.02", "2026-12-02T13:43:59Z", settings=saved(0.02))
    table = report.pong_prefs(tmp_path, None)
    assert "No run with today's defaults" not in table
    assert "| from preferences, lr to 0 at 6M, revives a dead policy | 5 |" in table
    assert "| from preferences, lr warm-up 0.02M, lr to 0 at 6M, revives a dead policy | 6 |" in table


def test_without_records_a_block_says_so_and_the_figures_come_from_records(tmp_path):
    doc = "".join(f"<!-- begin {n} -->\nold\n<!-- end {n} -->\n" for n in ("moving_dot", "enduro"))
    text = report.render(doc, records=tmp_path)
    assert text.count("is committed yet") == 2 and "old" not in text
    pong_record(tmp_path, "pong_prefs_seed3", 3, f"{START} --seed 3", "2026-11-29T00:56:51Z")
    pong_record(tmp_path, "pong_true_seed0", 0, "python run.py train_policy_with_original_rewards "
                "PongNoFrameskip-v4 --seed 0", "2026-11-26T04:11:09Z")
    figures = tmp_path / "figures"
    figures.mkdir()
    report.render("<!-- begin pong_prefs -->\n<!-- end pong_prefs -->\n", tmp_path, figures)
    assert (figures / "pong_seeds.png").stat().st_size > 0


def test_the_ablation_tables_give_each_seed_and_the_medians_of_those_that_reached_it():
    results = [{"setting": "baseline", "seed": 0, "reached": False},
               {"setting": "baseline", "seed": 1, "reached": True, "labels": 100.0,
                "steps": 2000.0, "wall_s": 60.0},
               {"setting": "baseline", "seed": 2, "reached": True, "labels": 300.0,
                "steps": 4000.0, "wall_s": 180.0}]
    table = report.ablation_table(results, {"baseline": [], "sorting": ["--queries", "sort"]}, 19.6)
    head, _, row = table.splitlines()  # a setting with no result has no row
    assert "labels at 19.6, seeds 0 / 1 / 2" in head
    assert row == "| baseline | - | 2/3 | not reached / 100 / 300 | 200 | 3,000 | 2.0 |"


def alongside_record(records, name, command, shares):
    steps = np.arange(1, len(shares) + 1) * 1e5
    RunRecord(name, 0, "EnduroNoFrameskip-v4", [command],
              ["2026-11-29T14:19:00Z\tAMD EPYC, 2 cores, avx2\tpolicy on cpu, predictor on cpu"],
              float(steps[-1]), 3600.0, steps, np.zeros(len(shares)), steps / 1e3, steps[:0],
              steps[:0], alongside_steps=steps, alongside_shares=np.asarray(shares)
              ).save(records / f"{name}.json")


def test_an_enduro_alongside_record_with_level_shares_gives_their_figure_and_best_and_last(tmp_path):
    """A run that recorded each episode's share of level steps keeps it in its record (saved and
    read back); the alongside table gives its best and last means of 10 episodes in place of the
    game's score, and the figure draws it. A run through examples.ppo is named by its learner
    and its flags, and its command is given as typed."""
    shares = np.linspace(0.1, 0.5, 20)
    alongside_record(tmp_path, "enduro_alongside_teacher_reward",
                     "/venv/bin/python run.py train_policy_with_preferences EnduroNoFrameskip-v4 "
                     "--synthetic_prefs --teacher alongside_shaped --teacher_reward", shares)
    back = RunRecord.load(tmp_path / "enduro_alongside_teacher_reward.json")
    np.testing.assert_allclose(back.alongside_shares, shares, atol=1e-4)
    alongside_record(tmp_path, "enduro_alongside_ppo", "/venv/bin/python /code/examples/ppo.py "
                     "EnduroNoFrameskip-v4 --synthetic_prefs --teacher alongside_hold "
                     "--demonstrations /root/runs/demos/f.npz --log_dir /root/runs/x",
                     [0.2] * 5 + [0.6] * 10 + [0.1] * 10)
    assert back.started_with[0] == "python run.py"
    figures = tmp_path / "figures"
    figures.mkdir()
    text = report.alongside(tmp_path, figures)
    assert (f"| {np.mean(shares[-10:]):.1%} at 2.00M | {np.mean(shares[-10:]):.1%} |" in text)
    ppo = next(line for line in text.splitlines() if "examples.ppo, " in line and line[0] == "|")
    assert "--teacher alongside_hold --demonstrations ~/runs/demos/f.npz" in ppo
    assert ppo.endswith("| 60.0% at 1.50M | 10.0% |")
    assert ("`python -m examples.ppo EnduroNoFrameskip-v4 --synthetic_prefs --teacher "
            "alongside_hold --demonstrations ~/runs/demos/f.npz --log_dir ~/runs/x`") in text
    assert (figures / "enduro_alongside_share.png").stat().st_size > 0
