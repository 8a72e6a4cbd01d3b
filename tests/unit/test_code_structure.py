"""Structure checked on the source, the code Triton runs included: no import cycles between the project's
modules (imports made only for type checking count, since they couple two modules as much for a reader as
any other), imports only downwards through the layers docs/architecture.md draws, no function longer than
MAX_FUNCTION_LINES, docstring included, without a reason a reader would accept. Type checks run mypy, a
process: tests/checks/test_type_checks.py."""

from __future__ import annotations

import ast
import re
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: mypy brings tomli
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
REPOSITORY = ROOT / "model_repository"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
MAX_FUNCTION_LINES = 60
# "path:function" -> why it may stay longer. Keep this short: splitting is almost always clearer.
LONG_FUNCTIONS_ALLOWED: dict[str, str] = {}


def packages() -> list[str]:
    """The project's top-level Python packages."""
    return sorted(init.parent.name for init in ROOT.glob("*/__init__.py"))


def modules() -> dict[str, Path]:
    """Every module by the name it is imported by. The code Triton runs imports the helpers at the
    repository's top level by bare name; nothing imports a model.py, so it goes by its path."""
    found = {}
    for package in packages():
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    for path in sorted(REPOSITORY.glob("*.py")):
        found[path.stem] = path
    for path in sorted(REPOSITORY.glob("*/*/*.py")):
        if not path.is_symlink():  # a link to a helper or to another model's file: checked there
            found[path.relative_to(ROOT).as_posix()] = path
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


def layers() -> dict[str, list[list[str]]]:
    """The ```layers``` blocks of docs/architecture.md: folder ("" for the root) -> its layers, top first."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    blocks = re.findall(r"^```layers ?(\S*)\n(.*?)^```", text, re.MULTILINE | re.DOTALL)
    assert blocks, f"{ARCHITECTURE} draws no ```layers block"
    return {folder: [line.split() for line in body.splitlines() if line.strip()] for folder, body in blocks}


def _unit(path: Path, folder: str) -> str | None:
    """The folder directly under ``folder`` (a top-level folder for "") that holds ``path``, if any."""
    parts = path.relative_to(ROOT / folder).parts if path.is_relative_to(ROOT / folder) else ()
    return parts[0] if len(parts) > 1 else None


def upward_imports(graph: dict[str, set[str]], paths: dict[str, Path], rows: list[list[str]], folder: str):
    """The imports between the units of ``folder`` that do not go down to a lower layer."""
    rank = {unit: depth for depth, row in enumerate(rows) for unit in row}
    found = []
    for module, targets in graph.items():
        for target in targets:
            here, there = _unit(paths[module], folder), _unit(paths[target], folder)
            if here in rank and there in rank and here != there and rank[there] <= rank[here]:
                found.append(f"{module} -> {target} ({here} may not import {there})")
    return sorted(found)


def test_the_layers_name_every_folder_once() -> None:
    paths = modules()
    for folder, rows in layers().items():
        named = [unit for row in rows for unit in row]
        present = {unit for path in paths.values() if (unit := _unit(path, folder))}
        assert len(named) == len(set(named)), f"{folder or 'the root'}: a folder is named twice: {rows}"
        assert set(named) == present, (
            f"docs/architecture.md's layers of {folder or 'the root'} must name exactly its folders of code: "
            f"named {sorted(named)}, found {sorted(present)}"
        )


def test_every_import_goes_down_the_layers_of_the_architecture() -> None:
    graph, paths = import_graph(), modules()
    assert graph["model_repository/l2_normalize/1/model.py"] == {"pybackend_batching"}, "served imports"
    found = [line for folder, rows in layers().items() for line in upward_imports(graph, paths, rows, folder)]
    assert not found, "imports that go up or across (docs/architecture.md):\n" + "\n".join(found)


def test_an_import_from_a_higher_or_the_same_layer_is_found() -> None:
    paths = {"a.x": ROOT / "a" / "x.py", "b.y": ROOT / "b" / "y.py", "c.z": ROOT / "c" / "z.py"}
    graph = {"a.x": {"b.y"}, "b.y": {"c.z"}, "c.z": set()}
    assert upward_imports(graph, paths, [["a"], ["b", "c"]], "") == ["b.y -> c.z (b may not import c)"]
    assert upward_imports(graph, paths, [["c"], ["b"], ["a"]], "") == [
        "a.x -> b.y (a may not import b)",
        "b.y -> c.z (b may not import c)",
    ]


def long_functions() -> dict[str, int]:
    found = {}
    for path in modules().values():
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


def test_mypy_checks_every_package_and_every_served_helper() -> None:
    settings = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]
    assert sorted(settings["packages"]) == packages()
    helpers = {path.stem for path in REPOSITORY.glob("*.py")}
    assert helpers | {"triton_python_backend_utils"} <= set(settings["modules"])


def test_no_two_test_files_share_a_name_across_tiers() -> None:
    """pytest imports test files by their base name (the tiers have no __init__.py): two files of the
    same name stop the whole run at collection."""
    names = [path.name for path in (ROOT / "tests").rglob("test_*.py")]
    assert not sorted({name for name in names if names.count(name) > 1})
