"""The tuning's report folder: our summary beside Model Analyzer's own tables and HTML summaries."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from loadtest.tune.plan import TunePlan
from loadtest.tune.results import RESULTS_CSV, Measurement, ModelOutcome

SUMMARY = "summary.md"


@dataclass(frozen=True, kw_only=True)
class RunFacts:
    command: str
    elapsed_s: float
    adopted: list[Path]


def copy_model_analyzer_outputs(export: Path, report_dir: Path) -> list[Path]:
    """Model Analyzer's results table and per-model HTML summaries (its plots are embedded in them)."""
    copied = []
    target = report_dir / "model-analyzer"
    sources = [export / RESULTS_CSV, *sorted((export / "reports" / "summaries").glob("*/result_summary.*"))]
    for source in sources:
        if source.is_file():
            destination = target / source.relative_to(export)
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, destination)
            copied.append(destination)
    return copied


def write_summary(
    report_dir: Path, plan: TunePlan, results: list[ModelOutcome], facts: RunFacts, copied: list[Path]
) -> Path:
    sweep = plan.sweep
    concurrency = ", ".join(str(c) for c in sweep.concurrency)
    lines = [
        "# Tuning with Triton Model Analyzer",
        "",
        f"Command: `{facts.command}`",
        "",
        f"Model Analyzer {_version('triton-model-analyzer')} in its local launch mode started the pip "
        "wheel's tritonserver on the derived CPU repository and measured every configuration with "
        f"perf_analyzer (manual brute search, sweep `{sweep.name}`, concurrency {concurrency}, "
        f"{sweep.measurement_interval_ms} ms windows) "
        f"on {os.cpu_count()} cores in {facts.elapsed_s / 60:.1f} min. Objective: throughput; constraint: "
        f"p99 latency <= {plan.latency_budget_ms:g} ms; a variant wins only with a gain of at least "
        f"{plan.min_gain:.0%}. The shipped configuration (`*_config_default`, what "
        "`python -m tritonrepo derive` serves) was measured in the same run.",
        "",
        "## Winners",
        "",
        "| pipeline | model tuned | winner | settings | infer/s | p99 ms | shipped infer/s | shipped p99 ms "
        "| winner / shipped |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    by_model = {outcome.model: outcome for outcome in results}
    for pipeline, model in plan.targets.items():
        lines.append(_winner_row(pipeline, by_model[model]))
    lines += ["", *_verdicts(plan, by_model), ""]
    if facts.adopted:
        lines.append(
            "Adopted (`--adopt`): "
            + ", ".join(f"`{path}`" for path in facts.adopted)
            + "; `python -m tritonrepo derive` applies them to the local repository."
        )
    else:
        lines.append(
            "Nothing adopted: run with `--adopt` to write the winners where the derivation reads them."
        )
    for outcome in results:
        lines += [
            "",
            f"## Every configuration of {outcome.model}",
            "",
            *_measurement_table(outcome.measurements),
        ]
    lines += ["", "## Model Analyzer's own outputs", ""]
    lines += [f"- [{path.relative_to(report_dir)}]({path.relative_to(report_dir)})" for path in copied]
    path = report_dir / SUMMARY
    path.write_text("\n".join(lines) + "\n")
    return path


def _winner_row(pipeline: str, outcome: ModelOutcome) -> str:
    shipped = outcome.shipped
    shipped_cells = f"{shipped.throughput_per_s:.1f} | {shipped.p99_ms:.0f}" if shipped else "- | -"
    if outcome.winner is None:
        return f"| {pipeline} | {outcome.model} | none within the budget | - | - | - | {shipped_cells} | - |"
    w = outcome.winner
    ratio = f"{outcome.ratio:.2f}x" if outcome.ratio is not None else "-"
    return (
        f"| {pipeline} | {outcome.model} | `{w.variant}` | {w.settings} | {w.throughput_per_s:.1f} | "
        f"{w.p99_ms:.0f} | {shipped_cells} | {ratio} |"
    )


def _verdicts(plan: TunePlan, by_model: dict[str, ModelOutcome]) -> list[str]:
    lines = []
    for pipeline, model in plan.targets.items():
        outcome = by_model[model]
        if outcome.winner is None:
            lines.append(
                f"- {pipeline}: no configuration of {model} kept p99 within {plan.latency_budget_ms:g} ms; "
                "raise `--latency-budget-ms` or lower the load."
            )
        elif outcome.tie and outcome.fastest is not None and outcome.shipped is not None:
            gain = outcome.fastest.throughput_per_s / outcome.shipped.throughput_per_s
            lines.append(
                f"- {pipeline}: winner: the shipped configuration of {model}, a tie: the fastest variant "
                f"`{outcome.fastest.variant}` reached {gain:.2f}x, less than the {plan.min_gain:.0%} gain "
                "a change needs (`--min-gain`) on this noisy machine."
            )
        elif outcome.winner.shipped:
            lines.append(
                f"- {pipeline}: winner: the shipped configuration of {model}, fastest within the budget."
            )
        else:
            lines.append(
                f"- {pipeline}: winner: `{outcome.winner.variant}` ({outcome.winner.settings}), "
                f"p99 {outcome.winner.p99_ms:.0f} ms within {plan.latency_budget_ms:g} ms."
            )
    return lines


def _measurement_table(measurements: list[Measurement]) -> list[str]:
    lines = [
        "| configuration | settings | concurrency | infer/s | p99 ms | within budget |",
        "|---|---|---|---|---|---|",
    ]
    for m in measurements:
        lines.append(
            f"| `{m.variant}` | {m.settings} | {m.concurrency} | {m.throughput_per_s:.1f} | "
            f"{m.p99_ms:.0f} | {'yes' if m.within_budget else 'no'} |"
        )
    return lines


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "(not installed)"
