"""The batching on vs off experiment and the sweep run on a model named by option, not the defaults: an
ensemble whose encoder neither plan measures, and the tabular classifier, a native model with no
ensemble (its own encoder and its own no-batching clone), sent the real rows its description names."""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path

import pytest

from loadtest.experiments import plans as experiments_plan
from loadtest.experiments.served import PerfSession, sweeps
from loadtest.experiments.stages import batching_experiment
from loadtest.load.perf import PerfSettings
from loadtest.report.records import ServedRun
from tritonlocal import LocalTritonServer, ServerConfig
from tritonrepo.clones import Clone, build_repository
from tritonrepo.paths import REPOSITORY as SOURCE

SHORT = PerfSettings(measurement_interval_ms=500, max_trials=3, stability_percent=60, timeout_s=60)
NOBATCH = experiments_plan.NOBATCH


@pytest.mark.parametrize(
    ("model", "encoder", "served", "data"),
    [
        # an ensemble: its clone copies the steps; sentences for its TEXT input
        ("text_embedder_torchscript", "minilm_torchscript", 6, "sentences"),
        # native, no ensemble: the clone alone; the rows its description's check inputs return
        ("diabetes_classifier_onnx", "diabetes_classifier_onnx", 2, "described rows"),
    ],
)
def test_batching_on_and_off_and_the_sweep_measure_the_named_model(
    model: str, encoder: str, served: int, data: str, tmp_path: Path
) -> None:
    plan = experiments_plan.with_models(experiments_plan.PLANS["quick"], (model,), SOURCE)
    assert plan.batching_models == (model,)
    plan = replace(
        plan,
        perf=SHORT,
        batching_concurrency=(4,),
        batching_rounds=1,
        sweep_concurrency=(1, 4),
        protocols=("grpc",),
    )
    variants = [Clone(model=model), Clone(model=model, suffix=NOBATCH, batching=False)]
    served_clones = experiments_plan.served_clones(plan, SOURCE, tmp_path)
    assert {(v.served_name, v.batching) for v in served_clones if v.model == model} == {
        (v.served_name, v.batching) for v in variants
    }
    hashes = build_repository(SOURCE, tmp_path / "served", variants, total_threads=2)
    assert len(hashes) == served  # an ensemble's clone copies its steps; a native model is cloned alone
    config = ServerConfig(model_repository=tmp_path / "served", exit_timeout_s=2, stop_timeout_s=10)
    with LocalTritonServer(config) as server:
        session = PerfSession.for_server(server, repository=SOURCE, raw=tmp_path, settings=SHORT)
        batching = batching_experiment(plan, session)
        swept = sweeps(session, models=[model], protocols=["grpc"], concurrencies=[1, 4], measured=batching)
    assert session.input_data(model).kind == data
    assert [(p.arm, p.served_model) for p in batching] == [
        ("batching on", model),
        ("batching off", model + NOBATCH),
    ]
    assert all(p.perf.ok and p.encoder == encoder for p in batching + swept)
    on, off = (ServedRun.from_dict(asdict(p)).encoder_stats() for p in batching)
    assert on is not None and on.model == encoder and on.executions > 0
    assert off is not None and off.model == encoder + NOBATCH
    assert off.executions > 0 and off.average_batch_size == 1.0  # no batcher: one request per execution
    assert [(p.served_model, p.perf.concurrency) for p in swept] == [(model, 1), (model, 4)]
    assert swept[1].perf == batching[0].perf  # c=4 reused from the batching experiment, not measured twice
