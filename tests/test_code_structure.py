"""benchmarks.code_structure on a small tree made here: it finds the planted cycles, the imports that
run back up, the longest function and the places a setting is named."""
from pathlib import Path

from benchmarks.code_structure import ALIASES, measure, report

TREE = {
    "pkg/__init__.py": "",
    "pkg/a.py": "from pkg import b\nTHING = 1\n",
    "pkg/b.py": "import pkg.a\n",
    "pkg/c.py": "def f():\n    from pkg import d\n    return d\n",
    "pkg/d.py": "import pkg.c\n",
    "pkg/sub/__init__.py": "",
    "pkg/sub/x.py": "from pkg.a import THING\nfrom pkg.sub import y\n",
    "pkg/sub/y.py": "",
    "other/__init__.py": "def g():\n    import launch.main\n" + "    x = 1\n" * 60 + "    return 0\n",
    "launch/__init__.py": "",
    "launch/main.py": "import other\n",
    "run.py": "import launch.main\n",
    "knobs.py": ('"""oversampling and n_members, in a docstring."""\n'
                 "oversampling = 2  # oversample, in a comment\n"
                 "n_members = oversampling\n"
                 "FLAGS = ['--query-selection', 'query_selection']\n"),
    "tests/test_knobs.py": "oversampling = 1\n",
    "docs/conf.py": "oversampling = 1\n",
}


def test_structure_of_a_small_tree(tmp_path: Path):
    for rel, text in TREE.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    r = measure(tmp_path, list(ALIASES), 3)

    assert r["packages"]["pkg"] == {"modules": 8, "lines": 9}
    assert r["packages"]["pkg.sub"] == {"modules": 3, "lines": 2}
    assert r["module_cycles"]["module_level"] == [["pkg.a", "pkg.b"]]
    assert r["module_cycles"]["all"] == [["launch.main", "other"], ["pkg.a", "pkg.b"], ["pkg.c", "pkg.d"]]
    assert r["package_circles"] == {"module_level": [], "all": [["launch", "other"]]}
    arrows = {(e["from"], e["to"]) for e in r["arrows"]}
    assert arrows == {("launch", "other"), ("other", "launch"), ("run.py", "launch")}
    assert r["sub_arrows"]["pkg"] == [{"from": "pkg.sub", "to": "pkg", "imports": 1}]
    assert [(b["file"], b["dst"], b["top"], b["why"]) for b in r["back_up"]] == [
        ("other/__init__.py", "launch.main", False, "wiring"),
        ("pkg/sub/x.py", "pkg.a", True, "ancestor")]

    assert r["functions"]["longest"][0] == {"where": "other/__init__.py:g", "line": 1, "lines": 63}
    assert (r["functions"]["over_50"], r["functions"]["over_80"]) == (1, 0)

    s = r["settings"]
    assert (s["oversampling"]["places"], s["oversampling"]["matches"]) == (2, 2)
    assert s["oversampling"]["files"] == {"knobs.py": 2}
    assert s["ensemble_size"]["names"] == {"n_members": 1}
    assert s["query_selection"]["names"] == {"query-selection": 1, "query_selection": 1}
    assert s["query_selection"]["places"] == 1
    assert "Module cycles, module-level imports: 1" in report(r, "tmp")
