"""The soak benchmark's plot and summary (see loadtest/soak/run.py)."""

from __future__ import annotations

import statistics
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - after choosing the non-interactive backend

from loadtest.report.tables import table
from loadtest.soak.config import SoakConfig
from loadtest.soak.faults import phase_counts

GROWTH_LIMIT = 0.05  # resident memory may grow less than 5% over the soak
WINDOW_S = 120.0  # the first and the last two minutes of the soak are compared


def windows(rows: list[dict], sample_s: float) -> tuple[list[dict], list[dict]]:
    """The first and last ``WINDOW_S`` of the samples taken after warm-up."""
    soak = [row for row in rows if row["phase"] == "soak"]
    size = max(1, min(len(soak) // 2, round(WINDOW_S / sample_s)))
    return soak[:size], soak[-size:]


def means(first: list[dict], last: list[dict], column: str) -> tuple[float, float]:
    """``column``'s mean over the first window and over the last."""
    before = statistics.mean(row.get(column, 0.0) for row in first)
    after = statistics.mean(row.get(column, 0.0) for row in last)
    return before, after


def growth(first: list[dict], last: list[dict], column: str) -> float:
    before, after = means(first, last, column)
    return (after - before) / before if before else 0.0


def write_report(result: dict, config: SoakConfig, *, command: str) -> str:
    rows = result["rows"]
    first, last = windows(rows, config.sample_s)
    plot(rows, config.output / "soak.png")
    processes = sorted({c for row in first + last for c in row if c.startswith("rss_mb:")})
    soak = [row for row in rows if row["phase"] == "soak"]
    errors = sum(
        row.get(f"{kind}_{what}", 0)
        for row in soak
        for kind in ("image", "text")
        for what in ("errors", "shed")
    )
    total_growth = growth(first, last, "rss_total_mb")
    lines = [
        "# Soak: mixed image and text load at a steady rate",
        "",
        f"Command: `{command}`",
        "",
        f"- warm-up {config.warmup_minutes:g} min, then {config.minutes:g} min measured; a sample every "
        f"{config.sample_s:g} s (`samples.csv`, plotted in `soak.png`)",
        "- capacity (closed loop, both pipelines at once, "
        f"{config.calibrate_s:g} s): " + ", ".join(f"{k} {v:.1f}/s" for k, v in result["capacity"].items()),
        f"- offered load ({config.fraction:.0%} of that, fixed arrival rate): "
        + ", ".join(f"{k} {v:.1f}/s" for k, v in result["rates"].items()),
        f"- machine: {result.get('machine', 'not recorded')}",
        "",
        table(
            ("", "first 2 min of the soak", "last 2 min", "change"),
            [
                _row("resident memory, all processes (MB)", first, last, "rss_total_mb"),
                *(_row(f"resident memory, {c.split(':', 1)[1]} (MB)", first, last, c) for c in processes),
                _row("image_classifier, images/s", first, last, "image_per_s"),
                _row("text_embedder, texts/s", first, last, "text_per_s"),
                _row("image_classifier p95 (ms)", first, last, "image_p95_ms"),
                _row("text_embedder p95 (ms)", first, last, "text_p95_ms"),
            ],
        ),
        "",
        f"Errors after warm-up: {errors}" + (f" ({_error_list(result)})" if errors else ""),
        "",
        *_fault_lines(result, config),
        f"Verdict: resident memory {'grew' if total_growth >= 0 else 'changed'} {total_growth:+.1%} "
        f"over the soak ({'within' if total_growth < GROWTH_LIMIT else 'over'} the {GROWTH_LIMIT:.0%} "
        f"limit); {'zero errors' if errors == 0 else f'{errors} errors'}.",
        "",
    ]
    text = "\n".join(lines)
    (config.output / "summary.md").write_text(text)
    return text


def _fault_lines(result: dict, config: SoakConfig) -> list[str]:
    """The fault phase's events and its count of lost requests (loadtest/soak/faults.py)."""
    if not result.get("faults"):
        return []
    counts = phase_counts(result["rows"], ("image", "text"))
    return [
        f"Fault phase ({config.fault_minutes:g} min, same load):",
        "",
        *(f"- {event}" for event in result["faults"]),
        f"- requests sent by the project's client during the phase: {counts['sent']}, lost: {counts['lost']}"
        + (f" ({_error_list(result)})" if counts["lost"] else ""),
        "- requests the load generator dropped unsent, its threads all waiting on answers (arrivals "
        f"past its backlog limit): {counts['shed']}",
        "",
    ]


def plot(rows: list[dict], path: Path) -> None:
    times = [row["time_s"] / 60 for row in rows]
    figure, (memory, rate) = plt.subplots(2, 1, figsize=(10, 8), sharex=True)
    memory.plot(times, [row["rss_total_mb"] for row in rows], label="all processes", linewidth=2)
    for column in sorted({c for row in rows for c in row if c.startswith("rss_mb:")}):
        memory.plot(times, [row.get(column, 0.0) for row in rows], label=column.split(":", 1)[1], linewidth=1)
    memory.set_ylabel("resident memory (MB)")
    memory.legend(fontsize=7, ncol=3)
    rate.plot(times, [row["image_per_s"] for row in rows], label="image_classifier images/s")
    rate.plot(times, [row["text_per_s"] for row in rows], label="text_embedder texts/s")
    rate.set_ylabel("completed per second")
    rate.set_xlabel("minutes")
    rate.legend(fontsize=8)
    warmup_end = next((row["time_s"] / 60 for row in rows if row["phase"] == "soak"), None)
    for axis in (memory, rate):
        axis.grid(alpha=0.3)
        if warmup_end is not None:
            axis.axvline(warmup_end, color="grey", linestyle="--", linewidth=1)
    memory.set_title("Soak: resident memory and throughput (dashed line: end of warm-up)")
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)


def _row(label: str, first: list[dict], last: list[dict], column: str) -> tuple[str, str, str, str]:
    before, after = means(first, last, column)
    change = f"{growth(first, last, column):+.1%}" if before else "-"
    return label, f"{before:.1f}", f"{after:.1f}", change


def _error_list(result: dict) -> str:
    return "; ".join(f"{count} x {message}" for message, count in sorted(result["error_messages"].items()))
