"""The benchmark measures a model of any tensors named by option: the tabular classifier, a native model
with no ensemble, gets its sweep and batching on vs off (its own no-batching clone) with the real rows its
description names."""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path

from loadtest.experiments import plans as experiments_plan
from loadtest.experiments.served import PerfSession, sweeps
from loadtest.experiments.stages import batching_experiment
from loadtest.load.perf import PerfSettings
from loadtest.report.records import ServedRun
from tritonlocal import LocalTritonServer, ServerConfig
from tritonrepo.variants import build_repository

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "model_repository"
MODEL = "diabetes_classifier_onnx"  # native, no ensemble: it is its own encoder
SHORT = PerfSettings(measurement_interval_ms=500, max_trials=3, stability_percent=60, timeout_s=60)


def test_batching_on_and_off_and_the_sweep_measure_the_tabular_model_on_its_real_rows(tmp_path: Path) -> None:
    plan = experiments_plan.with_models(experiments_plan.PLANS["quick"], (MODEL,), SOURCE)
    assert plan.batching_models == (MODEL,)  # its own batcher: measured with and without it
    plan = replace(
        plan,
        perf=SHORT,
        batching_concurrency=(4,),
        batching_rounds=1,
        sweep_concurrency=(1, 4),
        protocols=("grpc",),
    )
    variants = [v for v in experiments_plan.served_variants(plan, SOURCE, tmp_path) if v.model == MODEL]
    assert [(v.served_name, v.batching) for v in variants] == [
        (MODEL, True),
        (MODEL + experiments_plan.NOBATCH, False),
    ]
    hashes = build_repository(SOURCE, tmp_path / "served", variants, total_threads=2)
    assert sorted(hashes) == [MODEL, MODEL + experiments_plan.NOBATCH]  # the clone alone: no steps to copy
    config = ServerConfig(model_repository=tmp_path / "served", exit_timeout_s=2, stop_timeout_s=10)
    with LocalTritonServer(config) as server:
        session = PerfSession.for_server(server, repository=SOURCE, raw=tmp_path, settings=SHORT)
        batching = batching_experiment(plan, session)
        swept = sweeps(
            session,
            models=list(plan.sweep_models),
            protocols=["grpc"],
            concurrencies=[1, 4],
            measured=batching,
        )
    assert session.input_data(MODEL).kind == "described rows"
    assert [(p.arm, p.served_model) for p in batching] == [
        ("batching on", MODEL),
        ("batching off", MODEL + experiments_plan.NOBATCH),
    ]
    assert all(p.perf.ok and p.encoder == MODEL for p in batching + swept)
    on, off = (ServedRun.from_dict(asdict(p)).encoder_stats() for p in batching)
    assert on is not None and on.model == MODEL and on.executions > 0
    assert off is not None and off.model == MODEL + experiments_plan.NOBATCH
    assert off.executions > 0 and off.average_batch_size == 1.0  # no batcher: one request per execution
    assert [(p.served_model, p.perf.concurrency) for p in swept] == [(MODEL, 1), (MODEL, 4)]
    assert swept[1].perf == batching[0].perf  # c=4 reused from the batching experiment, not measured twice
