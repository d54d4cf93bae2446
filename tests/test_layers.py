"""The code's layers, read from its imports: the paper's parts (a2c, clips, reward_predictor,
pref_interface, envs) and the shared runtime below them never import the launcher above them,
the runtime imports none of the parts, and no module imports itself round a circle."""
import ast
from pathlib import Path

from benchmarks.code_structure import strongly_connected as cycles
from launch.names import PACKAGES

ROOT = Path(__file__).resolve().parent.parent
LOWER = set(PACKAGES) - {"launch"}  # below launch


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """Each of our modules and the modules of ours it imports, anywhere in it (in functions and
    under TYPE_CHECKING too: a reader follows those as well)."""
    modules = {_module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                # `from pkg import mod` imports pkg.mod when that is a module of ours
                targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules
                           else node.module for a in node.names]
            else:
                continue
            deps |= {t for t in targets if t in modules and t != name}
        graph[name] = deps
    return graph


def test_no_module_imports_itself_round_a_circle():
    assert cycles(import_graph()) == []


def test_the_parts_and_the_runtime_never_import_the_launcher():
    up = sorted(f"{m} -> {d}" for m, deps in import_graph().items() if m.split(".")[0] in LOWER
                for d in deps if d.split(".")[0] == "launch")
    assert up == []


def test_the_runtime_imports_none_of_the_parts():
    graph = import_graph()
    up = sorted(f"{m} -> {d}" for m, deps in graph.items() if m.startswith("runtime")
                for d in deps if d.split(".")[0] != "runtime")
    assert up == []


def test_a_circle_is_found_when_there_is_one():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
