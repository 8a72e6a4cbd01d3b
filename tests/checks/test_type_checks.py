"""Every Python model type-checked against Triton's API: mypy with the project's settings (pyproject.toml),
which check the packages and the served helpers in one run (``make lint``); a model.py needs a run of its
own, since every one of them is a module named `model`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REPOSITORY = ROOT / "model_repository"


def served_models() -> list[Path]:
    """Each Python model's model.py once, as its real file (a version folder may link another model's)."""
    return sorted({path.resolve() for path in REPOSITORY.glob("*/[0-9]*/model.py")})


def test_the_repository_has_python_models_to_check() -> None:
    assert len(served_models()) >= 4


@pytest.mark.parametrize("model_py", served_models(), ids=lambda path: path.parent.parent.name)
def test_every_python_model_type_checks_against_tritons_api(
    model_py: Path, run_python: Callable[..., object]
) -> None:
    run_python("-m", "mypy", model_py.relative_to(ROOT).as_posix())


def test_the_packages_and_served_helpers_type_check(run_python: Callable[..., object]) -> None:
    """`make lint`'s mypy run: the packages and served helpers pyproject.toml names, in one run."""
    run_python("-m", "mypy")
