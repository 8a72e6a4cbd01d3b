"""The report's sections for the `ragged` experiment (length-aware batching and precision, arm by arm) and
the `minimal` experiment (Triton against the simplest alternative).

Called by :mod:`loadtest.report.markdown`.
"""

from __future__ import annotations

from dataclasses import astuple
from pathlib import Path

from loadtest.experiments.registry import TARGET_CONCURRENCY, experiment
from loadtest.report import causes, figures, plots, rounds
from loadtest.report.records import ArmSummary, served_runs
from loadtest.report.tables import PERF_HEADER, image, perf_row, row_of, table


def section(r: dict, folder: Path) -> str:
    points = served_runs(r, "ragged")
    if not points:
        return ""
    summary = figures.arm_summary(r, "ragged")
    plot = plots.arm_bars(
        [s for s in summary if s.served_model.startswith(figures.TEXT_MODEL)],
        folder,
        "ragged.png",
        "Ragged batching and precision, arm by arm (text ensemble)",
        "the encoder",
    )
    line = " ".join(filter(None, (causes.ragged_line(r), causes.image_line(r))))
    precision = r.get("precision_section") or ""
    return (
        experiment("ragged").heading + "\n\nThe text ensemble as shipped (the encoder takes a ragged "
        "batch: requests of any length share an execution, and the served precision chosen and gated by "
        "the export) against its clones, derived by `tritonrepo.clones`: the "
        "unoptimised configuration (the tokenizer pads each request to a length bucket, the encoder's "
        "batcher merges equal shapes only, fp32 file) and each change alone. The image classifier as "
        "shipped against its unoptimised configuration (the fp32 file as exported before its `Pad` nodes "
        "were folded into the convolutions, behind the batchers it was served with then: 2 ms of queue "
        "delay and preferred batches of 16 to 64 on the encoder, 1 ms on the pre- and post-processing; "
        "today's preprocessing, code and instances, in both), that file alone behind today's batchers "
        "and, where the export serves a reduced precision, its clone serving the fp32 file. Mixed-length "
        "single-sentence requests (the whole corpus, shuffled) and photograph variants; arms alternate, "
        "each measured in every round. Encoder figures from Triton's statistics: batch = inferences / "
        "executions; queue and compute per request (a request in a batch counts the batch's compute "
        "time).\n\n"
        + _arms_table(summary)
        + (f"\n\n{line}" if line else "")
        + _beside_inprocess(r)
        + (f"\n\n### Precision gates (from the export)\n\n{precision}" if precision else "")
        + "\n\nEvery run:\n\n"
        + table(PERF_HEADER, map(perf_row, points))
        + image(plot)
    )


def _arms_table(summary: list[ArmSummary]) -> str:
    """One row per arm and concurrency: throughput, latency and the encoder's batches (a column per field
    of ArmSummary, in its order)."""
    header = (
        "concurrency",
        "arm",
        "model",
        "runs",
        "infer/s (mean)",
        "p50 ms",
        "p99 ms",
        "encoder batch",
        "encoder queue ms",
        "encoder compute ms",
    )
    return table(header, map(astuple, summary))


def _beside_inprocess(r: dict) -> str:
    """The served text file in this process, run after each round of the text arms at c=32."""
    cells = figures.beside_inprocess_cells(r)
    if not cells:
        return ""
    rows = [
        (
            p["model"],
            p["layout"],
            p["order"],
            p["batch_size"],
            " / ".join(f"{rate:.1f}" for rate in p["rounds"]),
            p["items_per_s"],
        )
        for p in cells
    ]
    shipped = figures.shipped_arm(r, TARGET_CONCURRENCY)
    best, _ = figures.inprocess_reference(r)
    share = (
        f" Served as shipped at c={TARGET_CONCURRENCY}: {shipped.throughput_per_s:.1f}/s, "
        f"{rounds.share_text(shipped.throughput_per_s / best['items_per_s'])} of the fastest of these "
        f"({best['items_per_s']:.1f}/s)."
        if shipped and best
        else ""
    )
    return (
        "\n\nIn process between the served rounds: after each round of the text arms at "
        f"c={TARGET_CONCURRENCY}, the served text file (tokenise, forward, pool) in this process, "
        "one single-thread pipeline per core as the server runs it, while the server idles; the figure "
        "served throughput is held to (experiment `inprocess` measures the same file in a later stage, "
        "after the server has stopped)."
        + share
        + "\n\n"
        + table(("model", "layout", "order", "batch", "items/s by round", "items/s (median)"), rows)
    )


MINIMAL_SERVICES = {  # the `minimal` experiment's services, as its section names them
    "text": "text: one sentence per JSON request; the alternative tokenises and runs the same encoder file",
    "image": (
        "image: one JPEG per request as binary data (KServe's binary-data extension), outputs asked as "
        "JSON; the alternative runs image_preprocess's code, the same classifier file, softmax and top-5"
    ),
    "tabular": (
        "tabular: one real row of the model description's check inputs per JSON request; the alternative "
        "feeds the named inputs to the same ONNX file"
    ),
}
MINIMAL_INTRO = (
    "What a team writes first, for each service: an HTTP server (`python -m "
    "loadtest.baselines.minimal_server`) that runs the service's steps with the same exported file and "
    "runtime as Triton, one request at a time per process, no batching. It is measured as one process and "
    "as one worker process per core sharing one port (SO_REUSEPORT: the kernel spreads the connections, as "
    "a pre-fork web server deploys it), the cores' threads divided between the workers. It answers the "
    "same KServe v2 requests as Triton, so one closed-loop generator (`loadtest.load.json_load`, HTTP with "
    "keep-alive, the requests built before the load) drives every arm, alternating Triton, one process, "
    "workers, Triton... at each concurrency; each ratio is of the medians over the rounds. The targets "
    "(section Targets) are held to the faster deployment at each concurrency."
)
MINIMAL_SUMMARY = (
    "concurrency",
    "alternative deployed as",
    "rounds",
    "Triton req/s (median)",
    "alternative req/s (median)",
    "Triton / alternative",
    "by round",
)
MINIMAL_RUN = ("concurrency", "round", "label", "requests", "failures", "requests_per_s", "p50_ms", "p99_ms")


def minimal_section(r: dict) -> str:
    """The `minimal` experiment: one table per service (Triton against each deployment of its
    alternative, by concurrency), then every run."""
    runs = r.get("minimal") or []
    if not runs:
        return ""
    rows = [
        (rounds.run_service(m), *row_of(m | {"round": m.get("round", 0) + 1}, *MINIMAL_RUN)) for m in runs
    ]
    header = (
        "service",
        "concurrency",
        "round",
        "server",
        "requests",
        "failures",
        "req/s",
        "p50 ms",
        "p99 ms",
    )
    comparisons = rounds.minimal_comparisons(r)
    services = dict.fromkeys(c.service for c in comparisons)
    return (
        experiment("minimal").heading
        + "\n\n"
        + MINIMAL_INTRO
        + "\n\n"
        + "\n".join(f"- {MINIMAL_SERVICES.get(service, service)}" for service in services)
        + "".join(_service_table([c for c in comparisons if c.service == service]) for service in services)
        + "\n\nEvery run:\n\n"
        + table(header, rows)
    )


def _service_table(comparisons: list[rounds.MinimalComparison]) -> str:
    """One service's comparisons under a heading naming it and its served model."""
    first = comparisons[0]
    rows = [
        (
            c.concurrency,
            c.alternative,
            c.rounds,
            c.triton_per_s,
            c.alternative_per_s,
            rounds.ratio_text(c.triton_per_s, c.alternative_per_s),
            c.range_text(),
        )
        for c in comparisons
    ]
    model = f" (`{first.model}`)" if first.model else ""
    return f"\n\n### {first.service}{model}\n\n" + table(MINIMAL_SUMMARY, rows)
