"""Reading a Triton model repository: every config.pbtxt parsed with Triton's own schema.

An unknown field or a wrong type is a parse error that names the file, so a typo cannot silently change
what the server does.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import DataType, ModelConfig

from tritonrepo.errors import RepositoryError
from tritonrepo.files import EXPORT_MANIFEST, FILE_PARAMETER_SUFFIX, NATIVE_RUNTIMES, exported_filename


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

    def required_files(self) -> dict[Path, str]:
        """Each file the model loads from its version folders, with what names it: a native model's
        exported file (``exported``), a Python model's files named by its ``*_file`` parameters
        (``tokenizer_file``, ``labels_file``), relative to each version folder."""
        versions = self.version_dirs or [self.path / "1"]
        filename = self.model_filename
        if filename is not None:
            return {version / filename: "exported" for version in versions}
        if self.kind != "python":
            return {}
        named = {
            key: value.string_value
            for key, value in sorted(self.config.parameters.items())
            if key.endswith(FILE_PARAMETER_SUFFIX) and value.string_value
        }
        return {version / file: key for version in versions for key, file in named.items()}

    def ensemble_steps(self) -> list[str]:
        return [step.model_name for step in self.config.ensemble_scheduling.step]

    def recorded_input_bounds(self) -> dict[str, list[float]]:
        """The value bounds the export recorded for the model's inputs (token ids within the vocabulary, a
        categorical id within its table), read from the manifest beside its newest exported file; {}
        where there is none."""
        for version in reversed(self.version_dirs):
            manifest = version / EXPORT_MANIFEST
            if manifest.is_file():
                return dict(json.loads(manifest.read_text(encoding="utf-8")).get("input_bounds", {}))
        return {}


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


def format_config(config: ModelConfig) -> str:
    return text_format.MessageToString(config)


def load_repository(root: Path) -> dict[str, ModelEntry]:
    """Every model of the repository at ``root``, keyed by name; the folder name must match ``name:``."""
    return {folder.name: read_model(folder) for folder in model_folders(root)}


def load_holding(root: Path, names: Sequence[str], *, named_by: str, fix: str) -> dict[str, ModelEntry]:
    """The repository at ``root`` (:func:`load_repository`), which must hold every model ``names`` names;
    else RepositoryError saying what named them (``named_by``), those it lacks, those it has and ``fix``."""
    models = load_repository(root)
    unknown = [name for name in names if name not in models]
    if unknown:
        raise RepositoryError(
            f"{named_by} names {', '.join(unknown)}, which {root} does not hold; it holds "
            f"{', '.join(sorted(models))}; {fix}"
        )
    return models


def model_folders(root: Path) -> list[Path]:
    """The model folders of the repository at ``root`` (hidden and ``_`` folders are not models)."""
    root = Path(root)
    if not root.is_dir():
        raise RepositoryError(f"model repository {root} does not exist")
    return sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith((".", "_")))


def read_model(folder: Path) -> ModelEntry:
    """The model in ``folder``: its config.pbtxt parsed, its ``name:`` (when given) its folder's name."""
    config_path = folder / "config.pbtxt"
    if not config_path.is_file():
        raise RepositoryError(f"{folder} has no config.pbtxt; every model folder needs one")
    config = parse_config(config_path)
    if config.name and config.name != folder.name:
        raise RepositoryError(
            f"{config_path}: name {config.name!r} differs from its folder {folder.name!r}; "
            "Triton requires them equal"
        )
    return ModelEntry(name=folder.name, path=folder, config=config)


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
STRING_KINDS = {"IMAGE_BYTES": "image", "TEXT": "text"}
# What a model's requests carry, read from its config alone (:func:`input_kind`).
INPUT_KINDS = ("image", "text", "tokens", "pixels", "tensors")


def input_kind(config: ModelConfig) -> str:
    """What ``config``'s requests carry: 'image' (one STRING input IMAGE_BYTES: encoded photographs),
    'text' (one STRING input TEXT: sentences), 'tokens' (one INT64 input of variable length: token ids),
    'pixels' (one FP32 input [3, H, W]: a decoded, normalised image) or 'tensors' (anything else: rows of
    the declared tensors, whatever they mean)."""
    inputs = list(config.input)
    if len(inputs) == 1:
        (only,) = inputs
        if only.data_type == DataType.TYPE_STRING and only.name in STRING_KINDS:
            return STRING_KINDS[only.name]
        if only.data_type == DataType.TYPE_INT64 and any(d < 0 for d in only.dims):
            return "tokens"
        if only.data_type == DataType.TYPE_FP32 and len(only.dims) == 3 and only.dims[0] == 3:
            return "pixels"
    return "tensors"


def closure(models: dict[str, ModelEntry], name: str) -> list[str]:
    """``name`` and every model it calls (recursively for ensembles), each once."""
    if name not in models:
        raise ValueError(f"model {name!r} is not in the repository; it has: {', '.join(sorted(models))}")
    found = [name]
    for step in models[name].ensemble_steps():
        found.extend(n for n in closure(models, step) if n not in found)
    return found


def instance_count(config: ModelConfig) -> int:
    """The instances ``config`` runs: its instance groups' counts (a group without a count runs one)."""
    return sum(max(1, group.count) for group in config.instance_group) or 1


def threads_per_instance(cores: int, instances: int) -> int:
    """The default share of the cores between a model's instances: ``cores // instances`` intra-op threads
    each, never fewer than 1."""
    if cores < 1 or instances < 1:
        raise ValueError(f"cores and instances must be at least 1, got {cores} and {instances}")
    return max(1, cores // instances)


ALL_CORES = "all"  # intra_op_threads: every instance may use every core


@dataclass(frozen=True)
class ThreadLayout:
    """An exported model's intra-op threads per instance, and whether an idle pool thread may spin."""

    threads: int
    spinning: bool


def intra_op_layout(cores: int, instances: int, requested: str | None = None) -> ThreadLayout:
    """The one rule for an exported model's intra-op threads on a CPU.

    ``requested``: None for :func:`threads_per_instance`; :data:`ALL_CORES` for every core in each
    instance, so that a request that runs alone runs on all of them; or a number. Pools whose threads add
    up to more than the cores do not spin: onnxruntime's threads otherwise spin after each operator and
    each run, taking the core another instance or a Python step of the pipeline is waiting for."""
    instances = max(1, instances)
    if requested is None or requested == "":
        threads = threads_per_instance(cores, instances)
    elif requested == ALL_CORES:
        threads = max(1, cores)
    else:
        try:
            threads = int(requested)
        except ValueError:
            raise ValueError(
                f"intra_op_threads must be a number or {ALL_CORES!r}, got {requested!r}"
            ) from None
        if threads < 1:
            raise ValueError(f"intra_op_threads must be at least 1, got {threads}")
    return ThreadLayout(threads=threads, spinning=threads * instances <= max(1, cores))


@dataclass(frozen=True, kw_only=True)
class PipelineSteps:
    """What measuring a served model needs to know of it: the exported step it calls (its encoder; the
    model itself where it is native, None for a model that calls none) and what its requests carry (one
    of :data:`INPUT_KINDS`, from its own config)."""

    model: str
    encoder: str | None
    kind: str


def pipeline_steps(models: dict[str, ModelEntry], name: str) -> PipelineSteps:
    """The encoder and kind of ``name``, read from its config (and its steps' configs)."""
    if name not in models:
        raise RepositoryError(f"no model {name!r} in the repository; models: {', '.join(sorted(models))}")
    entry = models[name]
    if entry.kind == "ensemble":
        encoder: str | None = exported_step(models, name)
    else:
        encoder = name if entry.is_native else None
    return PipelineSteps(model=name, encoder=encoder, kind=input_kind(entry.config))
