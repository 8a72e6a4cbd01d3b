"""PNG plots for the report (matplotlib's Agg backend, no display). Each function returns its file name."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - the backend must be chosen first
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from loadtest.report.records import ArmSummary, ServedRun, inprocess_arm  # noqa: E402

DPI = 110


def _save(figure, folder: Path, name: str) -> str:  # noqa: ANN001 - a matplotlib Figure
    figure.tight_layout()
    figure.savefig(folder / name, dpi=DPI)
    plt.close(figure)
    return name


def sweep_throughput(points: list[ServedRun], folder: Path) -> str | None:
    """Throughput against concurrency, one line per model and protocol."""
    lines: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for p in points:
        if p.measured:
            lines[f"{p.served_model} ({p.perf.protocol})"].append(
                (p.perf.concurrency, p.perf.throughput_per_s)
            )
    if not lines:
        return None
    figure, axis = plt.subplots(figsize=(8, 4.5))
    _plot_lines(axis, lines)
    _finish(
        axis,
        xlabel="concurrency (requests in flight)",
        ylabel="inferences / s",
        title="Throughput against concurrency (perf_analyzer)",
    )
    return _save(figure, folder, "sweep_throughput.png")


def _plot_lines(axis: Axes, lines: dict[str, list[tuple[int, float]]], prefix: str = "") -> None:
    """One line per label, its points in x order."""
    for label, xy in sorted(lines.items()):
        xy.sort()
        axis.plot([x for x, _ in xy], [y for _, y in xy], marker="o", label=prefix + label)


def _finish(axis: Axes, *, xlabel: str, ylabel: str, title: str) -> None:
    """Powers of two along x, the labels, a light grid and a small legend."""
    axis.set_xscale("log", base=2)
    axis.set_xlabel(xlabel)
    axis.set_ylabel(ylabel)
    axis.set_title(title)
    axis.grid(alpha=0.3)
    axis.legend(fontsize=7)


def sweep_latency(points: list[ServedRun], folder: Path, model: str) -> str | None:
    """p50 / p95 / p99 latency against concurrency for one model, per protocol."""
    chosen = sorted(
        (p for p in points if p.served_model == model and p.perf.p99_ms),
        key=lambda p: (p.perf.protocol, p.perf.concurrency),
    )
    if not chosen:
        return None
    figure, axis = plt.subplots(figsize=(8, 4.5))
    for protocol in sorted({p.perf.protocol for p in chosen}):
        rows = [p.perf for p in chosen if p.perf.protocol == protocol]
        for percentile, style in (("p50_ms", ":"), ("p95_ms", "--"), ("p99_ms", "-")):
            xy = [(r.concurrency, value) for r in rows if (value := getattr(r, percentile))]
            if xy:
                axis.plot(
                    [x for x, _ in xy],
                    [y for _, y in xy],
                    style,
                    marker="o",
                    label=f"{protocol} {percentile[:-3]}",
                )
    _finish(axis, xlabel="concurrency", ylabel="latency (ms)", title=f"Latency percentiles: {model}")
    return _save(figure, folder, f"latency_{model}.png")


def arms_against_concurrency(
    points: list[ServedRun], folder: Path, name: str, title: str, batch_model: str | None
) -> str | None:
    """Throughput of each arm against concurrency, and (below) each arm's average batch size; each model's
    arms apart where the experiment measured several."""
    by_arm: dict[str, list[ServedRun]] = defaultdict(list)
    several = len({p.model for p in points}) > 1
    for p in points:
        by_arm[f"{p.model}: {p.arm}" if several else p.arm].append(p)
    if not by_arm:
        return None
    figure, top, bottom = _throughput_over_batch(title, batch_model)
    for arm, rows in by_arm.items():
        rows.sort(key=lambda p: p.perf.concurrency)
        xs = [p.perf.concurrency for p in rows]
        top.plot(xs, [p.perf.throughput_per_s for p in rows], marker="o", label=arm)
        if batch_model:
            bottom.plot(xs, [_average_batch(p, batch_model) for p in rows], marker="s", label=arm)
    for axis in (top, bottom):
        axis.set_xscale("log", base=2)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
    return _save(figure, folder, name)


def _average_batch(point: ServedRun, model: str) -> float:
    """The average batch size of ``model`` (or its renamed clone; for "the encoder", whichever exported
    encoder the run's ensemble called) in a run; 0 when it did not run."""
    stats = point.encoder_stats() if model == "the encoder" else point.stats_of(model)
    return stats.average_batch_size if stats else 0.0


def bars(
    labels: list[str], values: list[float], folder: Path, name: str, title: str, unit: str
) -> str | None:
    if not labels:
        return None
    figure, axis = plt.subplots(figsize=(8, max(2.5, 0.45 * len(labels) + 1)))
    axis.barh(range(len(labels)), values, color="tab:blue")
    axis.set_yticks(range(len(labels)), labels, fontsize=7)
    axis.invert_yaxis()
    axis.set_xlabel(unit)
    axis.set_title(title)
    axis.grid(alpha=0.3, axis="x")
    return _save(figure, folder, name)


def inprocess_vs_served(points: list[dict], served: dict[str, float], folder: Path) -> str | None:
    """In-process items/s against batch size per model, with the served figure as a horizontal line."""
    lines: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for p in points:
        lines[f"{p['model']} ({inprocess_arm(p)})"].append((p["batch_size"], p["items_per_s"]))
    if not lines:
        return None
    figure, axis = plt.subplots(figsize=(8, 4.5))
    _plot_lines(axis, lines, prefix="in-process ")
    for label, value in served.items():
        axis.axhline(value, linestyle="--", color="gray")
        axis.annotate(label, (1, value), fontsize=7, va="bottom")
    _finish(
        axis, xlabel="batch size", ylabel="items / s", title="In-process limit against the served throughput"
    )
    return _save(figure, folder, "inprocess.png")


def arm_bars(rows: list[ArmSummary], folder: Path, name: str, title: str, batch_model: str) -> str | None:
    """Grouped bars per concurrency: each arm's throughput (top) and its encoder's average batch (bottom)."""
    arms = list(dict.fromkeys(r.arm for r in rows))
    concurrencies = sorted({r.concurrency for r in rows})
    if not arms:
        return None
    value = {(r.concurrency, r.arm): r for r in rows}
    width = 0.8 / len(arms)
    figure, top, bottom = _throughput_over_batch(title, batch_model)
    for index, arm in enumerate(arms):
        xs = [c + (index - (len(arms) - 1) / 2) * width for c in range(len(concurrencies))]
        found = [value.get((c, arm)) for c in concurrencies]
        top.bar(xs, [(f.throughput_per_s or 0) if f else 0 for f in found], width, label=arm)
        bottom.bar(xs, [(f.encoder_batch or 0) if f else 0 for f in found], width, label=arm)
    bottom.set_xticks(range(len(concurrencies)), [str(c) for c in concurrencies])
    for axis in (top, bottom):
        axis.grid(alpha=0.3, axis="y")
        axis.legend(fontsize=8)
    return _save(figure, folder, name)


def _throughput_over_batch(title: str, batch_model: str | None) -> tuple[Figure, Axes, Axes]:
    """A figure of two panels sharing the concurrency axis: throughput above, ``batch_model``'s average
    batch size below."""
    figure, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6.5), sharex=True)
    top.set_ylabel("inferences / s")
    top.set_title(title)
    bottom.set_ylabel(f"average batch size\n({batch_model})")
    bottom.set_xlabel("concurrency")
    return figure, top, bottom
