"""The README is the user's manual: every flag `run.py --help` offers is documented there."""
import re
from pathlib import Path

from run import build_parser

ROOT = Path(__file__).resolve().parent.parent


def test_every_run_py_flag_is_documented_in_the_readme():
    readme = (ROOT / "README.md").read_text()
    documented = set(re.findall(r"`(--[a-z0-9_]+)", readme))
    flags = {s for action in build_parser()._actions for s in action.option_strings
             if s.startswith("--") and s != "--help"}
    assert flags, "no flags found in run.py's parser"
    assert not flags - documented, sorted(flags - documented)
