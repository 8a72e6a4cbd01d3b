"""What the project knows about a Triton model repository, in one place, below everything that reads one.

- Configs: every config.pbtxt is parsed into ``model_config_pb2.ModelConfig`` with Triton's own schema; an
  unknown field or a wrong type is a parse error that names the file, so a typo cannot silently change
  what the server does (:func:`parse_config`, :func:`load_model_config`, :func:`load_repository`).
- Exported files: the names the exporter writes and the native backends load (:data:`ONNX_FILENAME`,
  :data:`TORCHSCRIPT_FILENAME`, :func:`exported_file`).
- Served code: a Python model's ``model.py`` (or a module beside it) imported outside Triton for its pure
  functions (:func:`load_served_module`).

Export, the local launcher (tritonlocal), loadtest and the demo all read repositories through this
package, which imports none of them.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from dataclasses import dataclass
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType

from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

# The batching helper every Python model imports; it lives at the repository's top level and each
# Python model's version folder links to it (see the file's docstring for why).
BATCHING_HELPER = "pybackend_batching.py"
# The typed reader of a model's config parameters, shipped the same way.
PARAMETERS_HELPER = "pybackend_parameters.py"
# The model.py that serves an exported file in the Python backend: the derived local repository links
# it, with both helpers beside it, into each native model's version folder. Triton ignores files at a
# repository's top level, so NVIDIA's container, which runs those models natively, never loads it.
NATIVE_RUNNER = "native_runner.py"
# Where both live: the project's deployable repository (a derivation from any other source uses these).
PROJECT_REPOSITORY = Path(__file__).resolve().parents[1] / "model_repository"
ONNX_FILENAME = "model.onnx"
TORCHSCRIPT_FILENAME = "model.pt"
# The runtime that runs an exported file outside its native backend, and the file's default name.
# The manifest `python -m export` writes beside each exported file (what it was built from, where gated).
EXPORT_MANIFEST = ".export.json"
EXPORTED_FILENAMES = {"onnxruntime": ONNX_FILENAME, "torchscript": TORCHSCRIPT_FILENAME}
# Platforms and backends that run an exported file natively in NVIDIA's container, with the runtime
# that runs the same file inside a Python-backend model here and the file's default name.
NATIVE_RUNTIMES = {
    "onnxruntime_onnx": ("onnxruntime", ONNX_FILENAME),
    "onnxruntime": ("onnxruntime", ONNX_FILENAME),
    "pytorch_libtorch": ("torchscript", TORCHSCRIPT_FILENAME),
    "pytorch": ("torchscript", TORCHSCRIPT_FILENAME),
}


class RepositoryError(Exception):
    """A model repository or one of its configs is missing or malformed."""


@dataclass(frozen=True, kw_only=True)
class ModelEntry:
    """One model folder of a repository and its parsed configuration."""

    name: str
    path: Path
    config: ModelConfig

    @property
    def kind(self) -> str:
        """'ensemble', 'python', or the native platform/backend name."""
        if self.config.platform == "ensemble":
            return "ensemble"
        return self.config.platform or self.config.backend

    @property
    def is_native(self) -> bool:
        return self.kind in NATIVE_RUNTIMES

    @property
    def version_dirs(self) -> list[Path]:
        return sorted(
            (p for p in self.path.iterdir() if p.is_dir() and p.name.isdigit()), key=lambda p: int(p.name)
        )

    @property
    def model_filename(self) -> str | None:
        """The exported file a native model loads from each version folder."""
        return exported_filename(self.config)

    def ensemble_steps(self) -> list[str]:
        return [step.model_name for step in self.config.ensemble_scheduling.step]


def parse_config(path: Path) -> ModelConfig:
    """Parse one config.pbtxt strictly with Triton's schema."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise RepositoryError(f"cannot read the model config {path}: {e}") from e
    try:
        return text_format.Parse(text, ModelConfig())
    except text_format.ParseError as e:
        raise RepositoryError(f"{path}: not a valid Triton model configuration: {e}") from e


def load_model_config(model_dir: Path) -> ModelConfig:
    """Parse ``<model_dir>/config.pbtxt``, the model's source of truth."""
    return parse_config(Path(model_dir) / "config.pbtxt")


def exported_filename(config: ModelConfig) -> str | None:
    """The exported file a native model loads: its config's default_model_filename, else the default name
    for its platform (model.onnx for ONNX Runtime, model.pt for libtorch); None for other models."""
    kind = config.platform or config.backend
    if kind not in NATIVE_RUNTIMES:
        return None
    return config.default_model_filename or NATIVE_RUNTIMES[kind][1]


def exported_file(model_dir: Path, config: ModelConfig, *, version: int = 1) -> Path:
    """Where a native model's exported file lives in ``model_dir``."""
    filename = exported_filename(config)
    if filename is None:
        raise RepositoryError(
            f"model {config.name!r} runs on {config.platform or config.backend!r}, which loads no exported "
            f"file; expected one of {sorted(NATIVE_RUNTIMES)}"
        )
    return Path(model_dir) / str(version) / filename


def format_config(config: ModelConfig) -> str:
    return text_format.MessageToString(config)


def load_repository(root: Path) -> dict[str, ModelEntry]:
    """Every model of the repository at ``root``, keyed by name; the folder name must match ``name:``."""
    root = Path(root)
    if not root.is_dir():
        raise RepositoryError(f"model repository {root} does not exist")
    models: dict[str, ModelEntry] = {}
    for folder in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))):
        config_path = folder / "config.pbtxt"
        if not config_path.is_file():
            raise RepositoryError(f"{folder} has no config.pbtxt; every model folder needs one")
        config = parse_config(config_path)
        if config.name and config.name != folder.name:
            raise RepositoryError(
                f"{config_path}: name {config.name!r} differs from its folder {folder.name!r}; "
                "Triton requires them equal"
            )
        models[folder.name] = ModelEntry(name=folder.name, path=folder, config=config)
    return models


def exported_step(models: dict[str, ModelEntry], ensemble: str) -> str:
    """The one step of ``ensemble`` that runs an exported file (the encoder behind a pipeline)."""
    if ensemble not in models or models[ensemble].kind != "ensemble":
        raise RepositoryError(f"{ensemble!r} is not an ensemble of the repository")
    native = [step for step in models[ensemble].ensemble_steps() if step in models and models[step].is_native]
    if len(native) != 1:
        raise RepositoryError(
            f"ensemble {ensemble!r} has {len(native)} exported steps ({', '.join(native) or 'none'}), not one"
        )
    return native[0]


# What an ensemble's one STRING input carries, by the name its config gives it.
INPUT_KINDS = {"IMAGE_BYTES": "image", "TEXT": "text"}


@dataclass(frozen=True, kw_only=True)
class PipelineSteps:
    """What measuring a served model needs to know of it: the exported step it calls (its encoder; the
    model itself where it is native, None for a model that calls none) and its kind ('image' or 'text',
    None where its inputs say neither)."""

    model: str
    encoder: str | None
    kind: str | None


def pipeline_steps(models: dict[str, ModelEntry], name: str) -> PipelineSteps:
    """The encoder and kind of ``name``, read from its config (and its steps' configs)."""
    if name not in models:
        raise RepositoryError(f"no model {name!r} in the repository; models: {', '.join(sorted(models))}")
    entry = models[name]
    if entry.kind == "ensemble":
        encoder: str | None = exported_step(models, name)
    else:
        encoder = name if entry.is_native else None
    inputs = list(entry.config.input)
    kind = INPUT_KINDS.get(inputs[0].name) if len(inputs) == 1 else None
    if kind is None and encoder is not None:
        # a native encoder: pixels are one [C, H, W] input, token ids are integers
        first = models[encoder].config.input[0]
        kind = "image" if len(first.dims) == 3 else "text"
    return PipelineSteps(model=name, encoder=encoder, kind=kind)


def load_served_module(path: Path, *, name: str) -> ModuleType:
    """Import a served ``.py`` file by path, for its pure functions (no sys.path edit).

    Inside Triton a model's version folder is on ``sys.path``, so a model.py imports the modules beside it
    by bare name (``from pybackend_batching import ...``). Here a bare name that nothing installed
    provides is looked up beside ``path`` while it executes, and forgotten afterwards: ``sys.modules``
    then holds ``name`` (dataclasses look their module up there) and nothing else new. A module that
    imports ``triton_python_backend_utils`` needs it (or a stand-in) in ``sys.modules`` first.
    """
    path = Path(path)
    if not path.is_file():
        raise RepositoryError(f"cannot load {path}: no such file; is the model repository complete?")
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise RepositoryError(f"cannot load {path} as a Python module")
    module = importlib.util.module_from_spec(spec)
    siblings = _SiblingFinder(path.parent)
    sys.modules[name] = module
    sys.meta_path.append(siblings)  # last, as Triton appends the version folder to sys.path
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    finally:
        sys.meta_path.remove(siblings)
        for sibling in siblings.found:
            sys.modules.pop(sibling, None)
    return module


class _SiblingFinder(importlib.abc.MetaPathFinder):
    """Finds ``<folder>/<name>.py`` for a top-level import, as a version folder on sys.path would."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.found: list[str] = []

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> ModuleSpec | None:
        candidate = self.folder / f"{fullname}.py"
        if "." in fullname or not candidate.is_file():
            return None
        self.found.append(fullname)
        return importlib.util.spec_from_file_location(fullname, candidate)
