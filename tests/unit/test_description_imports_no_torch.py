"""The description package (description/) reads and generates without torch: no module of it, nor any
project module it reaches, imports torch or the exporter anywhere in its source (functions included). A
static walk of the import graph (conftest's ``import_closure``), so the check starts no process."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MODULES = sorted(
    ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
    for path in (ROOT / "description").rglob("*.py")
)

Closure = Callable[[str], tuple[set[str], set[str]]]


@pytest.mark.parametrize("module", MODULES)
def test_the_description_package_reaches_no_torch_and_no_exporter(
    module: str, import_closure: Closure
) -> None:
    packages, others = import_closure(module)
    assert "description" in packages
    assert "export" not in packages, f"{module} reaches the exporter; the description sits below it"
    assert not {"torch", "torchvision"} & others, f"{module} reaches torch: {sorted(others)}"


def test_the_walk_counts_an_import_inside_a_function(import_closure: Closure) -> None:
    """What the check above relies on: loadtest/load/model_rows.py imports the exporter only inside
    ``described_rows``, and the walk still reaches it."""
    packages, _ = import_closure("loadtest.load.model_rows")
    assert "export" in packages
