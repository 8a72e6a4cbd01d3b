"""The operations both clients share, carried out by each client against a fake server: same answers."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from clients import (
    AsyncTritonClient,
    Health,
    InvalidInputError,
    RetryPolicy,
    ServerUnavailableError,
    TritonClient,
)
from clients.errors import RestrictedApiError
from clients.stats import parse_statistics
from clients.transport import Call

METADATA = {
    "name": "embedder",
    "inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [-1, 1]}],
    "outputs": [{"name": "EMBEDDING", "datatype": "FP32", "shape": [-1, 3]}],
}


class FakeResult:
    """An embedding row per text sent, each filled with the number of texts in its request."""

    def __init__(self, rows: int) -> None:
        self.rows = rows

    def as_numpy(self, name: str) -> np.ndarray:
        return np.full((self.rows, 3), float(self.rows), dtype=np.float32)


class FakeServer:
    """Answers the clients' calls: live, not ready, metadata but a restricted config, inference."""

    def __init__(
        self, *, unavailable_from_row: int | None = None, invalid_from_row: int | None = None
    ) -> None:
        self.unavailable_from_row = unavailable_from_row
        self.invalid_from_row = invalid_from_row
        self.calls: list[str] = []

    def answer(self, call: Call) -> Any:
        self.calls.append(call.op.method)
        answers: dict[str, Callable[[], Any]] = {
            "is_server_live": lambda: True,
            "is_server_ready": lambda: False,
            "get_model_metadata": lambda: METADATA,
            "get_model_config": self._restricted,
            "infer": lambda: self._infer(call),
        }
        return answers[call.op.method]()

    def _restricted(self) -> Any:
        raise RestrictedApiError("This API is restricted, expecting header 'triton-admin-key'")

    def _infer(self, call: Call) -> FakeResult:
        rows = call.args[1][0].shape()[0]
        if self.unavailable_from_row is not None and rows >= self.unavailable_from_row:
            raise ServerUnavailableError("down")
        if self.invalid_from_row is not None and rows >= self.invalid_from_row:
            raise InvalidInputError("TEXT: one of these is bad")
        return FakeResult(rows)


@pytest.fixture(params=["blocking", "asyncio"])
def call_client(request: pytest.FixtureRequest) -> Callable[..., Any]:
    """call_client(server, method, *args, **kwargs): the method's result on a fresh client of each kind."""
    options = {"retry": RetryPolicy(max_attempts=1), "max_in_flight": 2}

    def blocking(server: FakeServer, method: str, *args: Any, **kwargs: Any) -> Any:
        with TritonClient("http://127.0.0.1:9", **options) as client:
            client._transport.call = server.answer  # type: ignore[method-assign]
            return getattr(client, method)(*args, **kwargs)

    def awaited(server: FakeServer, method: str, *args: Any, **kwargs: Any) -> Any:
        async def run() -> Any:
            async def answer(call: Call) -> Any:
                return server.answer(call)

            async with AsyncTritonClient("http://127.0.0.1:9", **options) as client:
                client._transport.call = answer  # type: ignore[method-assign]
                return await getattr(client, method)(*args, **kwargs)

        return asyncio.run(run())

    return blocking if request.param == "blocking" else awaited


def test_each_client_asks_the_same_calls_and_returns_the_same_answer(call_client: Callable) -> None:
    server = FakeServer()
    assert call_client(server, "health") == Health(live=True, ready=False)
    assert server.calls == ["is_server_live", "is_server_ready"]


def test_a_failed_call_is_raised_inside_the_operation_which_handles_it(call_client: Callable) -> None:
    signature = call_client(FakeServer(), "signature", "embedder")
    assert signature.max_batch_size == -1, "restricted config: batching read from the metadata's shapes"
    assert [s.name for s in signature.outputs] == ["EMBEDDING"]


def test_batched_requests_run_concurrently_and_their_rows_return_in_input_order(
    call_client: Callable,
) -> None:
    texts = [f"text {i}" for i in range(19)]  # no max_batch_size known: requests of 8, 8 and 3 rows
    vectors = call_client(FakeServer(), "embed", texts, "embedder", per_request=False)
    assert vectors.shape == (19, 3)
    assert list(vectors[:, 0]) == [8.0] * 16 + [3.0] * 3


def test_a_failed_batch_marks_each_of_its_items_and_keeps_the_others(call_client: Callable) -> None:
    texts = [f"text {i}" for i in range(10)]  # requests of 8 (fail) and 2 rows (succeed)
    server = FakeServer(unavailable_from_row=8)
    results = call_client(server, "embed", texts, "embedder", per_request=False, errors="return")
    assert [type(r).__name__ for r in results] == ["ServerUnavailableError"] * 8 + ["ndarray"] * 2
    assert [r.index for r in results[:8]] == list(range(8)) and results[0] is not results[1]


def test_a_batch_refused_for_bad_input_is_retried_item_by_item_from_within_the_pool(
    call_client: Callable,
) -> None:
    texts = [f"text {i}" for i in range(19)]  # every batch is refused, every single text is answered
    vectors = call_client(FakeServer(invalid_from_row=2), "embed", texts, "embedder", per_request=False)
    assert vectors.shape == (19, 3) and set(vectors[:, 0]) == {1.0}


def _counters(requests: int, executions: int) -> dict[str, Any]:
    stats = {"success": {"count": requests, "ns": 1000 * requests}}
    return {
        "model_stats": [
            {
                "name": "embedder",
                "version": "1",
                "inference_count": requests,
                "execution_count": executions,
                "inference_stats": stats,
            }
        ]
    }


class CountingLateServer(FakeServer):
    """Statistics that count the answered requests a few reads late: first the requests, then the batch."""

    def __init__(self, reads: list[tuple[int, int]]) -> None:
        super().__init__()
        self.reads = reads

    def answer(self, call: Call) -> Any:
        if call.op.method != "get_inference_statistics":
            return super().answer(call)
        self.calls.append(call.op.method)
        return _counters(*self.reads[min(len(self.calls) - 1, len(self.reads) - 1)])


def test_statistics_since_waits_until_the_requests_are_counted_and_settled(call_client: Callable) -> None:
    before = parse_statistics(_counters(10, 5))[0]
    server = CountingLateServer([(10, 5), (10, 5), (13, 5), (13, 6), (13, 6)])
    delta = call_client(server, "statistics_since", before, requests=3)
    assert (delta.requests, delta.executions) == (3, 1)
    assert len(server.calls) == 5, "read until two reads in a row agree"


def test_statistics_since_returns_what_it_has_once_its_wait_is_over(call_client: Callable) -> None:
    before = parse_statistics(_counters(10, 5))[0]
    delta = call_client(CountingLateServer([(11, 6)]), "statistics_since", before, requests=3, wait_s=0.1)
    assert (delta.requests, delta.executions) == (1, 1)
