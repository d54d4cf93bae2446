"""The README and docs/flags.md are the manual: they show the settings as run.py applies them."""
import argparse
import re
from pathlib import Path

from launch.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent


def test_every_run_py_flag_is_in_the_flag_tables_with_the_settings_own_default_and_help():
    """docs/flags.md is `python -m launch.settings`'s output: made from the one home of every
    setting, and every flag of the parser (made from the same place) is in it with its --help."""
    from launch.settings import with_flag_tables

    doc = (ROOT / "docs" / "flags.md").read_text()
    assert doc == with_flag_tables(doc), "run `python -m launch.settings` to write them anew"
    documented = set(re.findall(r"`(--[a-z0-9_]+)", doc))
    actions = [a for a in build_parser()._actions  # the flags, not the positionals, nor a
               if a.option_strings not in ([], ["-h", "--help"])  # renamed flag's old name
               and a.help != argparse.SUPPRESS]
    flags = {s for action in actions for s in action.option_strings if s.startswith("--")}
    assert flags and not flags - documented, sorted(flags - documented)
    # each flag's --help text is in its table row, an off switch's beside its flag's
    meaning = {flag: cells[2] for cells in (line.split(" | ") for line in doc.splitlines()
                                            if line.startswith("| `--"))
               for flag in re.findall(r"`(--[a-z0-9_]+)`", cells[0])}
    for action in actions:
        text = action.help.replace("%%", "%").replace("|", "/")
        assert text in meaning[action.option_strings[0]], action.option_strings[0]


def test_the_readme_lists_each_environments_settings_as_run_py_applies_them():
    from launch.env_settings import env_settings

    readme = (ROOT / "README.md").read_text()
    for env_id, name in (("MovingDotNoFrameskip-v0", "MovingDot"), ("PongNoFrameskip-v4", "Pong"),
                         ("BreakoutNoFrameskip-v4", "other Atari games")):
        row = re.search(rf"^\| {name} \| `([^`]*)` \|$", readme, re.M)
        assert row, f"no settings row for {name}"
        words, listed = row.group(1).split(), {}
        for k, word in enumerate(words):
            if word.startswith("--"):
                value = words[k + 1] if k + 1 < len(words) and not words[k + 1].startswith("--") \
                    else True
                listed[word[2:]] = value
        expected = env_settings(env_id)
        assert set(listed) == set(expected), name
        for flag, value in expected.items():
            assert listed[flag] is True if value is True else (
                type(value)(listed[flag]) == value), (name, flag)


def test_a_mode_that_never_updates_the_policy_names_a2cs_update_settings_unused():
    from launch.settings import unused_settings

    given = ["lr", "ent_coef", "n_envs", "ensemble_size", "synthetic_prefs"]
    assert unused_settings("gather_initial_prefs", "atari", given) == ["lr", "ent_coef"]
    assert unused_settings("pretrain_reward_predictor", "atari", given) == ["lr", "ent_coef",
                                                                           "n_envs"]
    assert unused_settings("train_policy_with_preferences", "atari", given) == []
    assert unused_settings("train_policy_with_original_rewards", "atari", given) == [
        "ensemble_size", "synthetic_prefs"]


def test_a_flag_given_without_what_it_works_with_is_named():
    from launch.settings import Settings, idle_settings

    names = ["overlap", "web_port", "demonstration_share", "clip_player", "lr"]
    alone = Settings(mode="train_policy_with_preferences", env_id="PongNoFrameskip-v4",
                     synthetic_prefs=True)
    assert idle_settings(alone, names) == [
        "--overlap does nothing without two or more --labellers",
        "--web_port does nothing without the labelling page (--clip_player web or --labellers)",
        "--demonstration_share does nothing without --demonstrations",
        "--clip_player does nothing with --synthetic_prefs (nobody watches)"]
    team = Settings(mode="train_policy_with_preferences", env_id="PongNoFrameskip-v4",
                    labellers="ann,bob", demonstrations="d.npz")
    assert idle_settings(team, names) == []
    one = Settings(mode="train_policy_with_preferences", env_id="PongNoFrameskip-v4",
                   labellers="ann")  # a second copy of a pair would have nobody to answer it
    assert idle_settings(one, ["overlap"]) == ["--overlap does nothing without two or more --labellers"]
