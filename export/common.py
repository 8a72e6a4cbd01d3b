"""Helpers shared by the exporters: a config's tensors, atomic writes, the idempotence manifest, and the
folders the export's commands (``python -m export``, ``python -m export.scaffold``) read and write.

A model's ``config.pbtxt`` is the source of truth for its tensor names, dims and max_batch_size; the
exporters parse it with ``tritonrepo.configs.load_model_config`` and never restate them. An exported
file is written next to a small manifest (``<version>/.export.json``) recording a fingerprint of
everything it was made from, so a re-run with unchanged inputs does nothing.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
from collections.abc import Iterable
from pathlib import Path

from tritonclient.grpc import model_config_pb2
from tritonclient.grpc.model_config_pb2 import ModelConfig

from tritonrepo.atomic_files import sha256_file, write_text_atomically
from tritonrepo.paths import DESCRIPTIONS, REPOSITORY
from tritonrepo.tensors import TensorSpec

logger = logging.getLogger(__name__)

MANIFEST_NAME = ".export.json"
MANIFEST_FORMAT = 1

# The config datatypes the exporters take.
_DATA_TYPES = (
    model_config_pb2.TYPE_FP32,
    model_config_pb2.TYPE_FP16,
    model_config_pb2.TYPE_INT64,
    model_config_pb2.TYPE_INT32,
    model_config_pb2.TYPE_BOOL,
    model_config_pb2.TYPE_STRING,
)


class ExportError(Exception):
    """Root of every error the exporters raise."""


def tensor_specs(entries: Iterable) -> list[TensorSpec]:
    """The tensors of a config's ``input`` or ``output`` list."""
    specs = []
    for entry in entries:
        name = model_config_pb2.DataType.Name(entry.data_type)
        if entry.data_type not in _DATA_TYPES:
            raise ExportError(f"tensor {entry.name!r}: data type {name} is not supported by the exporters")
        specs.append(TensorSpec(name=entry.name, datatype=name.removeprefix("TYPE_"), dims=tuple(entry.dims)))
    return specs


def single_io(config: ModelConfig) -> tuple[TensorSpec, TensorSpec]:
    """The one input and the one output of a single-tensor model such as a classifier."""
    inputs, outputs = tensor_specs(config.input), tensor_specs(config.output)
    if len(inputs) != 1 or len(outputs) != 1:
        raise ExportError(
            f"model {config.name!r} must declare exactly one input and one output, "
            f"got {len(inputs)} and {len(outputs)}"
        )
    return inputs[0], outputs[0]


def shown(path: Path) -> str:
    """``path`` as a command prints it: relative to the working folder when inside it, else absolute."""
    resolved = Path(path).resolve()
    try:
        return str(resolved.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(resolved)


def fingerprint(*, files: Iterable[Path], values: dict[str, str]) -> str:
    """A hash of the named files' contents and of some values (library versions, options). Where a file
    lies does not count, only its name and contents: a copy of a repository (the GPU benchmark's dry run
    exports into one) finds the files exported in the original up to date."""
    digest = hashlib.sha256()
    for name, content in sorted((Path(p).name, sha256_file(p)) for p in files):
        digest.update(name.encode() + b"\0" + content.encode() + b"\0")
    for key in sorted(values):
        digest.update(f"{key}={values[key]}\0".encode())
    return digest.hexdigest()


def manifest_path(artifact: Path) -> Path:
    return Path(artifact).parent / MANIFEST_NAME


def is_up_to_date(artifact: Path, input_fingerprint: str) -> bool:
    """True when ``artifact`` exists, is the file the manifest recorded, and was made from the same inputs."""
    artifact, manifest = Path(artifact), manifest_path(artifact)
    if not artifact.is_file() or not manifest.is_file():
        return False
    try:
        recorded = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        logger.warning("ignoring unreadable manifest %s", manifest)
        return False
    return (
        recorded.get("format") == MANIFEST_FORMAT
        and recorded.get("artifact") == artifact.name
        and recorded.get("inputs_sha256") == input_fingerprint
        and recorded.get("artifact_sha256") == sha256_file(artifact)
    )


def write_manifest(artifact: Path, input_fingerprint: str, details: dict) -> None:
    """Record what ``artifact`` was made from (written after the artifact itself)."""
    record = {
        "format": MANIFEST_FORMAT,
        "artifact": Path(artifact).name,
        "artifact_sha256": sha256_file(artifact),
        "inputs_sha256": input_fingerprint,
        **details,
    }
    write_text_atomically(manifest_path(artifact), json.dumps(record, indent=2, sort_keys=True) + "\n")


def add_folder_options(parser: argparse.ArgumentParser, *, models_help: str) -> None:
    """--repository, the model repository written into, and --models, the folder of descriptions read."""
    parser.add_argument(
        "--repository", type=Path, default=REPOSITORY, help="the model repository to write into"
    )
    parser.add_argument("--models", type=Path, default=DESCRIPTIONS, help=models_help)
