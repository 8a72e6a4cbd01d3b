"""A closed-loop HTTP load generator speaking the KServe v2 JSON protocol, for any server that does.

Used where perf_analyzer cannot go: the simplest alternative (:mod:`loadtest.baselines.minimal_server`)
answers the same JSON request as Triton, so one generator drives both and their figures compare.
``concurrency`` workers each send one request, wait for the answer, and send the next, cycling through
``texts``, until ``requests`` answers have come back. Connections are kept alive, as real clients do.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import aiohttp

from loadtest.load.quantiles import quantile


@dataclass(kw_only=True, frozen=True)
class JsonLoadResult:
    label: str
    concurrency: int
    requests: int
    failures: int
    wall_s: float
    p50_ms: float
    p99_ms: float

    @property
    def requests_per_s(self) -> float:
        return self.requests / self.wall_s if self.wall_s else 0.0


def request_body(text: str) -> dict:
    return {"inputs": [{"name": "TEXT", "shape": [1, 1], "datatype": "BYTES", "data": [text]}]}


async def _run(
    url: str, texts: list[str], *, concurrency: int, requests: int
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
                text = texts[sent % len(texts)]
                sent += 1
                started = time.perf_counter()
                try:
                    async with http.post(url, json=request_body(text)) as response:
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
    url: str, texts: list[str], *, label: str, concurrency: int, requests: int, warmup: int = 32
) -> JsonLoadResult:
    """POST ``requests`` one-text requests to ``url`` (…/v2/models/NAME/infer), ``concurrency`` at once."""
    if not texts or concurrency < 1 or requests < 1:
        raise ValueError(
            f"need texts, concurrency >= 1 and requests >= 1, got {len(texts)}, {concurrency}, {requests}"
        )
    asyncio.run(_run(url, texts, concurrency=concurrency, requests=warmup))
    latencies, failures, wall_s = asyncio.run(_run(url, texts, concurrency=concurrency, requests=requests))
    return JsonLoadResult(
        label=label,
        concurrency=concurrency,
        requests=len(latencies),
        failures=failures,
        wall_s=wall_s,
        p50_ms=quantile(latencies, 0.5),
        p99_ms=quantile(latencies, 0.99),
    )
