"""Markdown tables and the cells of the report, shared by its sections."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from loadtest.report.records import ModelStats, ServedRun


def table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def row_of(record: Mapping[str, object], *keys: str) -> tuple[object, ...]:
    """The values of ``keys`` in a results.json record, in that order: a table's row."""
    return tuple(record[key] for key in keys)


def cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.1f}" if abs(value) >= 10 else f"{value:.2f}"
    return str(value).replace("|", "/")


def ms(value: float | None) -> str:
    return f"{value:.0f}" if value else "-"


def batches(server: dict[str, ModelStats]) -> str:
    """Each model's average batch size in a run, for the models that executed."""
    stats = sorted(server.items())
    return ", ".join(f"{name} {s.average_batch_size:.1f}" for name, s in stats if s.executions) or "-"


def perf_row(p: ServedRun) -> tuple:
    perf = p.perf
    state = "stable" if perf.stable else ("**error**: " + perf.error if perf.error else "unstable (median)")
    return (
        p.arm,
        p.served_model,
        perf.protocol,
        perf.concurrency,
        perf.throughput_per_s,
        ms(perf.p50_ms),
        ms(perf.p95_ms),
        ms(perf.p99_ms),
        batches(p.server),
        state,
    )


PERF_HEADER = (
    "arm",
    "model",
    "protocol",
    "concurrency",
    "infer/s",
    "p50 ms",
    "p95 ms",
    "p99 ms",
    "average batch size (server statistics)",
    "measurement",
)


def image(name: str | None) -> str:
    return f"\n\n![{name}]({name})" if name else ""
