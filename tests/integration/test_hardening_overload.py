"""Overload: a burst far past capacity is answered fast, accepted requests keep a bounded latency.

Each model's dynamic batcher has a ``default_queue_policy`` (max_queue_size, a queue timeout, REJECT;
see the config.pbtxt comments). Past it, Triton 2.51 answers HTTP 503 / gRPC UNAVAILABLE with
"Exceeds maximum queue size" (queue full) or "Request timeout expired" (waited too long); inside an
ensemble the step's rejection reaches the client prefixed with "in ensemble '<name>', ". The client
library classes both as retryable and retries them with backoff.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
import tritonclient.http as httpclient
import tritonclient.http.aio as httpaio
from tritonclient.utils import InferenceServerException

from clients import AsyncTritonClient, RetryPolicy, ServerUnavailableError
from clients.errors import wrap_error
from tritonlocal import LocalTritonServer

MODEL = "text_embedder"
BURST_S_OF_WORK = 4.0  # the burst holds this many seconds of work at the measured throughput
HTTP_CONNECTIONS = 512
P99_BOUND_S = 5.0  # generous: three steps, each may queue up to 1 s, plus compute on 2 busy cores
STATUS = {"http": "503", "grpc": "StatusCode.UNAVAILABLE"}
INPUT, OUTPUT = "TEXT", "EMBEDDING"  # checked against the server's metadata by the fixture below


def _texts(count: int, offset: int = 0) -> list[bytes]:
    return [
        f"Sentence {offset + i} is about cats, dogs and the weather today.".encode() for i in range(count)
    ]


async def _one(client: Any, module: Any, text: bytes) -> tuple[str, float, str]:
    tensor = module.InferInput(INPUT, [1, 1], "BYTES")
    tensor.set_data_from_numpy(np.array([[text]], dtype=object))
    started = time.perf_counter()
    try:
        await client.infer(MODEL, [tensor])
        return "succeeded", time.perf_counter() - started, ""
    except InferenceServerException as e:
        return "error", time.perf_counter() - started, f"{e.status()} {e.message()}"
    except (OSError, asyncio.TimeoutError) as e:  # transport trouble: counted as failed, never hidden
        return "error", time.perf_counter() - started, f"transport {type(e).__name__}: {e}"


def _client(server: LocalTritonServer, protocol: str, connections: int) -> tuple[Any, Any]:
    if protocol == "http":
        # At most HTTP_CONNECTIONS sockets: one run opening 1,200 at once left some burst requests
        # unanswered after 60 s (connects past the listen backlog wait for SYN retries), which measures
        # the TCP stack, not the queue policy. gRPC multiplexes every request over one connection.
        limit = min(connections, HTTP_CONNECTIONS)
        return httpaio.InferenceServerClient(server.http_url, conn_limit=limit), httpaio
    return grpcaio.InferenceServerClient(server.grpc_url), grpcaio


async def _throughput(server: LocalTritonServer, protocol: str, concurrency: int, duration_s: float) -> float:
    client, module = _client(server, protocol, concurrency)
    done = 0
    stop_at = time.perf_counter() + duration_s

    async def worker(index: int) -> None:
        nonlocal done
        while time.perf_counter() < stop_at:
            outcome, _, message = await _one(client, module, _texts(1, index)[0])
            assert outcome == "succeeded", message
            done += 1

    started = time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(concurrency)))
    elapsed = time.perf_counter() - started
    await client.close()
    return done / elapsed


async def _burst(server: LocalTritonServer, protocol: str, count: int) -> tuple[list, float]:
    client, module = _client(server, protocol, count)
    started = time.perf_counter()
    tasks = [asyncio.create_task(_one(client, module, text)) for text in _texts(count)]
    await asyncio.sleep(0)
    results = await asyncio.wait_for(asyncio.gather(*tasks), timeout=120)
    elapsed = time.perf_counter() - started
    await client.close()
    return results, elapsed


@pytest.fixture(scope="module", autouse=True)
def input_name_matches_the_server(triton_server: LocalTritonServer) -> None:
    metadata = httpclient.InferenceServerClient(triton_server.http_url).get_model_metadata(MODEL)
    assert [i["name"] for i in metadata["inputs"]] == [INPUT]
    assert [o["name"] for o in metadata["outputs"]] == [OUTPUT]


def _url(server: LocalTritonServer, protocol: str) -> str:
    return server.http_url if protocol == "http" else server.grpc_url


def _percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_burst_past_capacity_is_rejected_fast_and_accepted_requests_keep_a_bounded_p99(
    triton_server: LocalTritonServer, protocol: str
) -> None:
    throughput = asyncio.run(_throughput(triton_server, protocol, concurrency=16, duration_s=1.5))
    count = int(min(1200, max(400, BURST_S_OF_WORK * throughput)))
    results, elapsed = asyncio.run(_burst(triton_server, protocol, count))

    latencies = [s for outcome, s, _ in results if outcome == "succeeded"]
    reasons = Counter(
        message.split("] ")[-1] if "] " in message else message for o, _, message in results if o == "error"
    )
    rejections = [m for o, _, m in results if o == "error" and m.startswith(STATUS[protocol])]
    queue_full = [s for o, s, m in results if o == "error" and "Exceeds maximum queue size" in m]
    timed_out = [s for o, s, m in results if o == "error" and "Request timeout expired" in m]
    sent, succeeded, rejected = len(results), len(latencies), len(rejections)
    failed = sent - succeeded - rejected
    print(
        f"\n{protocol}: throughput {throughput:.0f} req/s at concurrency 16; burst of {sent} "
        f"({sent / throughput:.1f} s of work) answered in {elapsed:.2f} s\n"
        f"sent={sent} succeeded={succeeded} rejected={rejected} failed={failed}\n"
        f"accepted p50 {_percentile(latencies, 50):.3f} s p99 {_percentile(latencies, 99):.3f} s; "
        f"queue-full rejections {len(queue_full)} (p50 {_percentile(queue_full, 50):.3f} s), "
        f"timeout rejections {len(timed_out)} (p50 {_percentile(timed_out, 50):.3f} s)"
    )
    for reason, number in reasons.most_common():
        print(f"  {number:5d} {reason}")
    assert succeeded + rejected + failed == sent == count
    assert failed == 0, reasons
    assert rejected > 0 and succeeded > 0
    assert all(f"in ensemble '{MODEL}'" in m for m in rejections), "the step's rejection names the ensemble"
    assert len(queue_full) + len(timed_out) == rejected
    assert _percentile(latencies, 99) < P99_BOUND_S
    # A full queue answers at once; the time measured includes the client's own wait for a connection.
    assert _percentile(queue_full, 50) < min(2.0, _percentile(latencies, 50)), "rejections must be fast"
    assert triton_server.is_ready() and triton_server.check_models().healthy


def test_the_client_retries_rejections_with_backoff_until_every_text_is_embedded(
    triton_server: LocalTritonServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="clients.retry")
    texts = [t.decode() for t in _texts(500, offset=10_000)]
    retry = RetryPolicy(max_attempts=10, base_delay_s=0.2, max_delay_s=2.0)

    async def embed() -> tuple[Any, float, Any]:
        async with AsyncTritonClient(
            f"http://{triton_server.http_url}", retry=retry, max_in_flight=len(texts)
        ) as client:
            # The burst test's last requests may still be uncounted: a snapshot taken before they are
            # would count them here (tests/integration/conftest.py, _settled_statistics).
            await client.statistics_since(await client.statistics(MODEL), requests=0)
            before = await client.statistics(MODEL)
            started = time.perf_counter()
            vectors = await client.embed(texts)
            elapsed = time.perf_counter() - started
            return vectors, elapsed, await client.statistics_since(before, requests=len(texts))

    vectors, elapsed, delta = asyncio.run(embed())
    retried = [r.getMessage() for r in caplog.records if "retrying in" in r.getMessage()]
    print(
        f"\n{len(texts)} texts at once with retries: all embedded in {elapsed:.2f} s; the server saw "
        f"{delta.requests} requests, {delta.failures} of them rejected; the client retried {len(retried)}"
    )
    # All at once, past the queues: the server rejects some, and the client retries each rejection (every
    # text is embedded in the end). The ensemble's failure count is not one per retry.
    assert retried and delta.failures > 0, "no request was rejected: nothing here shows a retry"
    rejections = ("Exceeds maximum queue size", "Request timeout expired")
    assert all(any(words in m for words in rejections) for m in retried), retried[:3]
    assert delta.requests == len(texts) + delta.failures
    assert vectors.shape == (len(texts), 384)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-4)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_client_may_shorten_its_queue_timeout_and_is_rejected_as_retryable(
    triton_server: LocalTritonServer, protocol: str
) -> None:
    """allow_timeout_override: a request's own timeout (microseconds) replaces the model's default when it
    is shorter (Triton never lets a request wait longer than the default). One microsecond is shorter than
    the batcher's queue delay, so the request is rejected, never run."""
    module: Any = httpclient if protocol == "http" else grpcclient
    client = module.InferenceServerClient(_url(triton_server, protocol))
    tensor = module.InferInput(INPUT, [1, 1], "BYTES")
    tensor.set_data_from_numpy(np.array([[b"a short one"]], dtype=object))
    with pytest.raises(InferenceServerException) as rejected:
        client.infer(MODEL, [tensor], timeout=1)
    print(f"\n{protocol}: {rejected.value.status()} {rejected.value.message()}")
    assert (
        rejected.value.status() == STATUS[protocol] and "Request timeout expired" in rejected.value.message()
    )
    assert isinstance(wrap_error(rejected.value, model=MODEL), ServerUnavailableError)
    assert client.infer(MODEL, [tensor]).as_numpy(OUTPUT).shape == (1, 384)
