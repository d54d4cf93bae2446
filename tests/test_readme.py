"""The README and docs/flags.md are the manual: they show the settings as run.py applies them."""
import re
from pathlib import Path

from launch.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent


def test_every_run_py_flag_is_in_the_flag_tables_with_the_settings_own_default_and_help():
    """docs/flags.md is `python -m launch.settings`'s output: made from the one home of every
    setting, and every flag of the parser (made from the same place) is in it."""
    from launch.settings import with_flag_tables

    doc = (ROOT / "docs" / "flags.md").read_text()
    assert doc == with_flag_tables(doc), "run `python -m launch.settings` to write them anew"
    documented = set(re.findall(r"`(--[a-z0-9_]+)", doc))
    flags = {s for action in build_parser()._actions for s in action.option_strings
             if s.startswith("--") and s != "--help"}
    assert flags and not flags - documented, sorted(flags - documented)


def test_the_readme_lists_each_environments_settings_as_run_py_applies_them():
    from launch.env_settings import ENV_SETTINGS

    readme = (ROOT / "README.md").read_text()
    for env_id, name in (("MovingDotNoFrameskip-v0", "MovingDot"), ("PongNoFrameskip-v4", "Pong")):
        row = re.search(rf"^\| {name} \| `([^`]*)` \|$", readme, re.M)
        assert row, f"no settings row for {name}"
        words, listed = row.group(1).split(), {}
        for k, word in enumerate(words):
            if word.startswith("--"):
                value = words[k + 1] if k + 1 < len(words) and not words[k + 1].startswith("--") \
                    else True
                listed[word[2:]] = value
        expected = ENV_SETTINGS[env_id]
        assert set(listed) == set(expected), name
        for flag, value in expected.items():
            assert listed[flag] is True if value is True else (
                type(value)(listed[flag]) == value), (name, flag)
