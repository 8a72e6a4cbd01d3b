"""Structure checked on the source: no import cycles between the project's modules (imports made only for
type checking count, since they couple two modules as much for a reader as any other) and no function
longer than MAX_FUNCTION_LINES, docstring included, without a reason a reader would accept."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("clients", "demo", "export", "loadtest", "tritonrepo", "samples", "tritonlocal")
MAX_FUNCTION_LINES = 60
# "path:function" -> why it may stay longer. Keep this short: splitting is almost always clearer.
LONG_FUNCTIONS_ALLOWED: dict[str, str] = {}


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


# loadtest's folders: four layers, each importing only from those below it, and the commands above them,
# which import no other command.
LOADTEST_LAYERS = {"load": 0, "baselines": 1, "experiments": 2, "report": 3, "bench": 4, "soak": 4, "tune": 4}


def test_loadtest_folders_are_layers_that_import_only_downwards() -> None:
    def folder(module: str) -> str | None:
        parts = module.split(".")
        return parts[1] if parts[0] == "loadtest" and len(parts) > 2 else None

    graph = import_graph()
    folders = {f for f in map(folder, graph) if f}
    assert folders == set(LOADTEST_LAYERS), f"every loadtest folder is a layer or a command: {folders}"
    upwards = sorted(
        f"{module} -> {target}"
        for module, targets in graph.items()
        for target in targets
        if (here := folder(module))
        and (there := folder(target))
        and here != there
        and LOADTEST_LAYERS[there] >= LOADTEST_LAYERS[here]
    )
    assert not upwards, "loadtest imports that go up or across:\n" + "\n".join(upwards)


def long_functions() -> dict[str, int]:
    found = {}
    served = [p for p in sorted((ROOT / "model_repository").rglob("*.py")) if not p.is_symlink()]
    for path in [*modules().values(), *served]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                if lines > MAX_FUNCTION_LINES:
                    found[f"{path.relative_to(ROOT).as_posix()}:{node.name}"] = lines
    return found


def test_no_function_is_longer_than_the_limit_without_a_reason() -> None:
    found = long_functions()
    unexplained = {name: lines for name, lines in found.items() if name not in LONG_FUNCTIONS_ALLOWED}
    assert not unexplained, f"functions over {MAX_FUNCTION_LINES} lines; split them: {unexplained}"


def test_every_allowed_long_function_is_still_long() -> None:
    stale = set(LONG_FUNCTIONS_ALLOWED) - set(long_functions())
    assert not stale, f"remove from LONG_FUNCTIONS_ALLOWED, no longer over the limit: {sorted(stale)}"
