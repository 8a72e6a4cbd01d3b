"""Which exported files a deployment cannot serve without, so that one optional model failing its export
does not stop the models it does not need.

``TRITON_REQUIRED_MODELS`` names the pipelines a deployment requires (comma-separated), the variable that
the server's health probe reads too (deploy/tritonserver/model_probe.py); compose and the Kubernetes Job
give the export the server's value. A required pipeline needs every model it calls (its ensemble steps,
recursively); a file outside all of them is optional. Unset, every file is required.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from tritonrepo.configs import closure, load_holding

REQUIRED_VARIABLE = "TRITON_REQUIRED_MODELS"


def required_models(repository: Path, environ: Mapping[str, str]) -> set[str] | None:
    """Every model the pipelines of ``TRITON_REQUIRED_MODELS`` call, themselves included; None when the
    variable is unset or empty (every file required). Raises RepositoryError naming a pipeline that
    ``repository`` does not hold."""
    names = [name.strip() for name in environ.get(REQUIRED_VARIABLE, "").split(",") if name.strip()]
    if not names:
        return None
    models = load_holding(
        repository,
        names,
        named_by=f"{REQUIRED_VARIABLE}={environ[REQUIRED_VARIABLE]!r}",
        fix="name models it holds, comma-separated, or leave it unset to require every file",
    )
    return {model for name in names for model in closure(models, name)}
