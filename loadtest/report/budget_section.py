"""The time budget in a report: "Where the time goes", a table and a stacked-bar plot per service.

Each service gets one table (a row per part, a column per load: ms per request and its share of the
mean round trip; then the measured mean, what the parts account for, and the same work in one process)
and one PNG with a stacked bar per load beside a bar of the in-process time. The remainder row is always
there; a budget whose remainder is over the tolerance says so under its table.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - the backend must be chosen first

from loadtest.experiments.budget import (  # noqa: E402
    KINDS,
    REMAINDER,
    REMAINDER_MEANING,
    TOLERANCE,
    Budget,
)
from loadtest.report.plots import DPI  # noqa: E402
from loadtest.report.tables import image, table  # noqa: E402

TITLE = "Where the time goes"
EXPLAINED = (
    "The client's mean round trip of each service split by Triton's statistics "
    "(`/v2/models/<model>/stats`, read before and after the same requests, divided by their counts): the "
    "client and protocol (round trip minus the service's request time in Triton), then per step its queue, "
    "input copy, compute and output copy. Triton charges a batched request its whole execution, so these "
    "are what one request waited and was computed. Where the server's Python models wrote their timings "
    "(`PYBACKEND_TIMINGS_DIR`) a step's compute is split into the model's own code, the batching and "
    "tensors around it in the model's `execute()` (reading the inputs, gathering and splitting the batch, "
    "the responses) and the Python stub's share (the Python backend's message to and from the stub "
    "process). "
    "*Not accounted for* is the service's request time that no step's counters hold: Triton's own work "
    "around and between the steps (the ensemble's hand-offs, the response). "
    f"A budget adds up when it is within {TOLERANCE:.0%} of the mean round trip. Counted times can "
    "overlap: Triton's request time runs until the request is released, which on a busy machine can come "
    "after the client has its answer (the client's share then reads small or negative), and a step's "
    "output copy is still counted while the next step has begun. *In one process* is the same work on a "
    "batch of the load's size in one Python process, no server, the exported file with the threads one "
    "served instance has."
)
# One colour per kind of part; the steps of a service are told apart by the bar's segments' order and hatch.
COLOURS = dict(
    zip(
        KINDS,
        ("#9e9e9e", "#f4a261", "#8ecae6", "#2a9d8f", "#264653", "#e9c46a", "#e76f51", "#219ebc", "#d62828"),
        strict=True,
    )
)
HATCHES = ("", "//", "..", "xx", "\\\\")
INPROCESS, INPROCESS_COLOUR = "in one process", "#6a4c93"


def section(budgets: list[Budget], folder: Path, *, intro: str = "", plots: bool = True) -> str:
    """The section's Markdown, its plots written into ``folder`` (``plots``); '' without budgets."""
    if not budgets:
        return ""
    parts = [f"## {TITLE}", EXPLAINED + (f" {intro}" if intro else "")]
    for service in dict.fromkeys(b.service for b in budgets):
        runs = sorted((b for b in budgets if b.service == service), key=lambda b: b.in_flight)
        parts.append(service_table(runs) + (image(plot(runs, folder)) if plots else ""))
    return "\n\n".join(parts)


def service_table(runs: list[Budget]) -> str:
    """One service's table: the parts in rows, the loads in columns."""
    header = ["part", *(f"{b.in_flight} in flight: ms (share)" for b in runs)]
    rows: list[list[object]] = []
    for label in part_labels(runs):
        row: list[object] = [f"**{label}**" if label == REMAINDER else label]
        for budget in runs:
            found = [p.ms for p in budget.parts if p.label == label]
            ms = sum(found)
            row.append(f"{ms:.3f} ({ms / budget.mean_ms:.0%})" if found and budget.mean_ms else "-")
        rows.append(row)
    rows.append(["mean round trip (measured)", *(f"{b.mean_ms:.3f}" for b in runs)])
    rows.append(["Triton's request time (measured)", *(f"{b.server_ms:.3f}" for b in runs)])
    rows.append(["accounted for by the parts", *(_accounted(b) for b in runs)])
    rows.append(["p50 / p99 round trip", *(f"{b.p50_ms:.2f} / {b.p99_ms:.2f}" for b in runs)])
    rows.append(["requests, throughput", *(f"{b.requests}, {b.throughput_per_s:.1f}/s" for b in runs)])
    rows.append(["in one process", *(_inprocess(b) for b in runs)])
    for step in dict.fromkeys(f.model for b in runs for f in b.steps):
        rows.append([f"{step}: average batch, ms per execution", *(_step(b, step) for b in runs)])
    text = f"### {runs[0].service} ({runs[0].protocol})\n\n" + table(header, rows)
    notes = [f"{b.in_flight} in flight: {n}" for b in runs for n in b.notes]
    notes += [
        f"{b.in_flight} in flight: the parts miss {b.remainder_ms:.3f} ms of {b.mean_ms:.3f} "
        f"({abs(b.remainder_ms) / b.mean_ms:.0%}, over {TOLERANCE:.0%}): {REMAINDER_MEANING}"
        for b in runs
        if not b.adds_up
    ]
    return text + ("\n\n" + "\n".join(f"- {n}" for n in notes) if notes else "")


def part_labels(runs: list[Budget]) -> list[str]:
    """Every part's label in the order a request meets them: the client, each step's parts in the order
    of :data:`KINDS`, the remainder."""
    steps = list(dict.fromkeys(p.step for b in runs for p in b.parts if p.step))
    parts = {(p.step, p.kind): p.label for b in runs for p in b.parts}
    order = sorted(parts, key=lambda key: (steps.index(key[0]) + 1 if key[0] else 0, KINDS.index(key[1])))
    remainder = [key for key in order if key[1] == REMAINDER]
    return [parts[key] for key in order if key[1] != REMAINDER] + [parts[key] for key in remainder]


def _accounted(budget: Budget) -> str:
    verdict = "adds up" if budget.adds_up else "**does not add up**"
    share = budget.accounted_ms / budget.mean_ms if budget.mean_ms else 0.0
    return f"{budget.accounted_ms:.3f} ({share:.0%}, {verdict})"


def _inprocess(budget: Budget) -> str:
    done = budget.inprocess
    if done is None:
        return "not measured"
    return f"{done.ms_per_batch:.3f} ms per batch of {done.batch_size} ({done.what})"


def _step(budget: Budget, step: str) -> str:
    facts = next((f for f in budget.steps if f.model == step), None)
    return f"{facts.average_batch:.1f}, {facts.ms_per_execution:.3f}" if facts else "-"


def plot(runs: list[Budget], folder: Path) -> str:
    """One panel per load (each its own scale): the budget's parts stacked (ms per request) above the
    in-process time; returns the file name."""
    figure, axes = plt.subplots(len(runs), 1, figsize=(9, 0.6 + 1.5 * len(runs)), squeeze=False)
    steps = list(dict.fromkeys(p.step for b in runs for p in b.parts if p.step))
    handles: dict[str, Any] = {}
    for axis, budget in zip(axes[:, 0], runs, strict=True):
        left = 0.0
        for part in budget.parts:
            hatch = HATCHES[steps.index(part.step) % len(HATCHES)] if part.step else ""
            bars = axis.barh(
                0, max(part.ms, 0.0), left=left, color=COLOURS[part.kind], hatch=hatch, edgecolor="white"
            )
            handles.setdefault(part.label, bars)
            left += max(part.ms, 0.0)
        axis.text(left, 0, f" {budget.mean_ms:.2f} ms", va="center", fontsize=7)
        labels = [f"{budget.in_flight} in flight"]
        if budget.inprocess is not None:
            handles.setdefault(INPROCESS, axis.barh(1, budget.inprocess.ms_per_batch, color=INPROCESS_COLOUR))
            labels.append(f"one process, batch {budget.inprocess.batch_size}")
        axis.set_yticks(range(len(labels)), labels, fontsize=8)
        axis.invert_yaxis()
        axis.grid(axis="x", alpha=0.3)
    axes[-1, 0].set_xlabel("ms: mean round trip per request; in one process, one call on the batch")
    axes[0, 0].set_title(f"{runs[0].service}: {TITLE.lower()}")
    figure.legend(
        list(handles.values()), list(handles), fontsize=6, loc="upper left", bbox_to_anchor=(0.78, 0.98)
    )
    figure.tight_layout(rect=(0, 0, 0.77, 1))
    name = f"budget_{runs[0].service}.png"
    figure.savefig(folder / name, dpi=DPI)
    plt.close(figure)
    return name
