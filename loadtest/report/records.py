"""Typed records of what results.json holds for the served experiments, read once at the report's door.

The experiments write plain JSON (``dataclasses.asdict`` of :class:`loadtest.experiments.served.ServedPoint`
and Triton's statistics as :meth:`clients.ModelStatistics.to_dict` gives them); findings, tables and
plots work on these records instead of string keys.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from loadtest.load.perf import PerfPoint

# The encoders searched for in a run recorded without its own (``encoder``), as the default models call them.
ENCODERS = ("minilm_onnx", "minilm_torchscript", "efficientnet_lite0_onnx", "efficientnet_lite0_torchscript")


@dataclass(kw_only=True, frozen=True)
class ModelStats:
    """One model's statistics over a run (the difference of two snapshots); times per request in us."""

    model: str
    inferences: int
    executions: int
    average_batch_size: float
    queue_us: float
    compute_infer_us: float

    @classmethod
    def from_dict(cls, model: str, data: dict[str, Any]) -> ModelStats:
        return cls(
            model=model,
            inferences=int(data["inferences"]),
            executions=int(data["executions"]),
            average_batch_size=float(data["average_batch_size"]),
            queue_us=float(data["queue_us"]),
            compute_infer_us=float(data["compute_infer_us"]),
        )


def model_stats(server: dict[str, dict[str, Any]]) -> dict[str, ModelStats]:
    return {name: ModelStats.from_dict(name, data) for name, data in server.items()}


@dataclass(kw_only=True, frozen=True)
class ServedRun:
    """One perf_analyzer run against a served model, with what the server did meanwhile."""

    arm: str
    served_model: str
    perf: PerfPoint
    model: str = ""  # the model measured (``served_model`` is it or its clone); '' in older results
    encoder: str = ""
    server: dict[str, ModelStats] = field(default_factory=dict)
    wall_s: float = 0.0
    server_cpu_cores: float | None = None
    cpu_s_by_process: dict[str, float] = field(default_factory=dict)
    machine_cpu_s: float | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ServedRun:
        return cls(
            arm=data["arm"],
            served_model=data["served_model"],
            model=data.get("model") or "",
            encoder=data.get("encoder") or "",
            perf=PerfPoint(**data["perf"]),
            server=model_stats(data.get("server", {})),
            wall_s=float(data.get("wall_s") or 0.0),
            server_cpu_cores=data.get("server_cpu_cores"),
            cpu_s_by_process=dict(data.get("cpu_s_by_process") or {}),
            machine_cpu_s=data.get("machine_cpu_s"),
        )

    @property
    def measured(self) -> bool:
        return self.perf.throughput_per_s > 0

    def encoder_stats(self) -> ModelStats | None:
        """The statistics of the exported encoder (text or image) the run's ensemble called."""
        for name in (self.encoder,) if self.encoder else ENCODERS:
            found = self.stats_of(name)
            if found and found.executions:
                return found
        return None

    def stats_of(self, model: str) -> ModelStats | None:
        """The statistics of ``model`` or of its renamed clone (``model__suffix``) in this run."""
        for name, stats in self.server.items():
            if name == model or name.startswith(model + "__"):
                return stats
        return None


def served_runs(results: dict[str, Any], key: str) -> list[ServedRun]:
    """The runs results.json holds under ``key`` (an experiment's results key), in their order."""
    return [ServedRun.from_dict(point) for point in results.get(key, [])]


@dataclass(kw_only=True, frozen=True)
class ArmSummary:
    """An arm of an experiment at one concurrency, over its rounds: means, and its encoder's batches."""

    concurrency: int
    arm: str
    served_model: str
    runs: int
    throughput_per_s: float | None
    p50_ms: float | None
    p99_ms: float | None
    encoder_batch: float | None
    encoder_queue_ms: float | None
    encoder_compute_ms: float | None


INPROCESS_BEFORE_ARMS = {"layout": "1 x all threads", "order": "arrival"}  # recorded before layouts


def inprocess_arm(point: dict) -> str:
    """How an in-process point ran: its layout and order (results from before layouts: one pipeline)."""
    arm = INPROCESS_BEFORE_ARMS | point
    return f"{arm['layout']}, {arm['order']}"
