"""The checkout is a package: its imports declared, no sys.path edits, the linter clean."""
from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OWN = {"a2c", "clips", "envs", "launch", "pref_interface", "reward_predictor", "runtime", "experiments",
       "benchmarks", "examples", "tests", "run", "run_checkpoint", "show_prefs", "demonstrate", "conftest"}
DISTRIBUTION = {"PIL": "pillow", "ale_py": "ale-py", "stable_baselines3": "stable-baselines3"}


def sources() -> list[Path]:
    return [p for p in ROOT.rglob("*.py") if not {".venv", "runs"} & set(p.relative_to(ROOT).parts)]


def imported_libraries() -> set[str]:
    """The distributions the checkout's code imports (its own packages and the stdlib left out)."""
    found = set()
    for path in sources():
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0
                     and node.module else [])
            for name in names:
                top = name.split(".")[0]
                if top not in OWN and top not in sys.stdlib_module_names:
                    found.add(DISTRIBUTION.get(top, top))
    return found


def bare(requirement: str) -> str:
    """'ray[tune]==2.60.0' -> 'ray'."""
    return re.split(r"[\[=<>~ ]", requirement, maxsplit=1)[0].lower()


def test_every_imported_library_is_declared_in_the_pipfile_and_pyproject():
    pipfile = tomllib.loads((ROOT / "Pipfile").read_text())
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pip_main = {bare(n) for n in pipfile["packages"]} - {"drlhp"}
    pip_dev = {bare(n) for n in pipfile["dev-packages"]}
    assert {bare(r) for r in project["dependencies"]} == pip_main
    assert {bare(r) for r in project["optional-dependencies"]["dev"]} == pip_dev
    missing = imported_libraries() - pip_main - pip_dev
    assert not missing, f"imported but not declared: {sorted(missing)}"


def test_no_script_edits_sys_path():
    """Scripts run as `python -m` from the checkout, or import the installed (editable) package.
    bench_trainer_step may put another checkout first: comparing two versions is its job."""
    edits = [str(p.relative_to(ROOT)) for p in sources()
             if "sys.path.insert" in p.read_text() and p.name != "bench_trainer_step.py"
             and p.parent.name != "tests"]
    assert edits == []


def test_a_package_that_takes_one_of_our_names_is_refused_in_one_line(tmp_path):
    (tmp_path / "envs").mkdir()
    (tmp_path / "envs" / "__init__.py").write_text("")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", "import launch.preference_env"], cwd=tmp_path,
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert re.search(r"ImportError: these packages are not this checkout's .*envs \(", out.stderr)


def test_the_tree_passes_the_linter():
    ruff = Path(sys.executable).with_name("ruff")
    out = subprocess.run([str(ruff), "check", "--output-format", "concise", str(ROOT)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
