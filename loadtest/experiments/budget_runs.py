"""Measure a service's time budget against a running server (:mod:`loadtest.experiments.budget` splits it).

One run (:func:`measure`): warm-up requests, then Triton's statistics of every model and the Python
models' timings (where the server writes them) are read; ``requests`` requests of real data (the rows
perf_analyzer gets, :func:`loadtest.load.perf_inputs.request_rows`) go out from an asyncio client
keeping ``in_flight`` outstanding, each round trip timed from the call to its answer; the statistics are
read again once Triton has counted every answered request. The record of the run (round trips,
both statistics payloads of the service and its steps, both timings reads) is what the budget is
computed from, and is written beside the report, so the arithmetic can be checked on it later.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import logging
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from clients import AsyncTritonClient, ClientError
from loadtest.experiments.budget import Budget, from_record
from loadtest.load.model_rows import Row
from loadtest.load.observe import NO_RETRY
from loadtest.load.perf_inputs import request_rows
from loadtest.load.stub_timings import StubTimes, read_stub_times
from tritonrepo.configs import load_repository

logger = logging.getLogger(__name__)

STATISTICS_POLL_S, STATISTICS_WAIT_S = 0.02, 10.0
TIMEOUT_S = 10.0


@dataclass(kw_only=True, frozen=True)
class Load:
    """What one budget run sends: ``requests`` requests (fewer if ``duration_s`` runs out first) with
    ``in_flight`` outstanding, after ``warmup`` requests that are not counted."""

    in_flight: int
    requests: int
    warmup: int
    duration_s: float = 120.0
    protocol: str = "grpc"

    def __post_init__(self) -> None:
        if self.in_flight < 1 or self.requests < 1 or self.warmup < 0 or self.duration_s <= 0:
            raise ValueError(
                f"in_flight and requests must be at least 1, warmup at least 0 and duration_s positive; got "
                f"in_flight={self.in_flight}, requests={self.requests}, warmup={self.warmup}, "
                f"duration_s={self.duration_s}"
            )
        if self.protocol not in ("grpc", "http"):
            raise ValueError(f"protocol must be grpc or http, got {self.protocol!r}")


@dataclass(kw_only=True, frozen=True)
class Target:
    """The server measured: its HTTP and gRPC endpoints (``host:port``), where it writes them the folder
    of its Python models' timings, and where known the (derived) repository it serves."""

    http_url: str
    grpc_url: str
    timings: Path | None = None
    repository: Path | None = None

    def client_url(self, protocol: str) -> str:
        return f"grpc://{self.grpc_url}" if protocol == "grpc" else f"http://{self.http_url}"


def service_steps(target: Target, service: str, repository: Path) -> list[str]:
    """The models ``service`` runs, in order ([] for a single model): from the server's own config, or
    from ``repository`` where the server does not show it (a restricted config API)."""
    try:
        config = _get_json(target.http_url, f"/v2/models/{service}/config")
        return [step["model_name"] for step in config.get("ensemble_scheduling", {}).get("step", [])]
    except OSError as e:
        logger.info(
            "the config of %s is not readable from the server (%s); reading %s", service, e, repository
        )
        return load_repository(repository)[service].ensemble_steps()


def measure(
    target: Target,
    service: str,
    load: Load,
    *,
    repository: Path,
    rows: Sequence[Row],
    raw: Path | None = None,
) -> Budget:
    """One budget run of ``service`` (see the module docstring); its record is written to ``raw`` (a
    folder) when given."""
    steps = service_steps(target, service, repository)
    models = [service, *steps]
    url = target.client_url(load.protocol)
    if load.warmup:
        asyncio.run(_drive(url, service, rows, dataclasses.replace(load, requests=load.warmup, warmup=0)))
    statistics_before = _settled_statistics(target.http_url, models)  # the warm-up counted
    stub_before = read_stub_times(target.timings) if target.timings else None
    latencies, failures, wall_s = asyncio.run(_drive(url, service, rows, load))
    statistics_after = _settled_statistics(
        target.http_url, models, since=statistics_before, answered=len(latencies)
    )
    record = {
        "service": service,
        "steps": steps,
        "in_flight": load.in_flight,
        "protocol": load.protocol,
        "latencies_ms": [round(ms, 4) for ms in latencies],
        "failures": failures,
        "wall_s": round(wall_s, 4),
        "statistics_before": statistics_before,
        "statistics_after": statistics_after,
        "stub_before": _as_dicts(stub_before),
        "stub_after": _as_dicts(read_stub_times(target.timings)) if target.timings else None,
    }
    if raw is not None:
        raw.mkdir(parents=True, exist_ok=True)
        (raw / f"budget_{service}_c{load.in_flight}.json").write_text(json.dumps(record, indent=1))
    budget = from_record(record)
    logger.info(
        "%s at %d in flight: %.2f ms mean, server %.2f ms, not accounted for %.2f ms",
        service,
        load.in_flight,
        budget.mean_ms,
        budget.server_ms,
        budget.remainder_ms,
    )
    return budget


async def _drive(url: str, service: str, rows: Sequence[Row], load: Load) -> tuple[list[float], int, float]:
    """Send ``load.requests`` requests of ``rows`` (cycled), ``load.in_flight`` outstanding: each answered
    request's round trip in ms, the failures, and the seconds it took."""
    latencies: list[float] = []
    failures = 0
    counter = itertools.count()
    async with AsyncTritonClient(url, retry=NO_RETRY, max_in_flight=load.in_flight) as client:
        await client.signature(service)
        started = time.perf_counter()
        deadline = started + load.duration_s

        async def worker() -> None:
            nonlocal failures
            for index in counter:
                if index >= load.requests or time.perf_counter() > deadline:
                    return
                inputs = {name: value[np.newaxis, ...] for name, value in rows[index % len(rows)].items()}
                sent = time.perf_counter()
                try:
                    await client.infer(service, inputs)
                except ClientError as e:
                    failures += 1
                    logger.debug("%s: request %d failed: %s", service, index, e)
                    continue
                latencies.append(1000.0 * (time.perf_counter() - sent))

        await asyncio.gather(*(worker() for _ in range(load.in_flight)))
        return latencies, failures, time.perf_counter() - started


def _get_json(http_url: str, path: str) -> Any:
    with urllib.request.urlopen(f"http://{http_url}{path}", timeout=TIMEOUT_S) as response:  # noqa: S310
        return json.loads(response.read())


def _statistics(http_url: str, models: list[str]) -> dict[str, Any]:
    """The statistics payload (``/v2/models/stats``) of ``models`` alone."""
    payload = _get_json(http_url, "/v2/models/stats")
    return {"model_stats": [entry for entry in payload.get("model_stats", []) if entry["name"] in models]}


def _settled_statistics(
    http_url: str, models: list[str], *, since: dict[str, Any] | None = None, answered: int = 0
) -> dict[str, Any]:
    """The statistics once every model of ``models`` counts at least ``answered`` requests ``since`` that
    payload and a read 20 ms later shows nothing new (Triton counts a request just after answering it),
    or after :data:`STATISTICS_WAIT_S`."""

    def counts(payload: dict[str, Any]) -> dict[str, int]:
        return {
            entry["name"]: int(entry.get("inference_stats", {}).get("success", {}).get("count", 0))
            for entry in payload["model_stats"]
        }

    earlier = counts(since) if since is not None else {}
    deadline = time.monotonic() + STATISTICS_WAIT_S
    latest = _statistics(http_url, models)
    while time.monotonic() < deadline:
        time.sleep(STATISTICS_POLL_S)
        again = _statistics(http_url, models)
        done = all(counts(again).get(m, 0) - earlier.get(m, 0) >= answered for m in models)
        if done and again == latest:
            return again
        latest = again
    logger.warning(
        "Triton's statistics of %s did not settle within %.0f s", ", ".join(models), STATISTICS_WAIT_S
    )
    return latest


def _as_dicts(times: dict[str, StubTimes] | None) -> dict[str, dict[str, int]] | None:
    return None if times is None else {model: dataclasses.asdict(t) for model, t in times.items()}


def service_rows(repository: Path, service: str, entries: int) -> list[Row]:
    """Real rows for ``service``'s requests (those perf_analyzer gets)."""
    return request_rows(service, repository, entries=entries, seed=17)
