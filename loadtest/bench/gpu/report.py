"""report.md of a GPU run, from its results.json: the same kind of report as the CPU benchmark (tables of
medians over alternating rounds, ratios measured in the same run, raw data beside it)."""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path

from loadtest.experiments.budget import Budget
from loadtest.report import budget_section

TARGETS = (  # (what, threshold), read at the GPU plan's served concurrency
    ("batching on vs off, text service, at 64 in flight", 5.0),
    ("served / in-process rate of the same file and batches", 0.8),
)


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def arms_table(points: list[dict], encoders: list[str]) -> list[str]:
    """Median throughput, p99 and the encoder's batch per (concurrency, arm), and each arm's ratio to
    the first arm at that concurrency."""
    cells: dict[tuple[int, str], list[dict]] = defaultdict(list)
    for point in points:
        cells[point["perf"]["concurrency"], point["arm"]].append(point)
    lines = [
        "| in flight | arm | requests/s (median) | to the first arm | p99 ms | encoder batch | rounds |",
        "|---|---|---|---|---|---|---|",
    ]
    first: dict[int, float] = {}
    for (concurrency, arm), measured in cells.items():
        rate = _median([p["perf"]["throughput_per_s"] for p in measured])
        first.setdefault(concurrency, rate)
        p99 = _median([p["perf"]["p99_ms"] for p in measured if p["perf"]["p99_ms"] is not None])
        batches = [
            s["average_batch_size"]
            for p in measured
            for model, s in p["server"].items()
            if model.startswith(tuple(encoders))  # a variant's clone of an encoder: minilm_onnx__x2
        ]
        ratio = rate / first[concurrency] if first[concurrency] else float("nan")
        batch = _median(batches)
        cell = f"{rate:.1f} | {ratio:.2f}x | {p99:.0f} | {batch:.1f}"
        lines.append(f"| {concurrency} | {arm} | {cell} | {len(measured)} |")
    return lines


def batching_ratio(points: list[dict], concurrency: int) -> float | None:
    rates: dict[str, list[float]] = defaultdict(list)
    for point in points:
        if point["perf"]["concurrency"] == concurrency:
            rates[point["arm"]].append(point["perf"]["throughput_per_s"])
    if not rates.get("batching on") or not rates.get("batching off"):
        return None
    return _median(rates["batching on"]) / _median(rates["batching off"])


def served_ratio(section: dict) -> float | None:
    served = [p["perf"]["throughput_per_s"] for p in section.get("served", [])]
    inproc = [p["items_per_s"] for p in section.get("inprocess", [])]
    return _median(served) / _median(inproc) if served and inproc else None


def minimal_table(results: list[dict]) -> list[str]:
    cells: dict[tuple[int, str], list[float]] = defaultdict(list)
    for outcome in results:
        cells[outcome["concurrency"], outcome["label"]].append(outcome["requests_per_s"])
    lines = ["| in flight | deployment | requests/s (median) | rounds |", "|---|---|---|---|"]
    lines += [f"| {c} | {label} | {_median(v):.1f} | {len(v)} |" for (c, label), v in cells.items()]
    return lines


def server_lines(results: dict) -> list[str]:
    """Which tritonserver the figures describe: its label, URL and version, and each measured model's
    platform or backend as that server reported it."""
    server = results.get("server", {})
    lines = [f"Measured: {server.get('label', 'unknown')}."]
    if server.get("url"):
        lines += ["", f"URL `{server['url']}`, tritonserver {server.get('version', 'unknown')}."]
    if server.get("kind") == "url":  # a server in its own container or on another host
        lines += [
            "",
            "Its processes are not this machine's: their CPU time is not sampled, and the figures here "
            "are the client's and the server's statistics API's.",
        ]
    models = server.get("models", {})
    if models:
        lines += ["", "| model | platform / backend (from the server) |", "|---|---|"]
        lines += [f"| {model} | {backend} |" for model, backend in models.items()]
    return lines


def write_gpu_report(folder: Path) -> Path:
    results = json.loads((folder / "results.json").read_text())
    served = results.get("served", {})
    plan = results["plan"]
    encoders = served.get("encoders", [])
    lines = [
        f"# GPU benchmark {results['run_id']}",
        "",
        f"Command: `{results['command']}`; device: `{json.dumps(results.get('device', {}))}`; "
        f"instances {plan['kind']}; {results.get('duration_s', '?')} s.",
    ]
    if results.get("dry_run"):
        lines += [
            "",
            "**Dry run on the CPU**: the plan's plumbing with tiny counts; no figure here is a measurement.",
        ]
    lines += ["", "## The server measured", ""] + server_lines(results)
    export = results.get("export", {})
    if export.get("command"):
        took = f" in {export['seconds']} s (log: `raw/{export['log']}`)" if export.get("seconds") else ""
        lines += ["", "## Export on this device", "", f"`{export['command']}`{took}", ""]
    else:
        lines += ["", "## Precision records of the served files", ""]
        lines += [
            f"No export in this run: the records of the export that wrote them, `{export.get('records')}`.",
            "",
        ]
    lines += [results.get("precision_section", ""), ""]
    lines += _arms_sections(results, served, encoders)
    section = served.get("served_vs_inprocess", {})
    ratio = served_ratio(section)
    lines += ["", "## Served against in-process batches of the same file", ""]
    lines += [f"served / in-process: {ratio:.2f}" if ratio is not None else "not measured (see Errors)"]
    lines += ["", "## The simplest alternative (one request per forward pass, worker processes)", ""]
    lines += minimal_table(served["minimal"]) if "minimal" in served else ["not measured (see Errors)"]
    analyzer = results.get("analyzer")
    lines += ["", "## Model Analyzer: queue delay and instances on this device", ""]
    if analyzer:
        lines += [f"`{analyzer['command']}`: [{analyzer['summary']}]({analyzer['summary']})"]
    else:
        lines += [
            f"Model Analyzer {results['analyzer_skipped']}" if "analyzer_skipped" in results else "not run"
        ]
    budgets = [Budget.from_dict(b) for b in served.get("budget", [])]
    lines += [
        "",
        budget_section.section(budgets, folder) or "## Where the time goes\n\nnot measured (see Errors)",
    ]
    lines += ["", "## Targets", ""] + _targets(results, ratio)
    lines += ["", "## Errors", ""] + ([f"- {e}" for e in results.get("errors", [])] or ["none"])
    path = folder / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def _arms_sections(results: dict, served: dict, encoders: list) -> list[str]:
    """The experiments measured as arms side by side: batching, precision, instances."""
    lines: list[str] = []
    for key, title in (
        ("batching", "Dynamic batching on vs off"),
        ("precision", "fp32 against the served precision (both routes)"),
        ("instances", "One vs two instances per device"),
    ):
        lines += ["", f"## {title}", ""]
        if key == "precision":  # an fp32 file identical to the served one is no second arm
            lines += [f"- {note}" for note in served.get("precision_notes", [])]
        lines += arms_table(served[key], encoders) if key in served else ["not measured (see Errors)"]
        if key == "precision":
            lost = results.get("lost_arms", {}).items()
            lines += [f"\nThe {route} route's arm is left out: {why}" for route, why in lost]
    return lines


def _targets(results: dict, served_ratio_: float | None) -> list[str]:
    batching = results.get("served", {}).get("batching", [])
    measured = (batching_ratio(batching, 64), served_ratio_)
    lines = []
    for (what, threshold), value in zip(TARGETS, measured, strict=True):
        if value is None:
            verdict = "not measured"
        elif results.get("dry_run"):
            verdict = f"{value:.2f} (dry run: not a verdict)"
        else:
            verdict = f"{value:.2f}: {'met' if value >= threshold else 'not met'}"
        lines.append(f"- {what}, target {threshold:g}: {verdict}")
    return lines
