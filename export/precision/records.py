"""The export's precision records: one JSON file per served model under ``build/precision/``, read back by
the benchmarks.

``python -m export`` writes ``<records>/<model>.json`` for every file it exports (:func:`write_record`):
which variant is served and, for every variant, its status, reason, gate numbers and items/s (the
selection of :mod:`export.precision.selection`). The fp32 file is kept beside it, in ``<records>/<model>/``,
when another precision is served. The benchmarks read which precision a model serves (:func:`served_variant`),
the kept fp32 file (:func:`kept_file`) and a Markdown section of every gate's numbers
(:func:`report_section`), with each variant's batch-cost curve where the export timed more than two batch
sizes (by default: export/precision/selection.py, ``curve_sizes``) and what the served variant's curve
chose for the dynamic batcher (:func:`batching_choice`, recorded as ``batching``, which
``python -m tritonrepo derive`` applies: tritonrepo/recorded_batching.py).

    python -m export.precision.records [RECORDS]   # that section, for the records under RECORDS
    (build/precision/)
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

from description.batching import MIN_CURVE_SIZES, choose_batching
from export.common import ExportError
from export.precision import serving_runtime
from tritonrepo.atomic_files import write_text_atomically
from tritonrepo.paths import PRECISION_RECORDS

RECORD_FORMAT = 1


def write_record(record: dict, directory: Path = PRECISION_RECORDS) -> Path:
    """``<directory>/<model>.json``: a selection's record (``Selection.as_dict()``), for the benchmarks."""
    path = Path(directory) / f"{record['model']}.json"
    write_text_atomically(path, json.dumps(record, indent=2, sort_keys=True) + "\n")
    return path


def batching_choice(record: dict, *, max_batch_size: int, latency_budget_ms: float | None) -> dict | None:
    """What the served variant's batch-cost curve chooses for the dynamic batcher within
    ``latency_budget_ms`` (description/batching.py), with the device and variant it was timed as, for the
    derivation (tritonrepo/recorded_batching.py); None without a budget or a curve of MIN_CURVE_SIZES."""
    served = next((c for c in record["candidates"] if c["status"] == "served"), None)
    if latency_budget_ms is None or served is None:
        return None
    rates = {size: rate for size, rate in _rates(served).items() if size <= max_batch_size}
    if len(rates) < MIN_CURVE_SIZES or 1 not in rates:
        return None
    choice = choose_batching(rates, max_batch_size=max_batch_size, latency_budget_ms=latency_budget_ms)
    return {
        "device": served["device"],
        "variant": served["variant"],
        "latency_budget_ms": latency_budget_ms,
        **choice.as_dict(),
    }


def load_records(directory: Path = PRECISION_RECORDS) -> list[dict]:
    """Every recorded selection under ``directory`` (none when nothing was exported here)."""
    records = []
    for path in sorted(Path(directory).glob("*.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        if record.get("format") == RECORD_FORMAT:
            records.append(record)
    return records


def report_section(directory: Path = PRECISION_RECORDS) -> str:
    """Markdown for the benchmark report: which variant each model serves, and every gate's numbers."""
    records = load_records(directory)
    if not records:
        return f"No precision records under {directory}: `python -m export` writes them."
    served = ", ".join(f"{r['model']}: {_served(r)} (--precision {r['choice']})" for r in records)
    curves = batch_cost_table(records)
    section = f"Served variants: {served}.\n\n{markdown_table(records)}\n"
    if curves:
        section += f"\nItems/s at each batch size timed, in one process:\n\n{curves}\n"
    choices = batching_table(records)
    if choices:
        section += (
            "\nWhat each served variant's curve chose for the dynamic batcher within its description's "
            "latency budget (`python -m tritonrepo derive` applies it where no value is stated by hand):"
            f"\n\n{choices}\n"
        )
    return section


def batch_cost_table(records: Sequence[dict]) -> str:
    """Each timed variant's items/s per batch size, where the export timed more than two sizes, and what
    its largest batch costs against one item alone; empty when none was."""
    curves = [(r["model"], c, _rates(c)) for r in records for c in r["candidates"]]
    curves = [(model, c, rates) for model, c, rates in curves if len(rates) > 2]
    if not curves:
        return ""
    sizes = sorted({size for _, _, rates in curves for size in rates})
    rows = [
        f"| model | variant | status | {' | '.join(f'batch {size}' for size in sizes)} | "
        "cost of the largest batch / batch 1 |",
        "|---|---|---|" + "---:|" * len(sizes) + "---:|",
    ]
    for model, candidate, rates in curves:
        cells = " | ".join(f"{rates[size]:.0f}" if size in rates else "" for size in sizes)
        largest = max(rates)
        cost = largest * rates[1] / rates[largest] if 1 in rates else float("nan")
        rows.append(f"| {model} | {candidate['variant']} | {candidate['status']} | {cells} | {cost:.2f}x |")
    return "\n".join(rows)


def batching_table(records: Sequence[dict]) -> str:
    """Each recorded batching choice (:func:`batching_choice`) and its reasons; empty when none is."""
    chosen = [(r["model"], r["batching"]) for r in records if r.get("batching")]
    if not chosen:
        return ""
    rows = [
        "| model | timed as | budget | preferred sizes | queue delay | why |",
        "|---|---|---:|---|---:|---|",
    ]
    for model, b in chosen:
        reasons = b["reasons"]
        why = _cell(f"sizes: {reasons['preferred_batch_sizes']}; delay: {reasons['max_queue_delay_us']}")
        rows.append(
            f"| {model} | {b['variant']} ({b['device']}) | {b['latency_budget_ms']:g} ms | "
            f"{b['preferred_batch_sizes']} | {b['max_queue_delay_us']} us | {why} |"
        )
    return "\n".join(rows)


def _rates(candidate: dict) -> dict[int, float]:
    """A candidate's items/s by batch size, in increasing size (JSON keys are strings)."""
    rates = {int(size): rate for size, rate in candidate["items_per_s"].items()}
    return dict(sorted(rates.items()))


def _served(record: dict) -> str:
    return record["served"] or f"nothing, the export failed: {record.get('failure')}"


def _record(model: str, directory: Path) -> dict | None:
    path = Path(directory) / f"{model}.json"
    if not path.is_file():
        return None
    record = json.loads(path.read_text(encoding="utf-8"))
    return record if record.get("format") == RECORD_FORMAT else None


def served_variant(model: str, directory: Path = PRECISION_RECORDS) -> str:
    """The precision of the file served for ``model`` ("fp32" where the export left no record). Raises
    ExportError when the last export of ``model`` failed: what its folder holds was not gated."""
    record = _record(model, directory)
    if record is None:
        return "fp32"
    if record["served"] is None:
        raise ExportError(
            f"{model}: the last export wrote no servable file ({record.get('failure')}); "
            f"fix that and run `python -m export --only <its description>` (record: {directory})"
        )
    return next(c["precision"] for c in record["candidates"] if c["status"] == "served")


def kept_file(model: str, precision: str, directory: Path = PRECISION_RECORDS) -> Path | None:
    """The passing ``precision`` file the export kept beside ``model``'s record, if any (none when that
    precision is the one served: the served file is in the model repository)."""
    record = _record(model, directory)
    for candidate in record["candidates"] if record else ():
        if candidate["precision"] == precision and candidate.get("kept_file"):
            path = Path(directory) / model / candidate["kept_file"]
            return path if path.is_file() else None
    return None


def markdown_table(records: Sequence[dict]) -> str:
    """The gate numbers and speeds of every recorded variant, as a Markdown table for the report."""
    rows = [
        "| model | variant | status | gate numbers | items/s (batch: rate) |",
        "|---|---|---|---|---|",
    ]
    for record in records:
        for c in record["candidates"]:
            gate = c["gate"]
            numbers = _numbers(gate["metrics"]) if gate else _cell(c["reason"])
            if c.get("serving_gate"):
                numbers += f"; {serving_runtime.LABEL}: {_numbers(c['serving_gate']['metrics'])}"
            speed = ", ".join(f"{size}: {rate:.0f}" for size, rate in _rates(c).items())
            rows.append(f"| {record['model']} | {c['variant']} | {c['status']} | {numbers} | {speed} |")
        if record.get("failure"):
            failure = _cell(record["failure"])
            rows.append(f"| {record['model']} | - | export failed, nothing served | {failure} | |")
        reference = record.get("reference")
        if reference:
            numbers = _numbers(reference["metrics"])
            rows.append(
                f"| {record['model']} | {reference['gate']} | reference, not a variant | {numbers} | |"
            )
    return "\n".join(rows)


def _numbers(metrics: dict[str, float]) -> str:
    return ", ".join(f"{name} {value:.4f}" for name, value in metrics.items())


def _cell(text: str) -> str:
    """``text`` on one line of a Markdown table cell (an exception's message may hold both)."""
    return " ".join(text.split()).replace("|", "\\|")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) > 1 or (args and args[0].startswith("-")):
        print(
            "usage: python -m export.precision.records [RECORDS] (default build/precision/)", file=sys.stderr
        )
        return 2
    print(report_section(Path(args[0]) if args else PRECISION_RECORDS))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
