"""The README is the user's manual: every flag `run.py --help` offers is documented there."""
import re
from pathlib import Path

from launch.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent


def test_every_run_py_flag_is_documented_in_the_readme():
    readme = (ROOT / "README.md").read_text()
    documented = set(re.findall(r"`(--[a-z0-9_]+)", readme))
    flags = {s for action in build_parser()._actions for s in action.option_strings
             if s.startswith("--") and s != "--help"}
    assert flags, "no flags found in run.py's parser"
    assert not flags - documented, sorted(flags - documented)


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


def test_the_readme_flag_tables_are_the_settings_own():
    """Flags, defaults and help come from launch/settings.py: the README shows its tables."""
    from launch.settings import flag_tables

    readme = (ROOT / "README.md").read_text()
    start = readme.index("checks). -->\n") + len("checks). -->\n")
    end = readme.index("<!-- end of the flag tables -->")
    assert readme[start:end] == flag_tables(), "run `python -m launch.settings` into the README"
