"""Between Python values and tensors: image and text payloads in, typed results out."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from clients.errors import InvalidInputError
from clients.model_info import ClassifierRoles, ModelSignature

ImageInput = bytes | bytearray | memoryview | str | os.PathLike
_PREVIEW_CHARS = 40


@dataclass(frozen=True, kw_only=True)
class Classification:
    """The top classes for one image, best first."""

    labels: tuple[str, ...]
    class_ids: tuple[int, ...]
    scores: tuple[float, ...]

    def __post_init__(self) -> None:
        if not len(self.labels) == len(self.class_ids) == len(self.scores):
            raise ValueError(
                f"labels, class_ids and scores must have one entry per class, got "
                f"{len(self.labels)}, {len(self.class_ids)} and {len(self.scores)}"
            )

    @property
    def top(self) -> tuple[str, float]:
        return self.labels[0], self.scores[0]

    def to_dict(self) -> dict[str, list]:
        return {"labels": list(self.labels), "class_ids": list(self.class_ids), "scores": list(self.scores)}


def describe_image(item: ImageInput) -> str | None:
    """A short name for an image input in error messages: its file name, or None for raw bytes."""
    return None if isinstance(item, (bytes, bytearray, memoryview)) else Path(item).name


def describe_text(text: str) -> str:
    return repr(text if len(text) <= _PREVIEW_CHARS else text[: _PREVIEW_CHARS - 3] + "...")


def read_image(item: ImageInput) -> bytes:
    """The encoded bytes of an image given as bytes or as a path (str or Path)."""
    if isinstance(item, (bytes, bytearray, memoryview)):
        return bytes(item)
    if isinstance(item, (str, os.PathLike)):
        try:
            return Path(item).read_bytes()
        except OSError as e:
            raise InvalidInputError(f"cannot read image file: {e.strerror or e}") from e
    raise InvalidInputError(f"an image must be bytes or a path, got {type(item).__name__}")


def bytes_rows(values: Sequence[bytes]) -> np.ndarray:
    """A [n, 1] BYTES tensor, one value per row (the shape of IMAGE_BYTES / TEXT batches)."""
    array = np.empty((len(values), 1), dtype=np.object_)
    for row, value in enumerate(values):
        array[row, 0] = value
    return array


def decode_classifications(
    outputs: Mapping[str, np.ndarray], roles: ClassifierRoles, top_k: int | None
) -> list[Classification]:
    labels, ids, scores = outputs[roles.labels], outputs[roles.class_ids], outputs[roles.scores]
    k = check_top_k(top_k, labels.shape[-1])
    return [
        Classification(
            labels=tuple(_text(v) for v in labels[row, :k]),
            class_ids=tuple(int(v) for v in ids[row, :k]),
            scores=tuple(float(v) for v in scores[row, :k]),
        )
        for row in range(labels.shape[0])
    ]


def check_top_k(top_k: int | None, available: int) -> int:
    """The number of classes to keep: ``top_k``, checked against what the model returns."""
    if top_k is None:
        return available
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= available:
        raise ValueError(
            f"top_k must be an integer from 1 to {available} (what the model returns), got {top_k!r}"
        )
    return top_k


def coerce_inputs(signature: ModelSignature, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Check ``inputs`` against the model's metadata and cast each to its declared datatype."""
    missing = [s.name for s in signature.inputs if s.name not in inputs]
    if missing:
        raise InvalidInputError(f"missing input(s) {', '.join(missing)}", model=signature.name)
    coerced = {}
    for name, value in inputs.items():
        spec = signature.input(name)
        array = np.asarray(value)
        expected_rank = len(spec.dims) + (1 if signature.batches else 0)
        if array.ndim != expected_rank:
            batch = "[batch, " if signature.batches else "["
            raise InvalidInputError(
                f"{name}: expected {expected_rank} dimensions ({batch}{', '.join(map(str, spec.dims))}]), "
                f"got shape {list(array.shape)}",
                model=signature.name,
            )
        if spec.datatype == "BYTES":
            coerced[name] = array.astype(np.object_)
        else:
            try:
                coerced[name] = array.astype(spec.numpy_dtype, casting="same_kind", copy=False)
            except TypeError as e:
                raise InvalidInputError(
                    f"{name}: cannot send {array.dtype} as {spec.datatype}: {e}", model=signature.name
                ) from e
    return coerced


def _text(value: object) -> str:
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)
