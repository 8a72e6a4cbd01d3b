"""The README's Python examples run as written (they start their own server on free ports)."""

from __future__ import annotations

import ast
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)


def test_the_readme_has_python_examples() -> None:
    assert BLOCKS


@pytest.mark.parametrize("code", BLOCKS, ids=lambda code: code.splitlines()[0][:40])
def test_a_readme_python_example_runs(
    code: str, triton_repository: Path, run_python: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    # triton_repository: the fixture derives build/local_repository, which the examples serve.
    printed = run_python("-c", code).stdout
    for expected in _promised(code):
        assert expected in printed, f"the example promises {expected!r}; it printed:\n{printed}"
    if "server.http_url" in code:  # the server it started, on two ports of 127.0.0.1
        assert re.search(r"^127\.0\.0\.1:\d+ 127\.0\.0\.1:\d+$", printed, flags=re.M), printed


def _promised(code: str) -> list[str]:
    """What an example's comments say its prints show: ``print(...)  # (1, 384)`` promises ``(1, 384)``
    (a comment that is a Python literal; prose comments promise nothing)."""
    promised = []
    for line in code.splitlines():
        if line.strip().startswith("print(") and "  # " in line:
            comment = line.split("  # ", 1)[1].strip()
            try:
                promised.append(str(ast.literal_eval(comment)))
            except (ValueError, SyntaxError):
                continue
    return promised


def test_the_readme_examples_promise_what_they_print() -> None:
    assert any(_promised(code) for code in BLOCKS), "no example says what it prints"
