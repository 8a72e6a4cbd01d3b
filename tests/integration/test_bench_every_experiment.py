"""The quick benchmark as ``make bench`` runs it, every experiment of the registry, at tiny counts: the
real runner, its own tritonserver with the experiments' clones, perf_analyzer, Locust, the alternative
servers and the in-process and profiling stages. Only the counts and windows are the plan's, cut down so
that the run takes a few minutes; a number it measures means nothing, the run's completeness does."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from loadtest.bench import run
from loadtest.experiments import plans, registry
from loadtest.experiments.budget_stage import BudgetPlan
from loadtest.load.perf import PerfSettings

TINY = replace(
    plans.PLANS["quick"],
    perf=PerfSettings(measurement_interval_ms=300, max_trials=3, stability_percent=100, timeout_s=60),
    sweep_models=(plans.TEXT_MODEL,),
    sweep_concurrency=(1,),
    batching_concurrency=(4,),
    batching_rounds=1,
    instance_counts=(1, 2),
    instance_rounds=1,
    ragged_concurrency=(registry.TARGET_CONCURRENCY,),
    ragged_rounds=1,
    ragged_inprocess_texts=16,
    minimal_concurrency=(1,),
    minimal_requests={"text": 12, "image": 4, "tabular": 12},
    minimal_rounds=1,
    protocols=("grpc",),
    client_texts=12,
    client_in_flight=4,
    client_rounds=1,
    batch_cost_repeats=1,
    locust_users=2,
    locust_run_time_s=2,
    central_images=6,
    central_in_flight=2,
    central_rounds=1,
    inprocess_batches=(1, 4),
    inprocess_texts=8,
    inprocess_images=4,
    inprocess_rounds=1,
    profile_runs=1,
    profile_batch=2,
    budget=BudgetPlan(requests=8, warmup=2, inprocess_repeats=1),
)


def test_the_quick_bench_runs_every_experiment_and_reports_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(plans.PLANS, "quick", TINY)
    code = run.main(["--mode", "quick", "--output", str(tmp_path), "--run-id", "tiny", "--quiet"])
    out, err = capsys.readouterr()
    folder = tmp_path / "tiny"
    results = json.loads((folder / "results.json").read_text())
    assert (code, results["errors"]) == (0, []), err[-3000:]
    assert results["skipped"] == [] and set(results["stage_durations_s"]) == set(registry.STAGES)
    empty = [key for e in registry.EXPERIMENTS for key in e.result_keys if not results.get(key)]
    assert not empty, f"experiments that ran and recorded nothing: {empty}"
    report = (folder / "report.md").read_text()
    missing = [e.heading for e in registry.EXPERIMENTS if e.heading not in report]
    assert not missing, f"experiments the report leaves out: {missing}"
    assert out.strip() == f"report: {folder / 'report.md'}"
