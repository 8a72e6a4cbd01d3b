"""Model descriptions: what a model is, declared once per model in ``model_descriptions/<name>.yaml``.

A description names the model's kind (``efficientnet_lite``, ``sentence_encoder``, ``torch_module``),
where its weights come from (an installed package and the function in it that returns their path, a
local file or folder with its sha256, or a local file a committed script produces:
description/produced_weights.py), its architecture parameters, which repository models hold its preprocessing,
its fp32 parity tolerance, the gate thresholds it sets for its reduced precisions (``gates``, replacing
export/precision/gates.py's), the served files the export writes (a repository model and its format each) and
the precisions it allows per device. It also states, once, what Triton serves: the served files'
tensors and batching (a ``torch_module``'s ``module`` section, description/module_spec.py; ``configs.native``
for the other kinds) and its Python models and ensembles (``configs``, description/config_spec.py); their
config.pbtxt files are generated from it (description/generated_configs.py). :func:`load_descriptions` reads
every description under a folder; ``python -m export`` runs each through the one pipeline
(export/pipeline.py).
"""

from __future__ import annotations

import hashlib
import importlib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from description.config_spec import ConfigsSpec, check_configs, parse_configs
from description.errors import DescriptionError
from description.module_spec import ModuleSpec, parse_module
from description.produced_weights import produced
from tritonrepo.atomic_files import sha256_file
from tritonrepo.paths import DESCRIPTIONS

IMAGE_KIND = "efficientnet_lite"  # the kind that builds an EfficientNet-Lite classifier
KINDS = (IMAGE_KIND, "sentence_encoder", "torch_module", "python_model")
# Kinds renamed for what they build: refused, naming the new name.
RENAMED_KINDS = {"image_classifier": IMAGE_KIND}
MODULE_KIND = "torch_module"  # the kind whose description holds a ``module`` section
# The kind with no weights and no exported file: Python-backend models only (configs.python_models),
# whose code is the model.py beside each config.
PYTHON_KIND = "python_model"
FORMATS = ("onnx", "torchscript")
DEVICE_PRECISIONS = {"cpu": ("fp32", "bf16", "int8"), "cuda": ("fp32", "tf32", "bf16", "fp16")}


def renamed_kind(kind: str, fix: str) -> str:
    """Why kind ``kind`` is refused where it was renamed for the architecture it builds, and ``fix``."""
    return f"kind {kind!r} is now called {RENAMED_KINDS[kind]!r}, the architecture it builds; {fix}"


@dataclass(frozen=True, kw_only=True)
class Weights:
    """Either ``package`` with ``loader`` ("module:attribute.path", called with no arguments, returning
    the weights' path), or ``path`` (relative to the description's folder) with its ``sha256``, or
    ``path`` with ``produced_by``: the script (relative to the description's folder) that writes it."""

    package: str = ""
    loader: str = ""
    path: str = ""
    sha256: str = ""
    produced_by: str = ""

    def __post_init__(self) -> None:
        if bool(self.loader) == bool(self.path):
            raise DescriptionError("weights: give either package and loader, or path and sha256")
        if self.loader and (not self.package or ":" not in self.loader):
            raise DescriptionError(
                f"weights: loader {self.loader!r} must read 'module:function' and name its package"
            )
        if self.produced_by and (not self.path or self.sha256):
            raise DescriptionError(
                f"weights: produced_by {self.produced_by!r} needs the path it writes and no sha256 (the "
                "production record holds it: description/produced_weights.py)"
            )
        if self.path and not self.produced_by and len(self.sha256) != 64:
            raise DescriptionError(f"weights: path {self.path!r} needs its sha256 (64 hex digits)")

    def locate(self, base: Path) -> Path:
        """The weights' file or folder; a local one is checked against its sha256."""
        if self.produced_by:
            return produced(base / self.path, base / self.produced_by)
        if self.path:
            return _checked_local(base / self.path, self.sha256)
        module_name, _, attribute = self.loader.partition(":")
        try:
            target: Any = importlib.import_module(module_name)
        except ImportError as e:
            raise DescriptionError(
                f"the weights come from the package {self.package!r}; install it, pinned in requirements.lock"
            ) from e
        for part in attribute.split("."):
            target = getattr(target, part)
        return Path(target())


def weights_sha256(path: Path) -> str:
    """The sha256 of a weights file, or of a folder's files (each relative name and content hash)."""
    if path.is_dir():
        digest = hashlib.sha256()
        for item in sorted(p for p in path.rglob("*") if p.is_file()):
            digest.update(f"{item.relative_to(path)}\0{sha256_file(item)}\0".encode())
        return digest.hexdigest()
    if path.is_file():
        return sha256_file(path)
    raise DescriptionError(f"weights: {path} does not exist")


def _checked_local(path: Path, expected: str) -> Path:
    actual = weights_sha256(path)
    if actual != expected:
        raise DescriptionError(f"weights: {path} has sha256 {actual}, the description says {expected}")
    return path


@dataclass(frozen=True, kw_only=True)
class ServedFile:
    """One exported file: the repository model whose config.pbtxt it serves, and its format."""

    model: str
    format: str

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise DescriptionError(
                f"served model {self.model!r}: format {self.format!r} is not one of {FORMATS}"
            )


@dataclass(frozen=True, kw_only=True)
class ModelDescription:
    name: str
    kind: str
    weights: Weights | None  # None for a python_model only
    served: tuple[ServedFile, ...]
    preprocessing: dict[str, str]
    tolerance: float
    architecture: dict[str, float] = field(default_factory=dict)
    gates: dict[str, float] = field(default_factory=dict)  # thresholds replacing export/precision/gates.py's
    precisions: dict[str, tuple[str, ...]] = field(default_factory=lambda: dict(DEVICE_PRECISIONS))
    module: ModuleSpec | None = None  # kind torch_module: the user's code, its tensors and batching
    configs: ConfigsSpec | None = None  # what the generated configs state beside the module section
    folder: Path = Path(".")  # where the description lives; a local weights path is relative to it

    def __post_init__(self) -> None:
        if self.kind in RENAMED_KINDS:
            fix = f"write `kind: {RENAMED_KINDS[self.kind]}` in {self.name}"
            raise DescriptionError(f"model {self.name!r}: {renamed_kind(self.kind, fix)}")
        if self.kind not in KINDS:
            raise DescriptionError(f"model {self.name!r}: kind {self.kind!r} is not one of {KINDS}")
        if (self.kind == MODULE_KIND) != (self.module is not None):
            raise DescriptionError(
                f"model {self.name!r}: a {MODULE_KIND} description has a module section and no other kind "
                "has one (docs/your-model-module.md)"
            )
        if self.kind == PYTHON_KIND:
            _check_python_only(self)
        elif not self.served or self.weights is None:
            raise DescriptionError(f"model {self.name!r}: lists no served files or no weights")
        if self.configs is not None:
            check_configs(
                self.name,
                self.configs,
                module=self.module is not None,
                preprocessing=self.preprocessing,
                python_only=self.kind == PYTHON_KIND,
            )
        for device, allowed in self.precisions.items():
            if device not in DEVICE_PRECISIONS or not set(allowed) <= set(DEVICE_PRECISIONS[device]):
                raise DescriptionError(
                    f"model {self.name!r}: precisions {device}: {list(allowed)}; allowed devices and "
                    f"precisions are {DEVICE_PRECISIONS}"
                )

    def allows(self, precision: str, device: str) -> bool:
        return precision in self.precisions.get(device, ())

    def weights_path(self) -> Path:
        if self.weights is None:
            raise DescriptionError(f"model {self.name!r}: a {self.kind} has no weights")
        return self.weights.locate(self.folder)


def _check_python_only(description: ModelDescription) -> None:
    """A python_model states its Python models and nothing to export."""
    if description.served or description.weights is not None or description.preprocessing:
        raise DescriptionError(
            f"model {description.name!r}: a {PYTHON_KIND} has no weights, served or preprocessing; "
            "its models are configs.python_models, their code the model.py beside each config"
        )
    if description.configs is None or not description.configs.python_models:
        raise DescriptionError(f"model {description.name!r}: a {PYTHON_KIND} needs configs.python_models")


def parse_description(data: dict, *, source: Path) -> ModelDescription:
    """A description from its YAML mapping; unknown or missing keys are errors naming ``source``."""
    known = {f.name for f in fields(ModelDescription)} - {"folder"}
    if not isinstance(data, dict) or set(data) - known:
        extra = sorted(set(data) - known) if isinstance(data, dict) else data
        raise DescriptionError(f"{source}: unknown keys {extra}; a description has {sorted(known)}")
    try:
        module = parse_module(data["module"], model=data["name"]) if "module" in data else None
        if data.get("kind") == MODULE_KIND and "tolerance" in data:
            raise DescriptionError(
                f"{source}: a {MODULE_KIND} states a tolerance per output (module.outputs), not tolerance"
            )
        python_only = data.get("kind") == PYTHON_KIND
        return ModelDescription(
            name=data["name"],
            kind=data["kind"],
            weights=None if python_only and "weights" not in data else Weights(**data["weights"]),
            served=tuple(ServedFile(**entry) for entry in data.get("served", [])),
            preprocessing=dict(data.get("preprocessing") or {}),
            tolerance=0.0 if python_only or data.get("kind") == MODULE_KIND else float(data["tolerance"]),
            architecture=dict(data.get("architecture") or {}),
            gates={name: float(value) for name, value in (data.get("gates") or {}).items()},
            precisions={k: tuple(v) for k, v in (data.get("precisions") or DEVICE_PRECISIONS).items()},
            module=module,
            configs=parse_configs(data["configs"], model=data["name"]) if "configs" in data else None,
            folder=source.parent,
        )
    except (KeyError, TypeError) as e:
        raise DescriptionError(f"{source}: {e!r} (see docs/your-model.md for the keys)") from e


def raw_description(path: Path) -> dict[str, Any]:
    """The YAML of the description at ``path``, unchecked: what a scaffold copies and edits before
    :func:`parse_description` checks its result."""
    data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    if not isinstance(data, dict):
        raise DescriptionError(f"{path}: a description is a mapping of keys, got {type(data).__name__}")
    return data


def load_description(path: Path) -> ModelDescription:
    return parse_description(raw_description(path), source=Path(path))


def load_descriptions(folder: Path = DESCRIPTIONS) -> list[ModelDescription]:
    """Every ``*.yaml`` description in ``folder``, in name order; names must be unique."""
    descriptions = [load_description(path) for path in sorted(Path(folder).glob("*.yaml"))]
    if not descriptions:
        raise DescriptionError(
            f"no model description (*.yaml) in {Path(folder).resolve()}; the project's live in {DESCRIPTIONS}"
        )
    names = [d.name for d in descriptions]
    if len(set(names)) != len(names):
        raise DescriptionError(f"{folder}: two descriptions share a name: {names}")
    return descriptions


def description_serving(model: str, folder: Path = DESCRIPTIONS) -> ModelDescription:
    """The description with a served file for repository model ``model``."""
    descriptions = load_descriptions(folder)
    for description in descriptions:
        if any(served.model == model for served in description.served):
            return description
    raise DescriptionError(
        f"no description in {folder} serves {model!r}; described: {[d.name for d in descriptions]}"
    )
