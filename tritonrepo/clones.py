"""The repository a benchmark serves: chosen public models plus renamed clones, all derived by code.

A clone copies a public model and every model below it (an ensemble's steps) under a suffix, e.g.
``text_embedder__nobatch`` -> ``text_tokenizer__nobatch`` -> ``minilm_onnx__nobatch``, and changes
their configurations programmatically:

- ``batching=False`` removes ``dynamic_batching`` from every model of the clone, so each request is run
  on its own (Triton's default scheduler): the one-request-per-call baseline;
- ``ragged=False`` turns ``allow_ragged_batch`` off on every input of the clone, so the batcher only
  merges requests of equal shape (how Triton batches by default);
- ``instances=N`` sets the ``instance_group`` count of the exported-model steps to N and divides the
  intra-op threads so that N instances together use ``total_threads`` (never fewer than 1 each); one
  instance also loses its bounded queue, which one instance cannot serve without stalling;
- ``parameters=((model, key, value), ...)`` sets one of ``parameters`` of a model of the clone, e.g.
  ``("text_tokenizer", "length_buckets", "16,64,256")``: the key must already exist in that model's
  configuration (a misspelt key would otherwise be ignored by the model and the clone would be the
  original under another name);
- ``batcher=((model, fields), ...)`` replaces fields of a model's ``dynamic_batching`` with ``fields`` in
  Triton's text format, e.g. ``("image_preprocess", "max_queue_delay_microseconds: 1000")``: each field
  named replaces the model's own, the others stay, as a CPU overlay's do (:mod:`tritonrepo.cpu_overlay`).
  As in an overlay the queue delay is always set, so ``fields`` must name it (0 included).

Two flavours, one set of changes. ``derive=True`` (the default) starts every configuration from
``model_repository/`` through :func:`tritonrepo.derive.derive_local_config` (the same derivation as
build/local_repository: native models run in the Python backend) for the pip wheel's tritonserver.
``derive=False`` keeps each model's own configuration (same platform or backend, same device) for
NVIDIA's container, and copies the files instead of linking them, since that repository is mounted into
a container on its own (``python -m loadtest.bench --mode gpu --write-repository``). There, the
``model_filename`` override of a native model (which the derived runner reads) copies that file into the
clone's version folder under the configuration's file name, with the export's manifest beside it.
Either way a clone differs from what is served normally only in the field it names. Serving the
clones side by side in one server lets the benchmark alternate between them within one run. The files are
placed by the one writer of derived repositories (:mod:`tritonrepo.writer`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from tritonrepo.configs import ModelEntry, closure, load_repository, threads_per_instance
from tritonrepo.cpu_overlay import apply_overlay
from tritonrepo.derive import derive_local_config
from tritonrepo.files import EXPORT_MANIFEST
from tritonrepo.writer import COPY, LINK, DerivedModel, link_or_copy, write_repository

MADE_BY = "tritonrepo.clones"
# The parameter of a derived native model naming the exported file it runs; in a repository of native
# configurations the file itself is placed instead.
FILE_PARAMETER = "model_filename"


@dataclass(kw_only=True, frozen=True)
class Clone:
    """``model`` (a public model) and its steps, served under ``model + suffix`` with changes."""

    model: str
    suffix: str = ""
    batching: bool = True
    ragged: bool = True  # False: inputs lose allow_ragged_batch, so the batcher merges equal shapes only
    instances: int | None = None
    parameters: tuple[tuple[str, str, str], ...] = ()  # (model, key, value)
    batcher: tuple[tuple[str, str], ...] = ()  # (model, dynamic_batching fields in Triton's text format)

    def __post_init__(self) -> None:
        if self.suffix and not self.suffix.startswith("__"):
            raise ValueError(f"suffix must start with '__' (e.g. '__nobatch'), got {self.suffix!r}")
        if self.instances is not None and self.instances < 1:
            raise ValueError(f"instances must be at least 1, got {self.instances}")
        changed = (
            not self.batching
            or not self.ragged
            or self.instances is not None
            or bool(self.parameters)
            or bool(self.batcher)
        )
        if self.suffix == "" and changed:
            raise ValueError("a changed clone needs a suffix so it does not replace the original model")
        for override in self.parameters:
            if len(override) != 3 or not all(isinstance(p, str) for p in override) or not all(override[:2]):
                raise ValueError(
                    "a parameter override is (model, key, value) with a model and key named, "
                    f"got {override!r}; e.g. ('text_tokenizer', 'length_buckets', '16,64,256')"
                )
        keys = [override[:2] for override in self.parameters]
        if len(set(keys)) != len(keys):
            raise ValueError(f"a (model, key) is overridden twice in {self.parameters!r}")
        models = [model for model, _ in self.batcher]
        if len(set(models)) != len(models):
            raise ValueError(f"a model's batcher is overridden twice in {self.batcher!r}")
        for model, fields in self.batcher:
            self.batcher_overlay(model)  # refuses text that is not dynamic_batching fields
            if "max_queue_delay_microseconds" not in fields:
                # proto3 cannot tell an absent delay from 0, and the overlay always sets it
                raise ValueError(
                    f"batcher override of {model}: {fields!r} must name max_queue_delay_microseconds "
                    "(0 included), which an override always sets"
                )

    def batcher_overlay(self, model: str) -> ModelConfig | None:
        """``model``'s batcher override as a partial config holding only ``dynamic_batching``."""
        for name, fields in self.batcher:
            if name == model:
                try:
                    return text_format.Parse(f"dynamic_batching {{ {fields} }}", ModelConfig())
                except text_format.ParseError as e:
                    raise ValueError(
                        f"batcher override of {model}: {fields!r} is not dynamic_batching fields in "
                        f"Triton's text format ({e}); e.g. 'max_queue_delay_microseconds: 1000'"
                    ) from e
        return None

    @property
    def served_name(self) -> str:
        return self.model + self.suffix

    def describe(self) -> str:
        parts = ["dynamic batching " + ("on" if self.batching else "off")]
        if not self.ragged:
            parts.append("ragged batching off")
        if self.instances is not None:
            parts.append(f"{self.instances} instance(s) of the exported model")
        parts += [f"{model}.{key} = {_shorten(value)}" for model, key, value in self.parameters]
        parts += [f"{model} batcher: {' '.join(fields.split())}" for model, fields in self.batcher]
        return ", ".join(parts)

    def overrides_for(self, model: str) -> dict[str, str]:
        """The parameter overrides of ``model`` (a name in the original repository): key -> value."""
        return {key: value for name, key, value in self.parameters if name == model}


def _shorten(value: str, limit: int = 40) -> str:
    return value if len(value) <= limit else f"{value[:17]}...{value[-17:]} ({len(value)} chars)"


def clone_config(
    entry: ModelEntry,
    clone: Clone,
    *,
    total_threads: int,
    gpu_available: bool = False,
    derive: bool = True,
) -> ModelConfig:
    """``entry``'s configuration, renamed and changed as ``clone`` says: derived for the local server
    (KIND_GPU instances kept where ``gpu_available``), or with ``derive=False`` its own configuration as
    NVIDIA's container serves it (``total_threads`` and ``gpu_available`` then change nothing)."""
    if derive:
        # A clone that changes the instance count divides the threads anew; the others keep the
        # model's own layout (its CPU overlay's included).
        threads = None
        if entry.is_native and clone.instances:
            threads = threads_per_instance(total_threads, clone.instances)
        config = derive_local_config(entry, gpu_available=gpu_available, intra_op_threads=threads)
    else:
        config = ModelConfig()
        config.CopyFrom(entry.config)
    config.name = entry.name + clone.suffix
    if not clone.batching:
        config.ClearField("dynamic_batching")
    if not clone.ragged:
        for tensor in config.input:
            tensor.allow_ragged_batch = False
    if entry.is_native and clone.instances:
        for group in config.instance_group:
            group.count = clone.instances
        if clone.instances == 1:
            # One instance behind a bounded queue waits for the batcher's 500 ms poll whenever a request
            # arrives as the instance finishes (description/config_rules.py, check_queue_instances): the
            # one-instance arm measures one instance, not that stall.
            config.dynamic_batching.ClearField("default_queue_policy")
    for key, value in clone.overrides_for(entry.name).items():
        if not derive and entry.is_native and key == FILE_PARAMETER:
            continue  # the file itself is copied into the clone (_place_file)
        if key not in config.parameters:
            raise ValueError(
                f"clone {clone.served_name}: {entry.name} has no parameter {key!r} to override; "
                f"its parameters: {', '.join(sorted(config.parameters)) or 'none'}"
            )
        config.parameters[key].string_value = value
    overlay = clone.batcher_overlay(entry.name)
    if overlay is not None:
        apply_overlay(config, overlay)
    for step in config.ensemble_scheduling.step:
        step.model_name += clone.suffix
    return config


def clone_models(
    models: dict[str, ModelEntry],
    clones: list[Clone],
    *,
    total_threads: int,
    gpu_available: bool = False,
    derive: bool = True,
) -> list[DerivedModel]:
    """Every clone's models with their configurations (:func:`clone_config`), each served name once."""
    return [
        DerivedModel(
            entry=models[name],
            config=clone_config(
                models[name], clone, total_threads=total_threads, gpu_available=gpu_available, derive=derive
            ),
            note=clone.describe(),
        )
        for clone, name in _members(models, clones)
    ]


def build_repository(
    source: Path,
    target: Path,
    clones: list[Clone],
    *,
    total_threads: int,
    gpu_available: bool = False,
    derive: bool = True,
) -> dict[str, str]:
    """Write ``target`` with every clone; returns served model name -> sha256 of its config.

    ``derive``: True for the local server (derived configurations, files linked); False for NVIDIA's
    container (each model's own configuration, files copied)."""
    models = load_repository(source)
    derived = clone_models(
        models, clones, total_threads=total_threads, gpu_available=gpu_available, derive=derive
    )
    placement = LINK if derive else COPY
    hashes = write_repository(source, target, derived, placement=placement, made_by=MADE_BY)
    for clone, name in _members(models, clones) if not derive else []:
        replacement = clone.overrides_for(name).get(FILE_PARAMETER)
        if models[name].is_native and replacement:
            _place_file(models[name], target / (name + clone.suffix), Path(replacement))
    return hashes


def _members(models: dict[str, ModelEntry], clones: list[Clone]) -> list[tuple[Clone, str]]:
    """(clone, model name) for every model of every clone, each served name once (the first clone's)."""
    found: dict[str, tuple[Clone, str]] = {}
    for clone in clones:
        members = closure(models, clone.model)
        _check_overridden_models(clone, members)
        for name in members:
            found.setdefault(name + clone.suffix, (clone, name))
    return list(found.values())


def _check_overridden_models(clone: Clone, members: list[str]) -> None:
    named = {model for model, _, _ in clone.parameters} | {model for model, _ in clone.batcher}
    outside = sorted(named - set(members))
    if outside:
        raise ValueError(
            f"clone {clone.served_name} overrides parameters of {', '.join(outside)}, which "
            f"{clone.model} does not call; its models: {', '.join(members)}"
        )


def _place_file(entry: ModelEntry, folder: Path, file: Path) -> None:
    """``file`` as the exported file of every version of ``folder``; the export's manifest beside it
    (where the file was gated: the start-up check reads it) names it and its hash."""
    if not file.is_file():
        raise ValueError(f"{entry.name}: the file to serve, {file}, does not exist; export again")
    filename = entry.model_filename
    assert filename is not None  # a native model
    digest = hashlib.sha256(file.read_bytes()).hexdigest()
    for version in entry.version_dirs:
        destination = folder / version.name / filename
        destination.unlink(missing_ok=True)  # the served file, linked in by the copy
        link_or_copy(file, destination)
        manifest = folder / version.name / EXPORT_MANIFEST
        if manifest.is_file():
            record = json.loads(manifest.read_text(encoding="utf-8"))
            # The export's record of every precision variant stays; these name the file served here instead.
            record.update(artifact_sha256=digest, copied_from=file.name)
            manifest.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")
