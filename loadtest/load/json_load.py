"""A closed-loop HTTP load generator speaking the KServe v2 protocol, for any server that does.

Used where perf_analyzer cannot go: the simplest alternative (:mod:`loadtest.baselines.minimal_server`)
answers the same requests as Triton, so one generator drives both and their figures compare. The requests
are built once, before the load (:func:`text_request`, :func:`image_request`, :func:`tensors_request`):
``concurrency`` workers each send one, wait for the answer, and send the next, cycling through them, until
``requests`` answers have come back. Connections are kept alive, as real clients do.
"""

from __future__ import annotations

import asyncio
import json
import struct
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import aiohttp
import numpy as np
from tritonclient.utils import np_to_triton_dtype

from loadtest.load.quantiles import quantile

# KServe v2's binary-data extension: the request's JSON header is this many bytes; the data follows it.
BINARY_HEADER = "Inference-Header-Content-Length"


@dataclass(kw_only=True, frozen=True)
class JsonLoadResult:
    """One arm's measured requests: each answered request's latency, and how many failed."""

    label: str
    concurrency: int
    failures: int
    wall_s: float
    latencies_ms: tuple[float, ...]

    @property
    def requests_per_s(self) -> float:
        return len(self.latencies_ms) / self.wall_s if self.wall_s else 0.0

    @property
    def p99_ms(self) -> float:
        return quantile(self.latencies_ms, 0.99)

    def record(self) -> dict:
        """The figures a report keeps, without the latencies themselves."""
        return {
            "label": self.label,
            "concurrency": self.concurrency,
            "requests": len(self.latencies_ms),
            "failures": self.failures,
            "wall_s": self.wall_s,
            "p50_ms": quantile(self.latencies_ms, 0.5),
            "p99_ms": self.p99_ms,
            "requests_per_s": self.requests_per_s,
        }


@dataclass(frozen=True)
class RequestBody:
    """One request as it goes on the wire: its body and the headers that say how to read it."""

    data: bytes
    headers: Mapping[str, str] = field(default_factory=lambda: {"Content-Type": "application/json"})


def text_request(text: str) -> RequestBody:
    """One text as a JSON request with a BYTES ``TEXT`` input (what text_embedder takes)."""
    tensor = {"name": "TEXT", "shape": [1, 1], "datatype": "BYTES", "data": [text]}
    return RequestBody(json.dumps({"inputs": [tensor]}).encode())


def tensors_request(row: Mapping[str, np.ndarray]) -> RequestBody:
    """One row of named arrays (each without the batch axis) as a JSON request of a batch of one."""
    inputs = [
        {
            "name": name,
            "shape": [1, *value.shape],
            "datatype": np_to_triton_dtype(value.dtype),
            "data": value.ravel().tolist(),
        }
        for name, value in row.items()
    ]
    return RequestBody(json.dumps({"inputs": inputs}).encode())


def image_request(image: bytes, *, outputs: Sequence[str], name: str = "IMAGE_BYTES") -> RequestBody:
    """One encoded image as a BYTES input in the binary-data extension (as tritonclient sends it: a JSON
    header, then the element's 4-byte little-endian length and its bytes), ``outputs`` asked as JSON so
    that every server answers alike."""
    data = struct.pack("<I", len(image)) + image
    header = {
        "inputs": [
            {
                "name": name,
                "shape": [1, 1],
                "datatype": "BYTES",
                "parameters": {"binary_data_size": len(data)},
            }
        ],
        "outputs": [{"name": output, "parameters": {"binary_data": False}} for output in outputs],
    }
    encoded = json.dumps(header).encode()
    headers = {"Content-Type": "application/octet-stream", BINARY_HEADER: str(len(encoded))}
    return RequestBody(encoded + data, headers)


async def _run(
    url: str, bodies: Sequence[RequestBody], *, concurrency: int, requests: int
) -> tuple[list[float], int, float]:
    latencies: list[float] = []
    failures = 0
    sent = 0
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(
        timeout=timeout, connector=aiohttp.TCPConnector(limit=concurrency)
    ) as http:

        async def worker() -> None:
            nonlocal sent, failures
            while sent < requests:
                body = bodies[sent % len(bodies)]
                sent += 1
                started = time.perf_counter()
                try:
                    async with http.post(url, data=body.data, headers=dict(body.headers)) as response:
                        await response.read()
                        ok = response.status == 200
                except (aiohttp.ClientError, asyncio.TimeoutError):
                    ok = False
                latencies.append(1000.0 * (time.perf_counter() - started))
                failures += not ok

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return latencies, failures, time.perf_counter() - started


def run_json_load(
    url: str,
    bodies: Sequence[RequestBody],
    *,
    label: str,
    concurrency: int,
    requests: int,
    warmup: int = 32,
) -> JsonLoadResult:
    """POST ``requests`` of ``bodies`` in turn to ``url`` (…/v2/models/NAME/infer), ``concurrency`` at
    once, after ``warmup`` unmeasured ones."""
    if not bodies or concurrency < 1 or requests < 1:
        raise ValueError(
            f"need request bodies, concurrency >= 1 and requests >= 1, got {len(bodies)}, {concurrency}, "
            f"{requests}"
        )
    if warmup:
        asyncio.run(_run(url, bodies, concurrency=concurrency, requests=warmup))
    latencies, failures, wall_s = asyncio.run(_run(url, bodies, concurrency=concurrency, requests=requests))
    return JsonLoadResult(
        label=label, concurrency=concurrency, failures=failures, wall_s=wall_s, latencies_ms=tuple(latencies)
    )
