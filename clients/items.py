"""Per-item bookkeeping of the batch operations (classify, embed): each item's payload or its own error,
chunks of items per request, and the results settled into a list or a raised error."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar

import numpy as np

from clients.codec import ImageInput, bytes_rows, describe_image, describe_text, read_image
from clients.errors import ClientError, InvalidInputError, RequestError

R = TypeVar("R")
Errors = Literal["raise", "return"]


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


def check_rows(decoded: list[R], indices: Sequence[int], model: str) -> list[R]:
    """The decoded rows of one batched request, checked to be one per item sent."""
    if len(decoded) != len(indices):
        raise RequestError(f"sent {len(indices)} rows but got {len(decoded)} results back", model=model)
    return decoded
