"""The figures the report's verdicts and sections read from results.json, looked up in one place.

- each arms experiment summarised per arm and concurrency over its rounds (:func:`arm_summary`), and the
  arms the targets compare: batching on and off, the text ensemble as shipped and its unoptimised
  configuration (:func:`against_unoptimised`);
- the served run at the target concurrency (:func:`target_point`);
- the in-process figure served throughput is held to (:func:`inprocess_reference`).
"""

from __future__ import annotations

import statistics
from collections import defaultdict

from loadtest.experiments.inprocess import ONE_LENGTH
from loadtest.experiments.registry import TARGET_CONCURRENCY
from loadtest.report.records import ArmSummary, ServedRun, served_runs

TEXT_MODEL, IMAGE_MODEL = "text_embedder", "image_classifier"
TEXT_ENCODER = "the encoder"  # plots label the batch of whichever exported encoder the ensemble called
# The arms of the `ragged` experiment whose label starts with one of these run the unoptimised
# configuration: no ragged batching, no reduced precision, the exporter's Pad nodes. The records of the
# committed reports (docs/reports/) label it "previous".
UNOPTIMISED_ARM_PREFIXES = ("unoptimised", "previous")


def point_at(
    points: list[ServedRun], *, model: str, protocol: str, concurrency: int, arm: str | None = None
) -> ServedRun | None:
    for p in points:
        if (
            p.served_model == model
            and p.perf.protocol == protocol
            and p.perf.concurrency == concurrency
            and (arm is None or p.arm == arm)
            and p.measured
        ):
            return p
    return None


def best_inprocess(results: dict, pipeline: str = "text", runtime: str = "onnxruntime") -> dict | None:
    """The fastest in-process point of ``pipeline`` on real traffic: the control with every sentence of one
    length is not traffic the service gets, so it is left out."""
    rows = [
        p
        for p in results.get("inprocess", [])
        if p["pipeline"] == pipeline and p["runtime"] == runtime and p.get("order") != ONE_LENGTH
    ]
    return max(rows, key=lambda p: p["items_per_s"]) if rows else None


def beside_inprocess_cells(results: dict) -> list[dict]:
    """The `ragged` experiment's in-process rounds (the served text file between its served rounds at c=32),
    one row per cell (layout, order, batch size) in the order measured: the cell at its median round, with its
    rounds."""
    cells: dict[tuple, list[dict]] = defaultdict(list)
    for p in results.get("ragged_inprocess", []):
        cells[(p["layout"], p["order"], p["batch_size"])].append(p)
    return [
        cell[0]
        | {
            "items_per_s": statistics.median(p["items_per_s"] for p in cell),
            "rounds": [p["items_per_s"] for p in cell],
        }
        for cell in cells.values()
    ]


def beside_inprocess(results: dict) -> dict | None:
    """The fastest of :func:`beside_inprocess_cells`."""
    return max(beside_inprocess_cells(results), key=lambda p: p["items_per_s"], default=None)


def inprocess_reference(results: dict, pipeline: str = "text") -> tuple[dict | None, str]:
    """The in-process figure served throughput is held to, and where it was measured: for text, the
    `ragged` experiment's rounds between the served ones where the run has them; else the best of the
    `inprocess` experiment."""
    beside = beside_inprocess(results) if pipeline == "text" else None
    if beside:
        rounds = len(beside["rounds"])
        return beside, f"experiment `ragged`, median of {rounds} rounds between the served ones"
    runtime = results.get("text_runtime", "onnxruntime") if pipeline == "text" else "onnxruntime"
    return best_inprocess(results, pipeline=pipeline, runtime=runtime), "experiment `inprocess`"


def target_point(results: dict) -> ServedRun | None:
    """The text ensemble at concurrency 32: gRPC from the `batching` experiment or the sweep, else HTTP."""
    served = served_runs(results, "batching") + served_runs(results, "sweeps")
    for protocol in ("grpc", "http"):
        found = point_at(served, model=TEXT_MODEL, protocol=protocol, concurrency=TARGET_CONCURRENCY)
        if found:
            return found
    return None


def arm_summary(results: dict, key: str, model: str | None = None) -> list[ArmSummary]:
    """An arms experiment per (model, concurrency, arm), over its rounds: mean throughput, p50 and p99; the
    encoder's batch (its inferences / executions, all rounds together), queue and compute per request.
    ``model``: that model's runs alone (and those of a record from before runs named their model)."""
    groups: dict[tuple[str, int, str], list[ServedRun]] = {}
    for p in served_runs(results, key):
        if p.measured and model in (None, p.model or model):
            groups.setdefault((p.model, p.perf.concurrency, p.arm), []).append(p)
    rows = []
    for (_, concurrency, arm), points in groups.items():
        encoders = [e for e in map(ServedRun.encoder_stats, points) if e]
        executions = sum(e.executions for e in encoders)
        rows.append(
            ArmSummary(
                concurrency=concurrency,
                arm=arm,
                served_model=points[0].served_model,
                runs=len(points),
                throughput_per_s=_mean([p.perf.throughput_per_s for p in points]),
                p50_ms=_mean([p.perf.p50_ms for p in points if p.perf.p50_ms]),
                p99_ms=_mean([p.perf.p99_ms for p in points if p.perf.p99_ms]),
                encoder_batch=sum(e.inferences for e in encoders) / executions if executions else None,
                encoder_queue_ms=_mean([e.queue_us / 1000 for e in encoders]),
                encoder_compute_ms=_mean([e.compute_infer_us / 1000 for e in encoders]),
            )
        )
    return rows


def batching_arms(
    results: dict, concurrency: int, model: str = TEXT_MODEL
) -> tuple[ArmSummary | None, ArmSummary | None]:
    """The `batching` experiment on ``model`` at ``concurrency``: the 'batching on' and 'batching off'
    arms over their rounds."""
    rows = {r.arm: r for r in arm_summary(results, "batching", model) if r.concurrency == concurrency}
    return rows.get("batching on"), rows.get("batching off")


def ragged_arm(
    results: dict, concurrency: int, prefix: str | tuple[str, ...], model: str = TEXT_MODEL
) -> ArmSummary | None:
    """The `ragged` experiment's arm of ``model`` whose label starts with ``prefix`` (or one of them) at
    ``concurrency``."""
    for row in arm_summary(results, "ragged"):
        if (
            row.concurrency == concurrency
            and row.arm.startswith(prefix)
            and row.served_model.startswith(model)
        ):
            return row
    return None


def shipped_arm(results: dict, concurrency: int, model: str = TEXT_MODEL) -> ArmSummary | None:
    for row in arm_summary(results, "ragged"):
        if row.concurrency == concurrency and row.served_model == model:
            return row
    return None


def against_unoptimised(
    results: dict, model: str = TEXT_MODEL
) -> tuple[ArmSummary | None, ArmSummary | None]:
    """The `ragged` experiment at the target concurrency: ``model`` as shipped, and its unoptimised
    configuration."""
    return (
        shipped_arm(results, TARGET_CONCURRENCY, model),
        ragged_arm(results, TARGET_CONCURRENCY, UNOPTIMISED_ARM_PREFIXES, model),
    )


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def rate(row: ArmSummary | None) -> float | None:
    """An arm's mean throughput, None where it was not measured."""
    return row.throughput_per_s if row else None
