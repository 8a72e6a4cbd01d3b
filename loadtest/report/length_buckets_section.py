"""The report's section for experiment 8: length buckets, each request padded to its own length, and
grouping by length inside the server (BLS).

Called by :mod:`loadtest.report.markdown`.
"""

from __future__ import annotations

from pathlib import Path

from loadtest.experiments.registry import experiment
from loadtest.report import findings, plots
from loadtest.report.records import served_runs
from loadtest.report.tables import PERF_HEADER, image, perf_row, table


def section(r: dict, folder: Path) -> str:
    points = served_runs(r, "bucketing")
    if not points:
        return ""
    summary = findings.bucketing_summary(r)
    plot = plots.arm_bars(
        summary,
        folder,
        "bucketing.png",
        "Length buckets vs own length vs grouped in the server (text)",
        findings.TEXT_ENCODER,
    )
    rows = [
        (
            s.concurrency,
            s.arm,
            s.served_model,
            s.runs,
            s.throughput_per_s,
            s.p99_ms,
            s.encoder_batch,
            s.encoder_queue_ms,
            s.encoder_compute_ms,
        )
        for s in summary
    ]
    header = (
        "concurrency",
        "arm",
        "model",
        "runs",
        "infer/s (mean)",
        "p99 ms (mean)",
        "encoder batch",
        "encoder queue ms",
        "encoder compute ms",
    )
    line = findings.bucketing_line(r)
    return (
        experiment("bucketing").heading + "\n\nThe text ensemble as served "
        "(`text_tokenizer` pads each request to a length bucket) against its clone whose tokenizer's "
        "`buckets` parameter is every length 1..max_length, so each request is padded only to its own "
        "length (derived by `loadtest.experiments.variant_repository`), and `text_embedder_grouped`, "
        "a Python model that "
        "tokenises each request through `text_tokenizer`, groups the requests it is handed by padded "
        "width and calls the same `minilm_onnx` once per width (BLS). Mixed-length single-sentence "
        "requests (the whole corpus, shuffled); arms alternate, each measured in every round. Encoder "
        "figures from Triton's statistics for each run: batch = inferences / executions; queue and "
        "compute per request (a request in a batch counts the batch's compute time).\n\n"
        + table(header, rows)
        + (f"\n\n{line}" if line else "")
        + "\n\nEvery run:\n\n"
        + table(PERF_HEADER, map(perf_row, points))
        + image(plot)
    )
