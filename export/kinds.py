"""What a kind of model gives the export pipeline (export/pipeline.py), and nothing more.

A kind (export/efficientnet_lite/kind.py: image classifiers; export/minilm/kind.py: BERT-family sentence
encoders) knows how to load a described model, which real inputs check and gate it, how to write its fp32 file
and each reduced precision (its :class:`~export.precision.selection.Variant` s). The pipeline owns the order
of the steps: fingerprint, up-to-date check, the plan below, selection, manifest and record.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from description.generated_configs import Generated
from description.model import ModelDescription
from export.common import ModelConfig
from export.precision.gates import GateResult
from export.precision.selection import Batch, Capabilities, Runner, Variant

# Every config a description generates, by model, made once per export (description/generated_configs.py).
Made = dict[str, Generated]


@dataclass(frozen=True, kw_only=True)
class Parity:
    """How the fp32 file compared with eager PyTorch on the check inputs."""

    metric: str
    value: float
    tolerance: float
    detail: str = ""

    def __str__(self) -> str:
        return f"fp32 {self.metric} vs eager {self.value:.7g} (tolerance {self.tolerance:g}){self.detail}"

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass(frozen=True, kw_only=True)
class Target:
    """The served file a kind plans: its model's config and file format, the capabilities of the machine
    its variants are gated on, and a scratch folder for intermediate files."""

    config: ModelConfig
    file_format: str
    capabilities: Capabilities
    scratch: Path


@dataclass(kw_only=True)
class Plan:
    """One served file's variants and how to judge them. ``parity`` is filled once fp32 is written."""

    variants: list[Variant]
    gate: Callable[[Runner], GateResult]
    workload: dict[int, list[Batch]]
    reference: GateResult | None = None
    parity: list[Parity] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)


class Kind(Protocol):
    def check_config(
        self, description: ModelDescription, repository: Path, config: ModelConfig, made: Made
    ) -> None:
        """Raise ExportError when the served model's config cannot serve this description (cheap).
        ``made``: every config the description generates (description/generated_configs.py)."""

    def fingerprint_files(self, description: ModelDescription) -> list[Path]:
        """The weights and code files an exported file depends on, beside its config and description."""

    def prepare(self, description: ModelDescription, repository: Path, made: Made) -> Any:
        """The model and its check inputs (expensive: called once per description, when needed)."""

    def plan(self, prepared: Any, target: Target) -> Plan:
        """The variants of one served file."""

    def support_files(self, description: ModelDescription, repository: Path, made: Made) -> dict[Path, Path]:
        """Files other repository models read (a tokenizer), as {destination: source} to copy."""
