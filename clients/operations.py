"""The client's operations, written once for the blocking and the asyncio client.

Each operation is a generator (a :data:`~clients.steps.Task`): it yields the steps it needs done
(clients/steps.py) and receives each step's result, or has the step's exception raised at the ``yield``.
Every server call is tried under the client's retry policy, itself steps (:func:`clients.retry.retrying`).
:class:`~clients.TritonClient` carries the steps out with blocking calls and a thread pool,
:class:`~clients.AsyncTritonClient` awaits them; requests, responses, caching and per-item errors live
here only. Each public function is one method of both clients.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from clients.codec import Classification, ImageInput, check_top_k, coerce_inputs, decode_classifications
from clients.errors import ClientError, InvalidInputError, RequestError, RestrictedApiError
from clients.items import (
    Errors,
    Items,
    check_rows,
    chunks,
    image_items,
    mark,
    rows_tensor,
    settle,
    text_items,
)
from clients.model_info import (
    Health,
    ModelSignature,
    ModelState,
    classifier_roles,
    embedder_roles,
    parse_index,
    parse_signature,
)
from clients.options import DEFAULT_CLASSIFIER, DEFAULT_EMBEDDER, ClientOptions
from clients.retry import NO_RETRY, RetryPolicy, retrying
from clients.shm import SharedRequest
from clients.stats import ModelStatistics, parse_statistics
from clients.steps import Concurrently, InFlight, Pause, Task
from clients.transport import (
    CONFIG,
    INDEX,
    INFER,
    LIVE,
    METADATA,
    READY,
    REGISTER_SHM,
    STATISTICS,
    UNREGISTER_SHM,
    Call,
    Op,
    TransportBase,
)

logger = logging.getLogger(__name__)
Decode = Callable[[dict[str, np.ndarray]], list[Any]]


class Client(Protocol):
    """What an operation reads from the client that runs it (:class:`clients.base.Client`)."""

    options: ClientOptions
    _transport: TransportBase
    _signatures: dict[str, ModelSignature]


STATISTICS_POLL_S = 0.02
# Rows per request in per_request=False mode when the server does not let us read max_batch_size
# (a restricted model-config API): small enough for any batching model here.
FALLBACK_MAX_BATCH_SIZE = 8
# The server may hold a region for a moment after the response has arrived ("Cannot unregister shared
# memory region ..., it is currently in use"): unregistering is retried on that answer for up to ~1.5 s.
UNREGISTER_DELAYS_S = (0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.4, 0.7)


def health(client: Client, *, timeout_s: float | None = None) -> Task[Health]:
    live = yield from _call(client, LIVE, timeout_s=timeout_s)
    ready = yield from _call(client, READY, timeout_s=timeout_s)
    return Health(live=bool(live), ready=bool(ready))


def models(client: Client, *, timeout_s: float | None = None) -> Task[list[ModelState]]:
    """The repository index: every model the server knows, with its state (READY, UNAVAILABLE...)."""
    return parse_index((yield from _call(client, INDEX, timeout_s=timeout_s)))


def statistics(client: Client, model: str, *, timeout_s: float | None = None) -> Task[ModelStatistics]:
    """The newest version's statistics for ``model``."""
    entries = parse_statistics(
        (yield from _call(client, STATISTICS, model, model=model, timeout_s=timeout_s))
    )
    if not entries:
        raise RequestError("the server returned no statistics", model=model)
    return max(entries, key=lambda s: int(s.version) if s.version.isdigit() else -1)


def statistics_since(
    client: Client,
    earlier: ModelStatistics,
    *,
    requests: int,
    wait_s: float = 10.0,
    timeout_s: float | None = None,
) -> Task[ModelStatistics]:
    """What the server counted for ``earlier``'s model since that snapshot, once it counts ``requests``.

    A backend reports an execution's statistics just after it sends the responses, so a client holding
    every answer may read counters that do not include them yet. This reads until the difference
    counts at least ``requests`` requests (rejected and failed ones included) and then until one more
    read, 20 ms later, shows nothing new, or for ``wait_s`` at most: it then returns what it has.
    """
    deadline = time.monotonic() + wait_s
    delta = (yield from statistics(client, earlier.model, timeout_s=timeout_s)).since(earlier)
    while time.monotonic() < deadline:
        yield Pause(STATISTICS_POLL_S)
        latest = (yield from statistics(client, earlier.model, timeout_s=timeout_s)).since(earlier)
        if latest == delta and delta.requests >= requests:
            break
        delta = latest
    return delta


def all_statistics(client: Client, *, timeout_s: float | None = None) -> Task[list[ModelStatistics]]:
    return parse_statistics((yield from _call(client, STATISTICS, "", timeout_s=timeout_s)))


def signature(client: Client, model: str, *, timeout_s: float | None = None) -> Task[ModelSignature]:
    """The model's tensors and max batch size, read from the server once and cached."""
    if model not in client._signatures:
        metadata = yield from _call(client, METADATA, model, model=model, timeout_s=timeout_s)
        try:
            config = yield from _call(client, CONFIG, model, model=model, timeout_s=timeout_s)
        except RestrictedApiError as e:
            logger.info("model config of %s is restricted (%s); batching taken from metadata", model, e)
            config = None
        client._signatures[model] = parse_signature(metadata, config)
    return client._signatures[model]


# -- inference --------------------------------------------------------------------------------------
def infer(
    client: Client, model: str, inputs: Mapping[str, np.ndarray], *, timeout_s: float | None = None
) -> Task[dict[str, np.ndarray]]:
    """One request with the given tensors (batch dimension included); returns every output."""
    spec = yield from signature(client, model, timeout_s=timeout_s)
    return (yield InFlight(_infer_arrays(client, spec, coerce_inputs(spec, inputs), timeout_s)))


def classify(
    client: Client,
    images: Sequence[ImageInput],
    model: str = DEFAULT_CLASSIFIER,
    *,
    top_k: int | None = None,
    per_request: bool | None = None,
    errors: Errors = "raise",
    timeout_s: float | None = None,
) -> Task[list[Classification]]:
    """Top classes per image (bytes or paths), in input order.

    On failure raises the first failing image's error (naming its index and file), with every image's
    result or error on its ``.results``; ``errors="return"`` returns that list instead.
    """
    spec = yield from signature(client, model, timeout_s=timeout_s)
    roles = classifier_roles(spec)
    check_top_k(top_k, spec.output(roles.labels).dims[-1])
    results = yield from _run_items(
        client,
        spec,
        roles.image,
        image_items(images),
        lambda out: decode_classifications(out, roles, top_k),
        per_request,
        timeout_s,
    )
    return settle(results, errors)  # type: ignore[return-value]


def embed(
    client: Client,
    texts: Sequence[str],
    model: str = DEFAULT_EMBEDDER,
    *,
    per_request: bool | None = None,
    errors: Errors = "raise",
    timeout_s: float | None = None,
) -> Task[Any]:
    """Embeddings as an array [len(texts), dim] (``errors="return"``: a list of rows or errors)."""
    spec = yield from signature(client, model, timeout_s=timeout_s)
    roles = embedder_roles(spec)
    results = yield from _run_items(
        client,
        spec,
        roles.text,
        text_items(texts),
        lambda out: list(out[roles.embedding]),
        per_request,
        timeout_s,
    )
    settled = settle(results, errors)
    if errors == "return":
        return settled
    if not settled:
        return np.empty((0, *spec.output(roles.embedding).dims), dtype=np.float32)
    return np.stack(settled)  # type: ignore[arg-type]


# -- internals --------------------------------------------------------------------------------------
def _call(
    client: Client,
    op: Op,
    *args: Any,
    timeout_s: float | None = None,
    retry: RetryPolicy | None = None,
    model: str | None = None,
    input_names: Sequence[str] = (),
    **kwargs: Any,
) -> Task[Any]:
    call = Call(
        op=op,
        args=args,
        kwargs=kwargs,
        timeout_s=timeout_s or client.options.timeout_s,
        model=model,
        input_names=tuple(input_names),
    )
    return (yield from retrying(call, retry or client.options.retry, what=call.what))


def _infer_arrays(
    client: Client, spec: ModelSignature, arrays: Mapping[str, np.ndarray], timeout_s: float | None
) -> Task[dict[str, np.ndarray]]:
    names = list(arrays)
    transport = client._transport
    if not client.options.use_shared_memory:
        tensors, outputs = plain_request(transport, spec, arrays)
        result = yield from _call(
            client,
            INFER,
            spec.name,
            tensors,
            outputs=outputs,
            model=spec.name,
            input_names=names,
            timeout_s=timeout_s,
        )
        return read_outputs(result, spec)
    request = shared_request(spec, arrays)
    try:
        request.create()
        yield from _call(
            client, REGISTER_SHM, request.name, request.key, request.byte_size, timeout_s=timeout_s
        )
        try:
            result = yield from _call(
                client,
                INFER,
                spec.name,
                request.infer_inputs(transport.infer_input),
                outputs=request.requested_outputs(transport.requested_output),
                model=spec.name,
                input_names=names,
                timeout_s=timeout_s,
            )
            return request.read(result)
        finally:
            yield from _unregister(client, request.name)
    finally:
        request.destroy()


def _unregister(client: Client, region: str) -> Task[None]:
    for delay_s in (*UNREGISTER_DELAYS_S, None):
        try:
            yield from _call(client, UNREGISTER_SHM, region, retry=NO_RETRY)
            return
        except ClientError as e:  # the request's own outcome matters more than a cleanup failure
            if delay_s is None or not region_in_use(e):
                logger.warning("could not unregister shared memory region %s: %s", region, e)
                return
            yield Pause(delay_s)


def _run_items(
    client: Client,
    spec: ModelSignature,
    input_name: str,
    items: Items,
    decode: Decode,
    per_request: bool | None,
    timeout_s: float | None,
) -> Task[list[Any]]:
    """Per-item results (a decoded row, or a ClientError naming the item) of one classify()/embed()."""
    results: list[Any] = list(items.payloads)
    valid = [i for i, p in enumerate(items.payloads) if not isinstance(p, ClientError)]

    def rows(indices: list[int]) -> Task[list[Any]]:
        arrays = rows_tensor(items, indices, input_name)
        return decode((yield InFlight(_infer_arrays(client, spec, arrays, timeout_s))))

    def one(index: int) -> Task[Any]:
        try:
            return (yield from rows([index]))[0]
        except ClientError as e:
            return mark(e, index, items)

    def group(indices: list[int]) -> Task[list[Any]]:
        try:
            decoded = yield from rows(indices)
        except InvalidInputError:  # one bad item fails its whole request: find which, keep the others
            return (yield Concurrently([one(i) for i in indices]))
        except ClientError as e:
            return [mark(e, i, items, shared=True) for i in indices]
        return check_rows(decoded, indices, spec.name)

    if client.options.per_request if per_request is None else per_request:
        for index, result in zip(valid, (yield Concurrently([one(i) for i in valid])), strict=True):
            results[index] = result
    else:
        groups = chunks(valid, chunk_size(spec))
        for indices, decoded in zip(groups, (yield Concurrently([group(g) for g in groups])), strict=True):
            for index, result in zip(indices, decoded, strict=True):
                results[index] = result
    return results


# -- building requests and reading responses ---------------------------------------------------------
def chunk_size(signature: ModelSignature) -> int:
    if signature.max_batch_size > 0:
        return signature.max_batch_size
    return FALLBACK_MAX_BATCH_SIZE if signature.max_batch_size < 0 else 1


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


def region_in_use(error: ClientError) -> bool:
    return "in use" in error.server_message
