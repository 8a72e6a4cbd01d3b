"""What the blocking and the asyncio client share: options, request building, per-item bookkeeping."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import numpy as np

from clients.codec import ImageInput, bytes_rows, describe_image, describe_text, read_image
from clients.errors import ClientError, InvalidInputError, RequestError
from clients.model_info import ModelSignature
from clients.retry import RetryPolicy
from clients.shm import SharedRequest

R = TypeVar("R")
Errors = Literal["raise", "return"]
DEFAULT_CLASSIFIER = "image_classifier"
DEFAULT_EMBEDDER = "text_embedder"
# Rows per request in per_request=False mode when the server does not let us read max_batch_size
# (a restricted model-config API): small enough for any batching model here.
FALLBACK_MAX_BATCH_SIZE = 8
# The server may hold a region for a moment after the response has arrived ("Cannot unregister shared
# memory region ..., it is currently in use"): unregistering is retried on that answer for up to ~1.5 s.
UNREGISTER_DELAYS_S = (0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.4, 0.7)


@dataclass(frozen=True, kw_only=True)
class ClientOptions:
    """Settings shared by TritonClient and AsyncTritonClient.

    ``per_request``: classify()/embed() send each item as its own request (default) and let the
    server's dynamic batcher form batches, with at most ``max_in_flight`` requests outstanding;
    False sends the items as batched requests of up to the model's max_batch_size rows.
    ``use_shared_memory``: pass tensors through system shared memory (client and server on one host).
    ``headers``: sent with every call, e.g. {"triton-admin-key": ...} for restricted APIs.
    """

    timeout_s: float = 30.0
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    per_request: bool = True
    max_in_flight: int = 16
    use_shared_memory: bool = False
    headers: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.timeout_s > 0:
            raise ValueError(f"timeout_s must be positive (seconds), got {self.timeout_s}")
        if self.max_in_flight < 1:
            raise ValueError(f"max_in_flight must be at least 1, got {self.max_in_flight}")
        if not isinstance(self.retry, RetryPolicy):
            raise TypeError(f"retry must be a RetryPolicy, got {type(self.retry).__name__}")


@dataclass(frozen=True, kw_only=True)
class Health:
    live: bool
    ready: bool


@dataclass(frozen=True, kw_only=True)
class Items:
    """A batch call's inputs as tensor rows, with a name for each in error messages."""

    noun: str
    payloads: list[bytes | ClientError]
    names: Sequence[str | None]


def image_items(images: Sequence[ImageInput]) -> Items:
    payloads: list[bytes | ClientError] = []
    for image in images:
        try:
            payloads.append(read_image(image))
        except ClientError as e:
            payloads.append(e)
    return _marked(Items(noun="image", payloads=payloads, names=[describe_image(i) for i in images]))


def text_items(texts: Sequence[str]) -> Items:
    if isinstance(texts, str):
        raise TypeError("texts must be a sequence of strings, not one string; wrap it: embed([text])")
    payloads: list[bytes | ClientError] = []
    for text in texts:
        if isinstance(text, str):
            payloads.append(text.encode("utf-8"))
        else:
            payloads.append(InvalidInputError(f"a text must be a str, got {type(text).__name__}"))
    names = [describe_text(t) if isinstance(t, str) else None for t in texts]
    return _marked(Items(noun="text", payloads=payloads, names=names))


def _marked(items: Items) -> Items:
    for index, payload in enumerate(items.payloads):
        if isinstance(payload, ClientError):
            payload.at(index, items.names[index], items.noun)
    return items


def chunks(indices: Sequence[int], size: int) -> list[list[int]]:
    return [list(indices[start : start + size]) for start in range(0, len(indices), size)]


def chunk_size(signature: ModelSignature) -> int:
    if signature.max_batch_size > 0:
        return signature.max_batch_size
    return FALLBACK_MAX_BATCH_SIZE if signature.max_batch_size < 0 else 1


def rows_tensor(items: Items, indices: Sequence[int], name: str) -> dict[str, np.ndarray]:
    payloads = [items.payloads[i] for i in indices]
    assert all(isinstance(p, bytes) for p in payloads), "only valid payloads are sent"
    return {name: bytes_rows(payloads)}  # type: ignore[arg-type]


def mark(error: ClientError, index: int, items: Items, *, shared: bool = False) -> ClientError:
    """``error`` marked with the failing item; ``shared``: the error is one of several, copy it first."""
    marked = copy.copy(error) if shared else error
    return marked.at(index, items.names[index], items.noun)


def settle(results: list[R | ClientError], errors: Errors) -> list[R | ClientError]:
    """Return the per-item results, or raise the first error with all results on its ``.results``."""
    if errors not in ("raise", "return"):
        raise ValueError(f"errors must be 'raise' or 'return', got {errors!r}")
    if errors == "raise":
        failed = [r for r in results if isinstance(r, ClientError)]
        if failed:
            first = failed[0]
            first.results = results  # type: ignore[attr-defined]
            if len(failed) > 1:
                first.server_message += f" (and {len(failed) - 1} more failed; see .results)"
            raise first
    return results


def plain_request(
    transport: Any, signature: ModelSignature, arrays: Mapping[str, np.ndarray]
) -> tuple[list, list]:
    """tritonclient InferInputs carrying ``arrays`` and requested outputs for every model output."""
    tensors = []
    for name, array in arrays.items():
        spec = signature.input(name)
        tensor = transport.infer_input(name, list(array.shape), spec.datatype)
        tensor.set_data_from_numpy(array)
        tensors.append(tensor)
    return tensors, [transport.requested_output(s.name) for s in signature.outputs]


def shared_request(signature: ModelSignature, arrays: Mapping[str, np.ndarray]) -> SharedRequest:
    rows = next(iter(arrays.values())).shape[0] if signature.batches and arrays else None
    return SharedRequest(arrays, signature.outputs, rows)


def read_outputs(result: Any, signature: ModelSignature) -> dict[str, np.ndarray]:
    return {spec.name: result.as_numpy(spec.name) for spec in signature.outputs}


def check_rows(decoded: list[R], indices: Sequence[int], model: str) -> list[R]:
    """The decoded rows of one batched request, checked to be one per item sent."""
    if len(decoded) != len(indices):
        raise RequestError(f"sent {len(indices)} rows but got {len(decoded)} results back", model=model)
    return decoded


def region_in_use(error: ClientError) -> bool:
    return "in use" in error.server_message
