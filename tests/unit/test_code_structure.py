"""No import cycles between the project's modules, checked on the source: imports made only for type
checking count, since they couple two modules as much for a reader as any other import."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("clients", "demo", "export", "loadtest", "tritonlocal")


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def _imported(tree: ast.Module, module: str, is_package: bool, known: dict[str, Path]) -> set[str]:
    """The project modules ``module`` imports anywhere in its source (top level, functions, TYPE_CHECKING)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")[: len(module.split(".")) - node.level + (1 if is_package else 0)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                found.add(submodule if submodule in known else base)
    return {name for name in found if name in known and name != module}


def import_graph() -> dict[str, set[str]]:
    known = modules()
    return {
        name: _imported(ast.parse(path.read_text(encoding="utf-8")), name, path.name == "__init__.py", known)
        for name, path in known.items()
    }


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_cycle_finder_finds_a_type_only_cycle() -> None:
    sources = {
        "pkg.base": "import typing\nif typing.TYPE_CHECKING:\n    from pkg.client import Client\n",
        "pkg.client": "from pkg.base import Base\n",
        "pkg.other": "from pkg import base\n",
    }
    known = {name: Path(name) for name in [*sources, "pkg"]}
    graph = {name: _imported(ast.parse(source), name, False, known) for name, source in sources.items()}
    assert graph["pkg.other"] == {"pkg.base"}
    assert cycles(graph) == [["pkg.base", "pkg.client"]]


def test_no_import_cycles_between_the_projectsmodules() -> None:
    graph = import_graph()
    assert graph["clients.operations"], "the import graph must see the clients' imports"
    found = cycles(graph)
    assert not found, "import cycles (type-only imports count):\n" + "\n".join(" <-> ".join(c) for c in found)
