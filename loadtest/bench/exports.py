"""What a run with ``--models`` needs exported, exported before it starts, and nothing else.

The models a run measures, and every model their ensembles call: the descriptions
(model_descriptions/*.yaml) that serve an exported file among them go through the one export pipeline
(export/pipeline.py), as ``python -m export --only NAME`` would; a file that is up to date is left as it
is. A Python model a description only configures (a shared image_postprocess) needs no export, so the
shipped models are exported only when the models named call their files.
"""

from __future__ import annotations

import logging
from pathlib import Path

from description.model import ModelDescription, load_descriptions
from export.pipeline import Options, export_model
from export.precision.selection import Capabilities
from tritonrepo.configs import closure, load_repository
from tritonrepo.paths import DESCRIPTIONS, PRECISION_RECORDS

logger = logging.getLogger(__name__)


def needed(models: tuple[str, ...], repository: Path, folder: Path = DESCRIPTIONS) -> list[ModelDescription]:
    """The descriptions that serve an exported file ``models`` are or call, in name order."""
    entries = load_repository(repository)
    wanted = {name for model in models for name in closure(entries, model)}
    return [d for d in load_descriptions(folder) if wanted & {served.model for served in d.served}]


def export_needed(models: tuple[str, ...], repository: Path, folder: Path = DESCRIPTIONS) -> list[str]:
    """Export what ``models`` need; each file left without a servable file, with why (none: all served)."""
    options = Options(repository=repository, capabilities=Capabilities.detect(), record_dir=PRECISION_RECORDS)
    failures = []
    for description in needed(models, repository, folder):
        logger.info("exporting %s (python -m export --only %s)", description.name, description.name)
        results = export_model(description, options)
        for result in results:
            logger.info("  %s", result)
        failures += [f"{result.model}: {result.failure}" for result in results if result.failure]
    return failures
