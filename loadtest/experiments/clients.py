"""Experiments driven through the clients library: 3 (central side), 4 (sync vs asyncio), 6 (served).

Every function takes a running server's URL, measures with :mod:`clients` (retries off) and returns a
result that carries the server's statistics for that run (average batch size, queue vs compute).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from dataclasses import dataclass, field, replace

from clients import AsyncTritonClient, TritonClient
from loadtest.experiments.inprocess import BATCH_COST_SIZES, BatchCost, alternating_median_ms
from loadtest.load.observe import (
    NO_RETRY,
    ProcessSampler,
    process_tree,
    statistics_delta,
    statistics_snapshot,
)


@dataclass(kw_only=True)
class ClientRun:
    """``items`` requests of one item each, how long they took, and what the server did meanwhile."""

    label: str
    model: str
    items: int
    in_flight: int
    wall_s: float
    failures: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    server: dict[str, dict] = field(default_factory=dict)
    round: int = 0  # which of an experiment's alternating rounds

    @property
    def items_per_s(self) -> float:
        return self.items / self.wall_s if self.wall_s else 0.0


def sequential_embed(url: str, model: str, texts: list[str]) -> ClientRun:
    """A synchronous client: one request, wait for its answer, then the next."""
    before = statistics_snapshot(url)
    latencies = []
    with TritonClient(url, retry=NO_RETRY) as client:
        client.signature(model)
        started = time.perf_counter()
        for text in texts:
            sent = time.perf_counter()
            client.embed([text], model)
            latencies.append(1000.0 * (time.perf_counter() - sent))
        wall_s = time.perf_counter() - started
    return ClientRun(
        label="sequential sync",
        model=model,
        items=len(texts),
        in_flight=1,
        wall_s=wall_s,
        latencies_ms=latencies,
        server=statistics_delta(before, statistics_snapshot(url)),
    )


def alternating_embeds(
    url: str, model: str, texts: list[str], *, in_flight: int, rounds: int
) -> list[ClientRun]:
    """The `clients` experiment: the sequential and the asyncio client in turn, ``rounds`` times (each run
    numbered)."""
    runs = []
    for round_ in range(rounds):
        runs.append(replace(sequential_embed(url, model, texts), round=round_))
        runs.append(replace(async_embed(url, model, texts, in_flight=in_flight), round=round_))
    return runs


def async_embed(url: str, model: str, texts: list[str], *, in_flight: int) -> ClientRun:
    """An asyncio client with ``in_flight`` single-text requests outstanding at every moment."""
    run, _ = _async_run(url, model, texts, kind="text", in_flight=in_flight, label="asyncio")
    return run


@dataclass(kw_only=True)
class CentralRun:
    run: ClientRun
    server_cpu_s: float
    server_peak_rss_mb: float
    server_processes: int
    top1: list[int]


def central_classify(
    url: str, server_pid: int, model: str, images: list[bytes], *, in_flight: int
) -> CentralRun:
    """The `central` experiment, central side: every image sent to the one server, ``in_flight`` at a time."""
    sampler = ProcessSampler(select=process_tree(server_pid), interval_s=0.2)
    run, results = _async_run(
        url, model, images, kind="image", in_flight=in_flight, label="central server", sampler=sampler
    )
    return CentralRun(
        run=run,
        server_cpu_s=sampler.usage.cpu_s,
        server_peak_rss_mb=sampler.usage.peak_rss_mb,
        server_processes=sampler.usage.processes,
        top1=[r.class_ids[0] for r in results],
    )


def _async_run(
    url: str,
    model: str,
    items: list,
    *,
    kind: str,
    in_flight: int,
    label: str,
    sampler: ProcessSampler | None = None,
) -> tuple[ClientRun, list]:
    """``items`` (texts or images) from an asyncio client, one per request, ``in_flight`` outstanding;
    ``sampler`` watches the server's processes meanwhile."""
    before = statistics_snapshot(url)
    with sampler or contextlib.nullcontext():
        wall_s, results = asyncio.run(_async_send(url, model, items, kind, in_flight))
    run = ClientRun(
        label=f"{label}, {in_flight} in flight",
        model=model,
        items=len(items),
        in_flight=in_flight,
        wall_s=wall_s,
        server=statistics_delta(before, statistics_snapshot(url)),
    )
    return run, results


async def _async_send(url: str, model: str, items: list, kind: str, in_flight: int) -> tuple[float, list]:
    async with AsyncTritonClient(url, retry=NO_RETRY, max_in_flight=in_flight, per_request=True) as client:
        await client.signature(model)
        started = time.perf_counter()
        results = await (client.embed(items, model) if kind == "text" else client.classify(items, model))
        return time.perf_counter() - started, results


def served_batch_cost(
    url: str, model: str, items: list, *, kind: str, repeats: int
) -> tuple[BatchCost, dict]:
    """The `batchcost` experiment served: one request of 1 item vs one request of 32 items (same shape),
    median ms."""
    if len(items) < 32:
        raise ValueError(f"served_batch_cost needs 32 items, got {len(items)}")
    before = statistics_snapshot(url)
    with TritonClient(url, retry=NO_RETRY, per_request=False) as client:
        call = client.embed if kind == "text" else client.classify
        timings = alternating_median_ms(
            {size: functools.partial(call, items[:size], model) for size in BATCH_COST_SIZES}, repeats
        )
    cost = BatchCost(
        model=model, runtime="served", where="served", ms_batch_1=timings[1], ms_batch_32=timings[32]
    )
    return cost, statistics_delta(before, statistics_snapshot(url))
