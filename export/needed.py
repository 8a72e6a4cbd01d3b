"""What serving some models needs exported, and exporting that and nothing else.

The models named and every model their ensembles call (recursively), as the server loads them: their
served files go through the one export pipeline (export/pipeline.py), each kept as it is when up to date;
the other files of the same descriptions and every other description are left alone. A Python model a
description only configures (a shared image_postprocess) needs no export. ``python -m demo`` exports its
two pipelines' files this way, and ``python -m loadtest.bench --models`` the models it measures.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from pathlib import Path

from description.model import ModelDescription, load_descriptions
from export.pipeline import Options, export_models
from export.precision.selection import Capabilities
from export.progress import ExportProgress
from tritonrepo.configs import closure, load_repository
from tritonrepo.paths import DESCRIPTIONS, PRECISION_RECORDS

logger = logging.getLogger(__name__)


def needed_files(models: Sequence[str], repository: Path) -> frozenset[str]:
    """``models`` and every model they call."""
    entries = load_repository(repository)
    return frozenset(name for model in models for name in closure(entries, model))


def needed(models: Sequence[str], repository: Path, folder: Path = DESCRIPTIONS) -> list[ModelDescription]:
    """The descriptions that serve an exported file ``models`` are or call, in name order."""
    return _serving(needed_files(models, repository), folder)


def _serving(files: frozenset[str], folder: Path) -> list[ModelDescription]:
    return [d for d in load_descriptions(folder) if files & {served.model for served in d.served}]


def export_needed(
    models: Sequence[str],
    repository: Path,
    folder: Path = DESCRIPTIONS,
    *,
    progress: ExportProgress | None = None,
) -> dict[str, str]:
    """Export the files ``models`` need (``progress``: shown as ``python -m export`` shows it; None:
    quiet); each file left without a servable file, with why (none: all served)."""
    files = needed_files(models, repository)
    descriptions = _serving(files, folder)
    served = sorted(s.model for d in descriptions for s in d.served if s.model in files)
    logger.info("exporting for %s: %s", ", ".join(models), ", ".join(served) or "nothing")
    options = Options(
        repository=repository,
        capabilities=Capabilities.detect(),
        record_dir=PRECISION_RECORDS,
        files=files,
        progress=progress or ExportProgress(),
    )
    with contextlib.closing(options.progress):
        failed = export_models(descriptions, options)
    return {result.model: result.failure for result in failed}
