"""Typed view of Triton's statistics extension (``/v2/models/<model>/stats`` and its gRPC twin).

Parses the JSON payload either protocol returns (gRPC's JSON carries 64-bit counters as strings).
Counters are kept raw, so two snapshots can be subtracted (:meth:`ModelStatistics.since`) to see
what happened between them: how many executions, what average batch the dynamic batcher reached.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, kw_only=True)
class Duration:
    """``count`` events that took ``total_ns`` nanoseconds together."""

    count: int = 0
    total_ns: int = 0

    @property
    def average_us(self) -> float:
        return self.total_ns / self.count / 1000.0 if self.count else 0.0

    def minus(self, earlier: Duration) -> Duration:
        return Duration(count=self.count - earlier.count, total_ns=self.total_ns - earlier.total_ns)

    @classmethod
    def parse(cls, payload: Mapping[str, Any] | None) -> Duration:
        payload = payload or {}
        return cls(count=int(payload.get("count", 0)), total_ns=int(payload.get("ns", 0)))


# The durations of a model's inference statistics, as Triton names them; those averaged per request.
DURATIONS = ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output")


def _average_us(duration: str) -> property:
    """A read-only float: the average of one of a snapshot's :data:`DURATIONS`, in microseconds."""

    def average(statistics: ModelStatistics) -> float:
        return float(getattr(statistics, duration).average_us)

    return property(average, doc=f"The average {duration.replace('_', ' ')} time per request, in µs.")


AVERAGED = ("queue", "compute_input", "compute_infer", "compute_output")


@dataclass(frozen=True, kw_only=True)
class ModelStatistics:
    """One model version's counters since the server started.

    requests = successful + failed requests; inferences = batch rows inferred; executions = model runs.
    The four durations are cumulative over successful requests (queue) or executions (compute):
    ``*_us`` properties are their per-request averages, as Triton reports them.
    ``batch_executions`` maps an executed batch size to how many executions had that size;
    ``execution_compute`` sums their compute (infer) time over executions, not requests (batch_stats).
    """

    model: str
    version: str
    inferences: int
    executions: int
    success: Duration
    fail: Duration
    queue: Duration
    compute_input: Duration
    compute_infer: Duration
    compute_output: Duration
    batch_executions: dict[int, int] = field(default_factory=dict)
    execution_compute: Duration = Duration()
    last_inference_ms: int = 0

    @property
    def requests(self) -> int:
        return self.success.count + self.fail.count

    @property
    def failures(self) -> int:
        return self.fail.count

    @property
    def average_batch_size(self) -> float:
        """Inferences per execution: how many rows one model run handled on average (0 if none)."""
        return self.inferences / self.executions if self.executions else 0.0

    queue_us = _average_us("queue")
    compute_input_us = _average_us("compute_input")
    compute_infer_us = _average_us("compute_infer")
    compute_output_us = _average_us("compute_output")

    def since(self, earlier: ModelStatistics) -> ModelStatistics:
        """What happened between ``earlier`` (a previous snapshot of the same model) and this one."""
        if (earlier.model, earlier.version) != (self.model, self.version):
            raise ValueError(
                f"cannot subtract statistics of {earlier.model} v{earlier.version} "
                f"from {self.model} v{self.version}"
            )
        histogram = {
            size: n - earlier.batch_executions.get(size, 0) for size, n in self.batch_executions.items()
        }
        return ModelStatistics(
            model=self.model,
            version=self.version,
            inferences=self.inferences - earlier.inferences,
            executions=self.executions - earlier.executions,
            **{name: getattr(self, name).minus(getattr(earlier, name)) for name in DURATIONS},
            batch_executions={size: n for size, n in sorted(histogram.items()) if n},
            execution_compute=self.execution_compute.minus(earlier.execution_compute),
            last_inference_ms=self.last_inference_ms,
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary: counters, averages in microseconds, and the batch-size histogram."""
        return {
            "model": self.model,
            "version": self.version,
            "requests": self.requests,
            "failures": self.failures,
            "inferences": self.inferences,
            "executions": self.executions,
            "average_batch_size": round(self.average_batch_size, 3),
            **{f"{name}_us": round(getattr(self, name).average_us, 1) for name in AVERAGED},
            "batch_executions": {str(size): n for size, n in self.batch_executions.items()},
        }


def parse_model_statistics(payload: Mapping[str, Any]) -> ModelStatistics:
    """One entry of the payload's ``model_stats`` list."""
    inference = payload.get("inference_stats") or {}
    histogram: dict[int, int] = {}
    execution_compute = Duration()
    for entry in payload.get("batch_stats") or []:
        size = int(entry["batch_size"])
        compute = Duration.parse(entry.get("compute_infer"))
        histogram[size] = histogram.get(size, 0) + compute.count
        execution_compute = Duration(
            count=execution_compute.count + compute.count,
            total_ns=execution_compute.total_ns + compute.total_ns,
        )
    return ModelStatistics(
        model=str(payload["name"]),
        version=str(payload.get("version", "")),
        inferences=int(payload.get("inference_count", 0)),
        executions=int(payload.get("execution_count", 0)),
        **{name: Duration.parse(inference.get(name)) for name in DURATIONS},
        batch_executions=dict(sorted(histogram.items())),
        execution_compute=execution_compute,
        last_inference_ms=int(payload.get("last_inference", 0)),
    )


def parse_statistics(payload: Mapping[str, Any]) -> list[ModelStatistics]:
    """Every model version in a statistics response (``{"model_stats": [...]}``)."""
    return [parse_model_statistics(entry) for entry in payload.get("model_stats") or []]
