"""The package's import graph has no cycle: a module never imports, at any depth and from
any place in its body (a function included), a module that imports it back.

The graph is read from the source with ``ast``, not by importing, so an import hidden in a
function body to dodge a cycle at import time still counts: it is the same dependency.
"""

import ast
from pathlib import Path

PACKAGE = "anatomy"
ROOT = Path(__file__).resolve().parents[1] / "code" / PACKAGE


def module_names(root: Path, package: str = PACKAGE) -> dict[str, Path]:
    """Every module under ``root`` by dotted name; a package's ``__init__`` by the package's."""
    names = {}
    for path in sorted(root.rglob("*.py")):
        parts = [package, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def _targets(node: ast.AST, module: str, is_package: bool, known: set[str]) -> list[str]:
    """The package's own modules that one import statement loads."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names if alias.name in known]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level:                                 # relative: climb from this module's package
        here = module.split(".") if is_package else module.split(".")[:-1]
        base = here[:len(here) - (node.level - 1)]
        source = ".".join(base + ([node.module] if node.module else []))
    else:
        source = node.module or ""
    # "from .train import distributed" loads the submodule; it needs nothing of the package,
    # which Python has already started. "from . import register" needs the package's names.
    found = [f"{source}.{alias.name}" for alias in node.names
             if f"{source}.{alias.name}" in known]
    if source in known and len(found) < len(node.names):
        found.append(source)
    return found


def import_graph(root: Path, package: str = PACKAGE) -> dict[str, dict[str, int]]:
    """module -> {module it imports: line of the first such import}, every import counted,
    top-level or inside a function, a class or an ``if``."""
    names = module_names(root, package)
    known = set(names)
    graph: dict[str, dict[str, int]] = {}
    for module, path in names.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        edges = graph.setdefault(module, {})
        for node in ast.walk(tree):
            for target in _targets(node, module, path.name == "__init__.py", known):
                if target != module:
                    edges.setdefault(target, node.lineno)
    return graph


def find_cycle(graph: dict[str, dict[str, int]]) -> list[str] | None:
    """One cycle of the graph as [a, b, ..., a], or None (a depth-first search)."""
    state: dict[str, str] = {}                     # "open" on the current path, then "done"
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        path.append(node)
        for nxt in sorted(graph.get(node, {})):
            if state.get(nxt) == "open":
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        path.pop()
        state[node] = "done"
        return None

    for start in sorted(graph):
        if start not in state:
            cycle = visit(start)
            if cycle:
                return cycle
    return None


def describe(cycle: list[str], graph: dict[str, dict[str, int]]) -> str:
    """The cycle one import at a time, each with the line that makes it."""
    steps = [f"  {a} -> {b}  (line {graph[a][b]} of {a})"
             for a, b in zip(cycle, cycle[1:], strict=False)]
    return "import cycle:\n" + "\n".join(steps)


def test_the_package_import_graph_has_no_cycle():
    graph = import_graph(ROOT)
    assert len(graph) > 20 and "anatomy.attention" in graph      # it read the real package
    assert "anatomy.blocks" in graph["anatomy.gpt_numpy"]       # and found its imports
    cycle = find_cycle(graph)
    assert cycle is None, describe(cycle, graph)


def test_attention_and_linear_sit_below_heads_and_blocks():
    graph = import_graph(ROOT)
    assert set(graph["anatomy.attention"]) == {"anatomy._validate"}
    assert set(graph["anatomy.linear"]) == set()
    for user in ("anatomy.heads", "anatomy.blocks"):
        assert "anatomy.linear" in graph[user]


def test_the_check_finds_a_cycle_hidden_in_a_function_body(tmp_path):
    pkg = tmp_path / "demo"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .b import g\n\ndef f():\n    return g()\n")
    (pkg / "b.py").write_text("def g():\n    from .sub.c import h\n    return h()\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "c.py").write_text("import demo.a\n\ndef h():\n    return 1\n")
    (pkg / "sub" / "d.py").write_text("from demo.sub import c\n")     # a submodule, not a cycle
    graph = import_graph(pkg, "demo")
    assert graph["demo.b"] == {"demo.sub.c": 2}
    assert graph["demo.sub.d"] == {"demo.sub.c": 1}
    cycle = find_cycle(graph)
    assert cycle == ["demo.a", "demo.b", "demo.sub.c", "demo.a"]
    assert "demo.b -> demo.sub.c  (line 2 of demo.b)" in describe(cycle, graph)
    (pkg / "sub" / "c.py").write_text("def h():\n    return 1\n")
    assert find_cycle(import_graph(pkg, "demo")) is None
