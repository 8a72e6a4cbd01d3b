"""Which failures are retried, how long the client waits between tries, and how often it tries: the retry
policy's steps carried out by each client, blocking and asyncio."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest
from geventhttpclient.response import HTTPConnectionClosed
from tritonclient.utils import InferenceServerException

from clients import AsyncTritonClient, TritonClient, errors
from clients.retry import RetryPolicy, retrying
from clients.transport import Call, Op


def _server(message: str, status: str) -> InferenceServerException:
    return InferenceServerException(msg=message, status=status)


# Answers as tritonserver 2.51 and tritonclient give them: the texts and codes recorded from a live server
# (see docs/failure-modes.md and the integration tests), and what the client makes of each.
QUEUE_FULL = "[request id: <id_unknown>] Exceeds maximum queue size"
HTTP_RESTRICTED = "This API is restricted, expecting header 'triton-admin-key'"
GRPC_RESTRICTED = "This protocol is restricted, expecting header 'triton-grpc-protocol-triton-admin-key'"
IMAGE_TOO_LARGE = "IMAGE_BYTES: image too large: 20971523 bytes is over the limit"
BATCH_TOO_LARGE = "[request id: <id_unknown>] inference request batch-size must be <= 64 for 'l2_normalize'"
ANSWERS = [
    (ConnectionRefusedError(111, "Connection refused"), errors.ServerUnavailableError),
    (aiohttp.ClientConnectionError("Cannot connect to host"), errors.ServerUnavailableError),
    (HTTPConnectionClosed("connection closed."), errors.ServerUnavailableError),
    (_server("failed to connect to all addresses", "StatusCode.UNAVAILABLE"), errors.ServerUnavailableError),
    (_server("Server is unavailable", "503"), errors.ServerUnavailableError),
    (_server("in ensemble 'text_embedder', Request timeout expired", "503"), errors.ServerOverloadedError),
    (_server("Request timeout expired", "StatusCode.UNAVAILABLE"), errors.ServerOverloadedError),
    (_server(QUEUE_FULL, "503"), errors.ServerOverloadedError),
    (
        _server(f"in ensemble 'text_embedder', {QUEUE_FULL}", "StatusCode.UNAVAILABLE"),
        errors.ServerOverloadedError,
    ),
    (_server(HTTP_RESTRICTED, "403"), errors.RestrictedApiError),
    (_server(GRPC_RESTRICTED, "StatusCode.UNAVAILABLE"), errors.RestrictedApiError),
    (_server("unexpected inference input 'X' for model 'm'", "400"), errors.InvalidInputError),
    (_server("unexpected shape for input 'X'", "StatusCode.INVALID_ARGUMENT"), errors.InvalidInputError),
    (_server(f"in ensemble 'image_classifier', {IMAGE_TOO_LARGE}", "400"), errors.InvalidInputError),
    (_server("TEXT: not valid UTF-8 at byte 0", "StatusCode.INVALID_ARGUMENT"), errors.InvalidInputError),
    (_server(BATCH_TOO_LARGE, "400"), errors.InvalidInputError),
    (_server("Request for unknown model: 'nope' is not found", "404"), errors.ModelNotFoundError),
    (
        _server("Request for unknown model: 'nope' is not found", "StatusCode.NOT_FOUND"),
        errors.ModelNotFoundError,
    ),
    (
        _server("Request for unknown model: 'l2_normalize' version 7 is not found", "StatusCode.NOT_FOUND"),
        errors.ModelNotFoundError,
    ),
    (_server("Stub process 'l2_normalize_0_0' is not healthy.", "500"), errors.ModelRestartingError),
    (
        _server(
            "in ensemble 'text_embedder', Failed to process the request(s) for model 'text_tokenizer_0_0', "
            "message: Stub process 'text_tokenizer_0_0' is not healthy.",
            "StatusCode.INTERNAL",
        ),
        errors.ModelRestartingError,
    ),
    (
        _server(
            "Request for unknown model: 'l2_normalize' has no available versions", "StatusCode.NOT_FOUND"
        ),
        errors.ModelRestartingError,
    ),
    (_server("inference failed: [ONNXRuntimeError] : 2 : INVALID_ARGUMENT", "500"), errors.RequestError),
    (_server("Deadline Exceeded", "StatusCode.DEADLINE_EXCEEDED"), errors.ClientTimeoutError),
    (TimeoutError("timed out"), errors.ClientTimeoutError),
    (asyncio.TimeoutError(), errors.ClientTimeoutError),
]


@pytest.mark.parametrize(("error", "expected"), ANSWERS)
def test_each_answer_is_classified_as_its_client_error(
    error: BaseException, expected: type[errors.ClientError]
) -> None:
    wrapped = errors.wrap_error(error, model="m", input_names=["TEXT"])
    assert type(wrapped) is expected
    assert wrapped.model == "m"


@pytest.mark.parametrize("expected", sorted({e for _, e in ANSWERS}, key=lambda e: e.__name__))
def test_only_an_unavailable_or_overloaded_server_is_worth_a_retry(
    expected: type[errors.ClientError],
) -> None:
    assert expected("x").retryable is issubclass(expected, errors.ServerUnavailableError)


def test_a_models_own_error_naming_an_input_is_bad_input_not_a_server_fault() -> None:
    error = _server("in ensemble 'image_classifier', IMAGE_BYTES: cannot decode image", "StatusCode.INTERNAL")
    assert type(errors.wrap_error(error, input_names=["IMAGE_BYTES"])) is errors.InvalidInputError
    assert type(errors.wrap_error(error, input_names=["TEXT"])) is errors.RequestError


def test_programming_errors_are_not_wrapped() -> None:
    assert errors.wrap_error(ValueError("bug")) is None


def test_an_error_names_the_failing_item_of_a_batch_and_keeps_the_servers_message() -> None:
    error = errors.InvalidInputError("IMAGE_BYTES: cannot decode image", model="image_classifier").at(
        3, "cat.jpg", "image"
    )
    assert str(error) == "image 3 (cat.jpg): IMAGE_BYTES: cannot decode image [model image_classifier]"
    assert error.to_dict()["index"] == 3 and error.server_message == "IMAGE_BYTES: cannot decode image"


def test_the_backoff_cap_doubles_from_the_base_up_to_the_maximum() -> None:
    policy = RetryPolicy(max_attempts=10, base_delay_s=0.1, max_delay_s=1.0)
    assert [policy.delay_cap_s(n) for n in range(1, 7)] == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0])
    assert policy.delay_cap_s(10_000) == 1.0  # no overflow for absurd attempt numbers


def test_full_jitter_delays_stay_within_zero_and_the_cap_and_spread_out() -> None:
    policy = RetryPolicy(max_attempts=5, base_delay_s=0.1, max_delay_s=0.3)
    rng = random.Random(7)
    for failed in range(1, 5):
        delays = [policy.delay_s(failed, rng) for _ in range(500)]
        cap = policy.delay_cap_s(failed)
        assert all(0.0 <= d <= cap for d in delays)
        assert max(delays) > 0.8 * cap and min(delays) < 0.2 * cap  # spread over the whole range


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_attempts": 0}, "max_attempts must be at least 1"),
        ({"deadline_s": -1.0}, "deadline_s must be >= 0"),
        ({"base_delay_s": -1.0}, "must be >= 0"),
        ({"base_delay_s": 2.0, "max_delay_s": 1.0}, "must be at least base_delay_s"),
    ],
)
def test_a_retry_policy_rejects_impossible_settings(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RetryPolicy(**kwargs)


def test_retry_policy_is_keyword_only_and_frozen() -> None:
    with pytest.raises(TypeError):
        RetryPolicy(3)  # type: ignore[misc]
    with pytest.raises(AttributeError):
        RetryPolicy().max_attempts = 9  # type: ignore[misc]


def _failing(failures: list[errors.ClientError], calls: list[int]) -> Callable[[], str]:
    def call() -> str:
        calls.append(1)
        if len(calls) <= len(failures):
            raise failures[len(calls) - 1]
        return "ok"

    return call


@pytest.fixture(params=["blocking", "asyncio"])
def run_retrying(request: pytest.FixtureRequest) -> Callable[[Callable[[], str], RetryPolicy], str]:
    """run_retrying(call, policy): a server call answered by ``call``, retried under ``policy`` by a fresh
    client of each kind, as an operation retries each of its calls."""
    attempt = Call(op=Op("is_server_live"), timeout_s=1.0)

    def blocking(call: Callable[[], str], policy: RetryPolicy) -> str:
        with TritonClient("http://127.0.0.1:9") as client:
            client._transport.call = lambda step: call()  # type: ignore[method-assign]
            return client._run(retrying(attempt, policy, what="t"))

    def awaited(call: Callable[[], str], policy: RetryPolicy) -> str:
        async def answer(step: Any) -> str:
            return call()

        async def run() -> str:
            async with AsyncTritonClient("http://127.0.0.1:9") as client:
                client._transport.call = answer  # type: ignore[method-assign]
                return await client._run(retrying(attempt, policy, what="t"))

        return asyncio.run(run())

    return blocking if request.param == "blocking" else awaited


FAST = RetryPolicy(max_attempts=4, base_delay_s=0.0, max_delay_s=0.0)


def test_retryable_failures_are_retried_until_success(run_retrying: Callable) -> None:
    calls: list[int] = []
    failures: list[errors.ClientError] = [
        errors.ServerUnavailableError("down"),
        errors.ServerOverloadedError("queue full"),
    ]
    assert run_retrying(_failing(failures, calls), FAST) == "ok"
    assert len(calls) == 3


def test_retryable_failures_stop_after_max_attempts_and_report_the_count(run_retrying: Callable) -> None:
    calls: list[int] = []
    with pytest.raises(errors.ServerUnavailableError) as raised:
        run_retrying(_failing([errors.ServerUnavailableError("down")] * 10, calls), FAST)
    assert len(calls) == 4 and raised.value.attempts == 4


def test_retryable_failures_are_retried_until_the_deadline_whatever_their_count(
    run_retrying: Callable,
) -> None:
    calls: list[int] = []
    policy = RetryPolicy(deadline_s=0.5, base_delay_s=0.01, max_delay_s=0.01)
    started = time.monotonic()
    with pytest.raises(errors.ModelRestartingError) as raised:
        run_retrying(
            _failing([errors.ModelRestartingError("Stub process 'm_0_0' is not healthy.")] * 10**6, calls),
            policy,
        )
    elapsed_s = time.monotonic() - started
    # Tries stop once the next one would start past the deadline; none is cut short by a count.
    assert 0.49 <= elapsed_s < 5.0 and len(calls) == raised.value.attempts > 4


def test_a_failure_that_outlasts_no_deadline_is_tried_once(run_retrying: Callable) -> None:
    calls: list[int] = []
    with pytest.raises(errors.ServerUnavailableError) as raised:
        run_retrying(_failing([errors.ServerUnavailableError("down")] * 3, calls), RetryPolicy(deadline_s=0))
    assert len(calls) == 1 and raised.value.attempts == 1


def test_the_default_policy_rides_out_a_repair_of_seconds() -> None:
    policy = RetryPolicy()
    assert policy.max_attempts is None and policy.deadline_s >= 15  # a full local repository reloads in ~15 s


@pytest.mark.parametrize(
    "error",
    [
        errors.InvalidInputError("bad"),
        errors.RestrictedApiError("restricted"),
        errors.ClientTimeoutError("slow"),
        errors.ModelNotFoundError("nope"),
    ],
)
def test_final_failures_are_not_retried(error: errors.ClientError, run_retrying: Callable) -> None:
    calls: list[int] = []
    with pytest.raises(type(error)):
        run_retrying(_failing([error] * 10, calls), FAST)
    assert len(calls) == 1


def test_a_retry_waits_a_pause_step_within_the_backoff_cap() -> None:
    policy = RetryPolicy(max_attempts=3, base_delay_s=0.1, max_delay_s=0.1)
    steps = retrying("attempt", policy, what="t")
    assert next(steps) == "attempt"
    pause = steps.throw(errors.ServerUnavailableError("down"))
    assert 0.0 <= pause.seconds <= 0.1
    assert steps.send(None) == "attempt"
    with pytest.raises(StopIteration) as stop:
        steps.send("answer")
    assert stop.value.value == "answer"
