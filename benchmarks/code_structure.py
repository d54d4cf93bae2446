"""The code's structure, read statically from its source, in figures that compare before and after.

    .venv/bin/python -m benchmarks.code_structure                 # the working tree
    .venv/bin/python -m benchmarks.code_structure --rev a7175ad   # a commit, taken by `git archive`
    .venv/bin/python -m benchmarks.code_structure --json out.json --top 10

Nothing is imported or run: every figure comes from `ast` and `tokenize` on the .py files.

What is read. The project's packages are the directories at the root of the tree that hold an
__init__.py, less tests, docs and hidden or virtual-env directories; their subpackages are the
directories inside them that hold an __init__.py. The .py files at the root (run.py and the other
scripts) are read too, each as a node of its own named after the file (`run.py`). tests/ is left out
of every figure.

1. Packages: for each package and subpackage, its modules (.py files, __init__.py included) and
   their physical lines, counting everything below it (a package's figure includes its
   subpackages').

2. Import arrows. Each `import a.b` and `from a.b import c` (relative ones resolved) that names a
   module of the project gives an import of the module named: `a.b.c` when that is a module of
   ours, otherwise `a.b`. Importing a module does not count as importing its parent packages'
   __init__. An import runs at module level unless it sits in a function body; imports under
   `if TYPE_CHECKING:` never run and are counted with the function-level ones.
   - arrows: distinct edges P -> R between top-level packages (and root scripts) where some module
     of P imports some module of R, from any import; the figure in brackets is the number of
     import statements behind it. For a top-level package with subpackages the same is given among
     its own parts, each module counting for the deepest package that holds it.
   - package circles: strongly connected groups of more than one top-level package, once over the
     module-level imports alone and once over all imports.
   - module cycles: strongly connected groups of more than one module, likewise once over the
     module-level imports alone and once over all imports (in functions and under TYPE_CHECKING).
   - imports that run back up: an import, at any level, (a) from a module in a subpackage
     (P.Q, at any depth) of a module that lies directly in one of its ancestor packages (P's
     __init__ or P.x), or (b) of any launch module (the top-level wiring) from anywhere but
     launch, the root's run.py, experiments and benchmarks (tests are not read).

3. Functions: every def and async def, nested ones and methods included, named by file and
   qualified name (Class.method, outer.inner). Its lines run from the `def` line to its last
   line (decorators left out, a nested function's lines counted in its outer function too).
   The top N by lines, and how many have more than 50 and more than 80 lines.

4. Settings: for each setting, its names (ALIASES below) matched as `\\bname\\b` in the tokens of
   code, that is names and strings, not comments and not docstrings, in every .py file outside
   tests (this file left out, since it lists the names). `places` are distinct file:line pairs
   with at least one match, `matches` every match. The names seen are the matched words widened to
   the run of letters, digits, `_` and `-` around them (so "--query-selection" shows as
   query-selection), leading dashes dropped.
"""
from __future__ import annotations

import ast
import io
import json
import re
import subprocess
import sys
import tempfile
import tokenize
from collections import Counter, defaultdict
from pathlib import Path

from runtime.script_args import ScriptParser

ALIASES = {
    "oversampling": ["oversampling", "oversample"],
    "ensemble_size": ["ensemble_size", "n_members"],
    "query_selection": ["query_selection", "selection"],
}
EXCLUDED_DIRS = {"tests", "docs", ".venv", "venv", "runs", "build", "dist", "node_modules"}
WIRING = "launch"
WIRING_USERS = {"launch", "run.py", "experiments", "benchmarks", "tests"}
THIS_FILE = "benchmarks/code_structure.py"
WIDTH = 110


# ---------------------------------------------------------------------------------------- the tree

def read_tree(root: Path) -> dict[str, dict]:
    """Every module read: dotted name -> {path (relative, posix), package, node, source}."""
    modules: dict[str, dict] = {}
    for path in sorted(root.glob("*.py")):
        modules[path.stem] = {"path": path.name, "package": "", "node": path.name,
                              "source": path.read_text(encoding="utf-8", errors="replace")}
    for top in sorted(p for p in root.iterdir() if p.is_dir()):
        if top.name in EXCLUDED_DIRS or top.name.startswith(".") or not (top / "__init__.py").is_file():
            continue
        for path in sorted(top.rglob("*.py")):
            rel = path.relative_to(root)
            dirs = rel.parts[:-1]
            # a file counts only when every directory down to it is a package
            if not all((root.joinpath(*dirs[:i + 1]) / "__init__.py").is_file() for i in range(len(dirs))):
                continue
            package = ".".join(dirs)
            name = package if path.name == "__init__.py" else f"{package}.{path.stem}"
            modules[name] = {"path": rel.as_posix(), "package": package, "node": dirs[0],
                             "source": path.read_text(encoding="utf-8", errors="replace")}
    return modules


def packages(modules: dict[str, dict]) -> dict[str, dict]:
    """Package -> modules and lines below it."""
    out: dict[str, dict] = {}
    for m in modules.values():
        if not m["package"]:
            continue
        parts = m["package"].split(".")
        for i in range(len(parts)):
            p = out.setdefault(".".join(parts[:i + 1]), {"modules": 0, "lines": 0})
            p["modules"] += 1
            p["lines"] += len(m["source"].splitlines())
    return dict(sorted(out.items()))


# ----------------------------------------------------------------------------------------- imports

def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _import_nodes(tree: ast.AST):
    """(node, runs at module level) for every import statement."""
    def walk(node: ast.AST, top: bool):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child, top
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                yield from walk(child, False)
            elif isinstance(child, ast.If) and _is_type_checking(child.test):
                for sub in child.body:
                    yield from walk(ast.Module(body=[sub], type_ignores=[]), False)
                for sub in child.orelse:
                    yield from walk(ast.Module(body=[sub], type_ignores=[]), top)
            else:
                yield from walk(child, top)
    yield from walk(tree, True)


def _resolve(name: str, modules: dict[str, dict]) -> str | None:
    """The longest prefix of a dotted name that is a module of ours."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        if ".".join(parts[:i]) in modules:
            return ".".join(parts[:i])
    return None


def imports(modules: dict[str, dict]) -> list[dict]:
    """Every import of a module of ours: {src, dst, line, top}."""
    out = []
    for name, m in modules.items():
        try:
            tree = ast.parse(m["source"])
        except SyntaxError:
            continue
        m["tree"] = tree
        for node, top in _import_nodes(tree):
            targets = []
            if isinstance(node, ast.Import):
                targets = [_resolve(a.name, modules) for a in node.names]
            else:
                base = node.module or ""
                if node.level:
                    pkg = m["package"].split(".") if m["package"] else []
                    pkg = pkg[:len(pkg) - (node.level - 1)] if node.level > 1 else pkg
                    base = ".".join(pkg + ([base] if base else []))
                for a in node.names:
                    full = f"{base}.{a.name}" if base else a.name
                    targets.append(full if full in modules else _resolve(base, modules) if base else None)
            for dst in dict.fromkeys(t for t in targets if t and t != name):
                out.append({"src": name, "dst": dst, "line": node.lineno, "top": top})
    return out


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Groups of more than one node that reach each other (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    nodes = sorted(set(graph) | {w for ws in graph.values() for w in ws})
    for start in nodes:
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    group = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        group.append(w)
                        if w == v:
                            break
                    if len(group) > 1:
                        out.append(sorted(group))
    return sorted(out)


def _edges(imps: list[dict], key) -> dict[tuple[str, str], int]:
    edges: Counter = Counter()
    for i in imps:
        a, b = key(i["src"]), key(i["dst"])
        if a is not None and b is not None and a != b:
            edges[(a, b)] += 1
    return dict(sorted(edges.items()))


def _graph(edges) -> dict[str, set[str]]:
    g: dict[str, set[str]] = defaultdict(set)
    for a, b in edges:
        g[a].add(b)
    return g


def back_up(modules: dict[str, dict], imps: list[dict]) -> list[dict]:
    out = []
    for i in imps:
        src, dst = modules[i["src"]], modules[i["dst"]]
        why = None
        pkg, dpkg = src["package"], dst["package"]
        if dpkg and pkg.startswith(dpkg + "."):
            why = "ancestor"
        elif dst["node"] == WIRING and src["node"] not in WIRING_USERS:
            why = "wiring"
        if why:
            out.append({"file": src["path"], "line": i["line"], "src": i["src"], "dst": i["dst"],
                        "top": i["top"], "why": why})
    return sorted(out, key=lambda r: (r["file"], r["line"], r["dst"]))


# --------------------------------------------------------------------------------------- functions

def functions(modules: dict[str, dict]) -> list[dict]:
    out = []

    def walk(node: ast.AST, path: str, prefix: str):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                qual = prefix + child.name
                out.append({"where": f"{path}:{qual}", "line": child.lineno,
                            "lines": child.end_lineno - child.lineno + 1})
                walk(child, path, qual + ".")
            elif isinstance(child, ast.ClassDef):
                walk(child, path, prefix + child.name + ".")
            else:
                walk(child, path, prefix)

    for m in modules.values():
        if "tree" in m:
            walk(m["tree"], m["path"], "")
    return sorted(out, key=lambda f: (-f["lines"], f["where"]))


# ---------------------------------------------------------------------------------------- settings

def _docstring_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) \
                and isinstance(node.value.value, str):
            lines.update(range(node.lineno, node.end_lineno + 1))
    return lines


def _code_tokens(root: Path):
    """(file, token) for the names and strings outside docstrings of every .py file read."""
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        skipped = any(part in EXCLUDED_DIRS or part.startswith(".") for part in rel.parts)
        if skipped or rel.as_posix() == THIS_FILE:
            continue
        source = path.read_text(encoding="utf-8", errors="replace")
        try:
            skip = _docstring_lines(ast.parse(source))
            tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
        except (SyntaxError, tokenize.TokenError):
            continue
        for tok in tokens:
            if tok.type in (tokenize.NAME, tokenize.STRING) and tok.start[0] not in skip:
                yield rel.as_posix(), tok


def settings_places(root: Path, names: list[str]) -> dict[str, dict]:
    patterns = {s: re.compile(r"\b(?:" + "|".join(re.escape(a) for a in ALIASES.get(s, [s])) + r")\b")
                for s in names}
    places: dict[str, set] = defaultdict(set)
    matches: Counter = Counter()
    seen: dict[str, Counter] = defaultdict(Counter)
    per_file: dict[str, Counter] = defaultdict(Counter)
    for rel, tok in _code_tokens(root):
        text = tok.string
        for setting, pattern in patterns.items():
            for mt in pattern.finditer(text):
                a, b = mt.start(), mt.end()
                while a > 0 and (text[a - 1].isalnum() or text[a - 1] in "_-"):
                    a -= 1
                while b < len(text) and (text[b].isalnum() or text[b] in "_-"):
                    b += 1
                matches[setting] += 1
                seen[setting][text[a:b].lstrip("-")] += 1
                per_file[setting][rel] += 1
                # the line of the match itself, in a string that spans lines
                places[setting].add((rel, tok.start[0] + text.count("\n", 0, mt.start())))
    return {s: {"aliases": ALIASES.get(s, [s]), "places": len(places[s]), "matches": matches[s],
                "names": dict(seen[s].most_common()), "files": dict(per_file[s].most_common())}
            for s in names}


# ----------------------------------------------------------------------------------------- summary

def measure(root: Path, settings: list[str], top: int) -> dict:
    modules = read_tree(root)
    imps = imports(modules)
    node = {name: m["node"] for name, m in modules.items()}
    edges = _edges(imps, node.get)
    sub_arrows = {}
    for top_pkg in sorted({m["node"] for m in modules.values() if "." in m["package"]}):
        inside = [i for i in imps if node[i["src"]] == top_pkg and node[i["dst"]] == top_pkg]
        sub_arrows[top_pkg] = _edges(inside, lambda n: modules[n]["package"])
    top_imps = [i for i in imps if i["top"]]
    funcs = functions(modules)
    return {
        "modules": len(modules),
        "lines": sum(len(m["source"].splitlines()) for m in modules.values()),
        "packages": packages(modules),
        "arrows": [{"from": a, "to": b, "imports": n} for (a, b), n in edges.items()],
        "sub_arrows": {p: [{"from": a, "to": b, "imports": n} for (a, b), n in e.items()]
                       for p, e in sub_arrows.items()},
        "package_circles": {
            "module_level": strongly_connected(_graph(_edges(top_imps, node.get))),
            "all": strongly_connected(_graph(edges))},
        "module_cycles": {
            "module_level": strongly_connected(_graph((i["src"], i["dst"]) for i in top_imps)),
            "all": strongly_connected(_graph((i["src"], i["dst"]) for i in imps))},
        "back_up": back_up(modules, imps),
        "functions": {"count": len(funcs), "over_50": sum(f["lines"] > 50 for f in funcs),
                      "over_80": sum(f["lines"] > 80 for f in funcs), "longest": funcs[:top]},
        "settings": settings_places(root, settings),
    }


def _wrap(head: str, items: list[str], sep: str = "  ") -> list[str]:
    """head and items on lines of at most WIDTH characters, an item never split."""
    if not items:
        return [head.rstrip(": ") + ": none"]
    lines, line = [], head
    for i, item in enumerate(items):
        piece = item + (sep.rstrip() if i < len(items) - 1 else "")
        if line.strip() and len(line) + len(piece) > WIDTH:
            lines.append(line.rstrip())
            line = "    "
        line += piece + " " * (len(sep) - len(sep.rstrip()))
    return lines + [line.rstrip()]


def _groups(groups: list[list[str]]) -> list[str]:
    return ["{" + ", ".join(g) + "}" for g in groups]


def report(r: dict, label: str) -> str:
    lines = [f"Code structure of {label}: {r['modules']} modules, {r['lines']} lines (tests left out)"]
    pk = r["packages"]
    lines += _wrap("Packages (modules/lines): ", [
        f"{p} {v['modules']}/{v['lines']}"
        for p, v in pk.items()])
    items = []
    for i, e in enumerate(r["arrows"]):
        first = i == 0 or r["arrows"][i - 1]["from"] != e["from"]
        last = i < len(r["arrows"]) - 1 and r["arrows"][i + 1]["from"] != e["from"]
        items.append(f"{e['from'] + ' > ' if first else ''}{e['to']}({e['imports']}){';' if last else ''}")
    lines += _wrap(f"Package arrows: {len(r['arrows'])}: ", items, " ")
    for p, edges in r["sub_arrows"].items():
        short = {e: e[len(p) + 1:] if e != p else p for x in edges for e in (x["from"], x["to"])}
        lines += _wrap(f"  {p} inside: {len(edges)}: ",
                       [f"{short[x['from']]} > {short[x['to']]}({x['imports']})" for x in edges])
    for key, what in (("module_level", "module-level imports"), ("all", "all imports")):
        g = r["package_circles"][key]
        lines += _wrap(f"Package circles, {what}: {len(g)}: ", _groups(g))
    for key, what in (("module_level", "module-level imports"), ("all", "all imports")):
        g = r["module_cycles"][key]
        lines += _wrap(f"Module cycles, {what}: {len(g)} ({sum(map(len, g))} modules): ", _groups(g))
    lines += _wrap(f"Imports that run back up: {len(r['back_up'])}: ", [
        f"{b['file']}:{b['line']} > {b['dst']}{'' if b['top'] else ' (in function)'}" for b in r["back_up"]],
        "; ")
    f = r["functions"]
    lines.append(f"Functions: {f['count']}, {f['over_50']} over 50 lines, {f['over_80']} over 80; longest:")
    lines += _wrap("  ", [f"{x['lines']} {x['where']}" for x in f["longest"]], "; ")
    for name, s in r["settings"].items():
        head = f"Setting {name}: {s['places']} places, {s['matches']} matches in {len(s['files'])} files; "
        head += "names "
        lines += _wrap(head, [f"{k} {v}" for k, v in s["names"].items()], ", ")
        lines += _wrap("    files ", [f"{k} {v}" for k, v in s["files"].items()], ", ")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = ScriptParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rev", help="a git revision to read (default: the working tree)")
    ap.add_argument("--root", default=str(Path(__file__).resolve().parent.parent),
                    help="the tree to read, or the repository for --rev (default: this checkout)")
    ap.add_argument("--settings", nargs="*", default=list(ALIASES))
    ap.add_argument("--top", type=int, default=10)
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args(argv)
    root = Path(args.root)
    if args.rev:
        with tempfile.TemporaryDirectory() as tmp:
            archive = subprocess.run(["git", "-C", str(root), "archive", args.rev], check=True,
                                     capture_output=True).stdout
            subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
            r = measure(Path(tmp), args.settings, args.top)
        label = args.rev
    else:
        r = measure(root, args.settings, args.top)
        label = f"the working tree ({root})"
    print(report(r, label))
    if args.json:
        Path(args.json).write_text(json.dumps({"tree": label, **r}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
