"""What the server says about itself and a model: health, tensors (from its metadata), batching (from
its config), state.

Nothing here names a tensor. The roles the client needs are derived from the metadata:
- classify: the model's only input is BYTES; outputs are the BYTES one (labels), the integer one (class
  ids) and the floating-point one (scores);
- embed: the only input is BYTES; the only floating-point output is the embedding.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from clients.errors import InvalidInputError
from tritonrepo.tensors import TensorSpec

_INTEGER = ("INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64")
_FLOAT = ("FP16", "FP32", "FP64", "BF16")


@dataclass(frozen=True, kw_only=True)
class Health:
    live: bool
    ready: bool


@dataclass(frozen=True, kw_only=True)
class ModelSignature:
    """A model's inputs and outputs, and its largest batch (0: the model does not batch)."""

    name: str
    platform: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    max_batch_size: int

    @property
    def batches(self) -> bool:
        """True for a batching model (``max_batch_size`` -1: batching, maximum unknown)."""
        return self.max_batch_size != 0

    def input(self, name: str) -> TensorSpec:
        for spec in self.inputs:
            if spec.name == name:
                return spec
        expected = ", ".join(s.name for s in self.inputs)
        raise InvalidInputError(f"model has no input {name!r}; its inputs are: {expected}", model=self.name)

    def output(self, name: str) -> TensorSpec:
        for spec in self.outputs:
            if spec.name == name:
                return spec
        raise InvalidInputError(f"model has no output {name!r}", model=self.name)


@dataclass(frozen=True, kw_only=True)
class ModelState:
    """One row of the repository index."""

    name: str
    version: str
    state: str
    reason: str = ""

    @property
    def ready(self) -> bool:
        return self.state == "READY"


@dataclass(frozen=True, kw_only=True)
class ClassifierRoles:
    image: str
    labels: str
    class_ids: str
    scores: str


@dataclass(frozen=True, kw_only=True)
class EmbedderRoles:
    text: str
    embedding: str


def parse_signature(metadata: Mapping[str, Any], config: Mapping[str, Any] | None) -> ModelSignature:
    """Build a signature from model metadata and, when the server let us read it, the model config.

    Without the config (a server that restricts the model-config API), a leading -1 in every tensor
    shape is taken to mean batching, with an unknown maximum (-1).
    """
    inputs, outputs = metadata.get("inputs", []), metadata.get("outputs", [])
    shapes = [[int(d) for d in t.get("shape", [])] for t in (*inputs, *outputs)]
    if config is not None:
        max_batch_size = int(config.get("max_batch_size", 0))
    else:
        max_batch_size = -1 if shapes and all(s and s[0] == -1 for s in shapes) else 0
    skip = 1 if max_batch_size != 0 else 0

    def spec(t: Mapping[str, Any]) -> TensorSpec:
        dims = tuple(int(d) for d in t.get("shape", []))[skip:]
        return TensorSpec(name=str(t["name"]), datatype=str(t["datatype"]), dims=dims)

    return ModelSignature(
        name=str(metadata["name"]),
        platform=str(metadata.get("platform", "")),
        inputs=tuple(spec(t) for t in inputs),
        outputs=tuple(spec(t) for t in outputs),
        max_batch_size=max_batch_size,
    )


def classifier_roles(signature: ModelSignature) -> ClassifierRoles:
    image = _single_bytes_input(signature, "classify")
    labels = _one_output(signature, ("BYTES",), "labels (BYTES)")
    class_ids = _one_output(signature, _INTEGER, "class ids (integer)")
    scores = _one_output(signature, _FLOAT, "scores (floating point)")
    return ClassifierRoles(image=image, labels=labels, class_ids=class_ids, scores=scores)


def embedder_roles(signature: ModelSignature) -> EmbedderRoles:
    text = _single_bytes_input(signature, "embed")
    return EmbedderRoles(text=text, embedding=_one_output(signature, _FLOAT, "embedding (floating point)"))


def _single_bytes_input(signature: ModelSignature, task: str) -> str:
    if len(signature.inputs) != 1 or signature.inputs[0].datatype != "BYTES":
        found = ", ".join(f"{s.name} {s.datatype}" for s in signature.inputs)
        raise InvalidInputError(
            f"{task}() needs a model with a single BYTES input; {signature.name} has: {found}; "
            "use infer() for other models",
            model=signature.name,
        )
    if not signature.batches:
        raise InvalidInputError(
            f"{task}() needs a batching model (max_batch_size > 0); "
            f"{signature.name} does not batch; use infer()",
            model=signature.name,
        )
    return signature.inputs[0].name


def _one_output(signature: ModelSignature, datatypes: tuple[str, ...], role: str) -> str:
    found = [s.name for s in signature.outputs if s.datatype in datatypes]
    if len(found) != 1:
        raise InvalidInputError(
            f"cannot tell which output of {signature.name} holds the {role}: candidates {found or 'none'} "
            f"among {', '.join(f'{s.name} {s.datatype}' for s in signature.outputs)}; use infer()",
            model=signature.name,
        )
    return found[0]


def parse_index(payload: Any) -> list[ModelState]:
    """The repository index from either protocol (HTTP: a list; gRPC JSON: ``{"models": [...]}``)."""
    rows = payload.get("models", []) if isinstance(payload, Mapping) else payload
    return [
        ModelState(
            name=str(r["name"]),
            version=str(r.get("version", "")),
            state=str(r.get("state", "")),
            reason=str(r.get("reason", "")),
        )
        for r in rows
    ]
