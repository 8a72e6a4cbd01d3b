"""The README's Python examples run as written (they start their own server on free ports)."""

from __future__ import annotations

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
    assert "127.0.0.1:" in run_python("-c", code).stdout
