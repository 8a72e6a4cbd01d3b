"""The unit tier starts no process of its own: no file of tests/unit imports a way to start one (subprocess,
multiprocessing, pty, os's spawn, exec and fork calls, asyncio's subprocesses, a process pool) or asks for
the ``run_python`` fixture. A test that runs a command or a tool belongs in tests/checks (tests/conftest.py
says what each tier holds)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

UNIT = Path(__file__).resolve().parent
MODULES = {"subprocess", "multiprocessing", "pty"}
NAMES = {  # module -> what of it starts a process
    "os": {"system", "popen", "fork", "forkpty", "posix_spawn", "posix_spawnp"}
    | {
        f"{call}{suffix}"
        for call in ("spawn", "exec")
        for suffix in ("l", "le", "lp", "lpe", "v", "ve", "vp", "vpe")
    },
    "asyncio": {"create_subprocess_exec", "create_subprocess_shell"},
    "concurrent.futures": {"ProcessPoolExecutor"},
}
FIXTURES = {"run_python"}


def process_starts(source: str) -> list[str]:
    """Where ``source`` imports or calls a way to start a process, as 'line N: what'."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [
                f"line {node.lineno}: import {a.name}" for a in node.names if a.name.split(".")[0] in MODULES
            ]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            top = node.module.split(".")[0]
            started = [a.name for a in node.names if top in MODULES or a.name in NAMES.get(node.module, ())]
            found += [f"line {node.lineno}: from {node.module} import {name}" for name in started]
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.attr in NAMES.get(node.value.id, ()):
                found.append(f"line {node.lineno}: {node.value.id}.{node.attr}")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            arguments = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
            found += [f"line {node.lineno}: fixture {a.arg}" for a in arguments if a.arg in FIXTURES]
    return found


@pytest.mark.parametrize(
    "path", sorted(p for p in UNIT.glob("*.py") if p.name != "conftest.py"), ids=lambda path: path.name
)
def test_no_unit_test_starts_a_process(path: Path) -> None:
    found = process_starts(path.read_text(encoding="utf-8"))
    assert not found, f"{path.name} starts a process; move the test to tests/checks: {found}"


def test_the_tier_refuses_a_process_that_the_code_under_test_starts() -> None:
    """conftest.py imports subprocess only to refuse it, in every unit test, through any caller."""
    found = process_starts((UNIT / "conftest.py").read_text(encoding="utf-8"))
    assert [line.split(": ", 1)[1] for line in found] == ["import subprocess"]
    popen = importlib.import_module("subprocess").Popen
    with pytest.raises(AssertionError, match="move the test to tests/checks"):
        popen(["true"])
    with pytest.raises(AssertionError, match="move the test to tests/checks"):
        importlib.import_module("os").posix_spawn("/bin/true", ["true"], {})


@pytest.mark.parametrize(
    "source",
    [
        "import subprocess",
        "from subprocess import run",
        "import multiprocessing.pool",
        "import os\nos.system('ls')",
        "import os\nos.execvp('ls', ['ls'])",
        "from os import posix_spawn",
        "import asyncio\nasyncio.create_subprocess_exec('ls')",
        "from concurrent.futures import ProcessPoolExecutor",
        "def test_x(run_python):\n    run_python('-c', 'pass')",
    ],
)
def test_each_way_of_starting_a_process_is_found(source: str) -> None:
    assert len(process_starts(source)) == 1, source


def test_what_starts_no_process_passes() -> None:
    source = "import os\nfrom concurrent.futures import ThreadPoolExecutor\nos.environ\nasyncio.run(main())"
    assert process_starts(source) == []
