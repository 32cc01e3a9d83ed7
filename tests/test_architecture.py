"""The package's layout: imports run down the floors docs/architecture.md draws (and so have no
cycle), store/ imports no JAX, and docs/architecture.md lists every module."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "theseus"
HEAVY = ("jax", "jaxlib", "flax", "optax", "tensorstore")


def module_names() -> dict[str, Path]:
    """``{dotted module name: file}`` for every module under theseus/."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(REPO).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports_of(name: str, path: Path) -> set[str]:
    """Every module ``path`` imports, at module level or inside a function, absolute, as written
    (``from a import b`` names ``a.b`` where that is a module, else ``a``)."""
    modules = module_names()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            subs = [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in modules]
            found.update(subs if len(subs) == len(node.names) else [base, *subs])
    return found


def import_graph() -> dict[str, set[str]]:
    """``{module: the theseus modules it imports}`` (a submodule's implicit import of its package aside)."""
    modules = module_names()
    return {name: {m for m in imports_of(name, path) if m in modules and m != name} for name, path in modules.items()}


def room_of(name: str) -> str:
    """The room a module belongs to: its folder under theseus/, else its own top-level name."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def floors(text: str) -> dict[str, int]:
    """``{room: floor}`` from the ``floors`` block of docs/architecture.md, 0 the lowest."""
    block = re.search(r"^```floors\n(.*?)^```", text, re.S | re.M)
    assert block, "docs/architecture.md has no ```floors block"
    lines = [line for line in block.group(1).splitlines() if line.strip()]
    return {room.strip(): len(lines) - 1 - i for i, line in enumerate(lines) for room in line.split(",")}


def upward_imports(graph: dict[str, set[str]], floor: dict[str, int]) -> list[tuple[str, str]]:
    """Every ``(importer, imported)`` whose imported module stands on a higher floor than its importer."""
    return sorted((a, b) for a, bs in graph.items() for b in bs if floor[room_of(b)] > floor[room_of(a)])


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_floor_check_finds_an_upward_import():
    floor = floors("```floors\ncli, theseus\ntrain\njobs\n```\n")
    assert floor == {"cli": 2, "theseus": 2, "train": 1, "jobs": 0}
    graph = {"theseus.jobs": {"theseus.train.step"}, "theseus.train.step": {"theseus.jobs"}, "theseus.cli.app": set()}
    assert upward_imports(graph, floor) == [("theseus.jobs", "theseus.train.step")]


def test_every_room_stands_on_a_documented_floor():
    floor = floors((REPO / "docs" / "architecture.md").read_text())
    assert {room_of(name) for name in module_names()} - set(floor) == set()


def test_imports_run_down_the_documented_floors():
    floor = floors((REPO / "docs" / "architecture.md").read_text())
    assert upward_imports(import_graph(), floor) == []


def test_no_import_cycle():
    assert cycles(import_graph()) == []


def test_store_imports_no_jax():
    """store/ imports no JAX, and of theseus only itself and the floors below it (so nothing that could)."""
    graph = import_graph()
    store = {name for name in graph if name.startswith("theseus.store")}
    heavy = {(name, m) for name, path in module_names().items() if name in store
             for m in imports_of(name, path) if m.split(".")[0] in HEAVY}
    assert heavy == set()
    floor = floors((REPO / "docs" / "architecture.md").read_text())
    below = {m for m in graph if floor.get(room_of(m), len(floor)) < floor["store"]}
    assert {m for name in store for m in graph[name]} - store - below == set()


def test_architecture_md_lists_every_module():
    text = (REPO / "docs" / "architecture.md").read_text()
    missing = [str(path.relative_to(REPO)) for path in module_names().values()
               if str(path.relative_to(REPO)) not in text]
    assert missing == []
