"""Run a batch job: N requests in flight on the asyncio client, one record per input, a summary at the end.

Each input is its own request (the server's dynamic batcher groups what is in flight); ``in_flight``
bounds how many are outstanding. The server's statistics are read before and after, and their
difference says what batch sizes the server reached during the job (other clients' traffic included).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from clients.async_client import AsyncTritonClient
from clients.batch.inputs import BatchInput
from clients.batch.journal import Journal, load_journal
from clients.errors import ClientError
from clients.retry import RetryPolicy
from clients.stats import ModelStatistics
from tritonrepo.progress import Progress

logger = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class JobConfig:
    url: str = "http://127.0.0.1:8000"
    protocol: str | None = None
    model: str | None = None  # default: image_classifier for images, text_embedder for texts
    in_flight: int = 16
    timeout_s: float = 30.0
    # Retries of a request whose model process died or restarted, or whose server was unreachable or
    # full, go on until retry_deadline_s from its first try (clients/retry.py); attempts may cap them too.
    retry_deadline_s: float = RetryPolicy.deadline_s
    attempts: int | None = None
    top_k: int | None = None
    limit: int | None = None  # process at most this many pending inputs (then stop)
    headers: Mapping[str, str] = field(default_factory=dict)
    progress: bool | None = None  # None: a bar on a terminal, plain lines otherwise; False: nothing

    def __post_init__(self) -> None:
        if self.in_flight < 1:
            raise ValueError(f"in_flight must be at least 1, got {self.in_flight}")
        if self.limit is not None and self.limit < 0:
            raise ValueError(f"limit must be >= 0, got {self.limit}")


@dataclass(kw_only=True)
class JobSummary:
    total: int
    skipped: int
    processed: int = 0
    ok: int = 0
    errors: int = 0
    elapsed_s: float = 0.0
    server: list[ModelStatistics] = field(default_factory=list)  # statistics deltas over the job

    @property
    def throughput_per_s(self) -> float:
        return self.processed / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def remaining(self) -> int:
        return self.total - self.skipped - self.processed

    def to_dict(self) -> dict[str, Any]:
        """The JSON summary: the input counts, the time and rate, each model's average batch."""
        counts = ("total", "skipped", "processed", "ok", "errors", "remaining")
        return {name: getattr(self, name) for name in counts} | {
            "elapsed_s": round(self.elapsed_s, 3),
            "throughput_per_s": round(self.throughput_per_s, 2),
            "server_average_batch_size": {s.model: round(s.average_batch_size, 2) for s in self.server},
        }


async def run_job(inputs: Sequence[BatchInput], output: Path, config: JobConfig) -> JobSummary:
    state = load_journal(output)
    pending = [item for item in inputs if item.id not in state.done]
    if config.limit is not None:
        pending = pending[: config.limit]
    summary = JobSummary(total=len(inputs), skipped=sum(1 for item in inputs if item.id in state.done))
    client = AsyncTritonClient(
        config.url,
        protocol=config.protocol,
        timeout_s=config.timeout_s,
        max_in_flight=config.in_flight,
        retry=RetryPolicy(deadline_s=config.retry_deadline_s, max_attempts=config.attempts),
        headers=config.headers,
    )
    async with client:
        model = config.model or _default_model(inputs)
        await client.signature(model)  # fail fast (unreachable server, unknown model) before any record
        before = await _snapshot(client)
        started = time.perf_counter()
        display = Progress(quiet=config.progress is False, bars=config.progress)
        with Journal(output) as journal, display.count(total=len(pending), unit="input") as progress:
            queue = iter(pending)

            async def worker() -> None:
                for item in queue:  # one shared iterator: each input is taken by exactly one worker
                    record = await _process(client, item, model, config.top_k)
                    journal.write(record)
                    summary.processed += 1
                    if "result" in record:
                        summary.ok += 1
                    else:
                        summary.errors += 1
                    progress.update(ok="result" in record)

            await asyncio.gather(*(worker() for _ in range(min(config.in_flight, len(pending)))))
        summary.elapsed_s = time.perf_counter() - started
        counted = (before[model], summary.ok) if before is not None and model in before else None
        summary.server = _deltas(before, await _snapshot(client, counted))
    return summary


async def _process(
    client: AsyncTritonClient, item: BatchInput, model: str, top_k: int | None
) -> dict[str, Any]:
    record: dict[str, Any] = {"id": item.id, "input": item.value}
    started = time.perf_counter()
    if item.kind == "image":
        result: Any = (await client.classify([Path(item.value)], model, top_k=top_k, errors="return"))[0]
    else:
        result = (await client.embed([item.value], model, errors="return"))[0]
    record["model"] = model
    record["latency_ms"] = round((time.perf_counter() - started) * 1000, 2)
    if isinstance(result, ClientError):
        record["error"] = result.to_dict()
    elif isinstance(result, np.ndarray):
        record["result"] = {"embedding": [float(v) for v in result]}
    else:
        record["result"] = result.to_dict()
    return record


def _default_model(inputs: Sequence[BatchInput]) -> str:
    kinds = {item.kind for item in inputs}
    if len(kinds) != 1:
        raise ValueError(f"a job takes images or texts, not both (got {sorted(kinds)})")
    return "image_classifier" if kinds == {"image"} else "text_embedder"


async def _snapshot(
    client: AsyncTritonClient, counted: tuple[ModelStatistics, int] | None = None
) -> dict[str, ModelStatistics] | None:
    """Every model's statistics; with ``counted`` (the job model's first snapshot and the requests answered
    since), once the server has counted those requests: it counts an execution after sending its answers."""
    try:
        if counted is not None:
            await client.statistics_since(counted[0], requests=counted[1])
        return {s.model: s for s in await client.all_statistics()}
    except ClientError as e:
        logger.warning("server statistics unavailable (%s); no batching summary", e)
        return None


def _deltas(
    before: dict[str, ModelStatistics] | None, after: dict[str, ModelStatistics] | None
) -> list[ModelStatistics]:
    if before is None or after is None:
        return []
    deltas = [stats.since(before[name]) for name, stats in after.items() if name in before]
    return [d for d in deltas if d.executions > 0]
