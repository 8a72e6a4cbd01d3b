"""The batching on vs off experiment and the sweep run on a model named by option, not the defaults."""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path

from loadtest.experiments import plans as experiments_plan
from loadtest.experiments.served import PerfSession, sweeps
from loadtest.experiments.stages import batching_experiment
from loadtest.load.perf import PerfSettings
from loadtest.report.records import ServedRun
from tritonlocal import LocalTritonServer, ServerConfig
from tritonrepo.variants import Variant, build_repository

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "model_repository"
MODEL, ENCODER = "text_embedder_torchscript", "minilm_torchscript"  # measured by neither plan's batching
SHORT = PerfSettings(measurement_interval_ms=500, max_trials=3, stability_percent=60, timeout_s=60)


def test_batching_on_and_off_and_the_sweep_measure_the_named_model(tmp_path: Path) -> None:
    plan = experiments_plan.with_models(experiments_plan.PLANS["quick"], (MODEL,), SOURCE)
    plan = replace(
        plan,
        perf=SHORT,
        batching_concurrency=(4,),
        batching_rounds=1,
        sweep_concurrency=(1, 4),
        protocols=("grpc",),
    )
    variants = [Variant(model=MODEL), Variant(model=MODEL, suffix=experiments_plan.NOBATCH, batching=False)]
    build_repository(SOURCE, tmp_path / "served", variants, total_threads=2)
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
    assert [(p.arm, p.served_model) for p in batching] == [
        ("batching on", MODEL),
        ("batching off", MODEL + experiments_plan.NOBATCH),
    ]
    assert all(p.perf.ok and p.encoder == ENCODER for p in batching + swept)
    off = ServedRun.from_dict(asdict(batching[1])).encoder_stats()
    assert off is not None and off.model == ENCODER + experiments_plan.NOBATCH
    assert off.executions > 0 and off.average_batch_size == 1.0  # no batcher: one request per execution
    assert [(p.served_model, p.perf.concurrency) for p in swept] == [(MODEL, 1), (MODEL, 4)]
    assert swept[1].arm == "default" and swept[1].perf == batching[0].perf  # c=4 reused, not measured twice
