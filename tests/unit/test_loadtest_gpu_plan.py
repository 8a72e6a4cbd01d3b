"""The GPU benchmark's plan, without a server: what a CUDA run measures, that its dry run is the same plan
on the CPU, that a machine without CUDA is refused by name, and the Model Analyzer search on the GPU."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from loadtest.bench.gpu import stage
from loadtest.bench.gpu.plan import DRY_RUN, GPU, GpuPlan
from loadtest.experiments.minimal import alternative_label
from loadtest.tune.cli import main as tune_main
from loadtest.tune.plan import SWEEPS, make_plan, model_config_parameters

ROOT = Path(__file__).resolve().parents[2]


def test_the_gpu_plan_exports_serves_kind_gpu_and_measures_what_the_targets_read() -> None:
    assert GPU.kind == "KIND_GPU" and GPU.export_args == ("--served-on", "gpu")  # every model, auto
    assert GPU.batching_concurrency == (1, 2, 4, 8, 16, 32, 64, 128)  # 1..128 in flight
    assert 64 in GPU.batching_concurrency and GPU.served_concurrency == 64
    assert GPU.instance_counts == (1, 2) and GPU.rounds >= 2
    assert GPU.analyzer_sweep in SWEEPS and SWEEPS[GPU.analyzer_sweep].instance_counts[:2] == (2, 3)


def test_the_dry_run_is_the_same_plan_on_the_cpu_with_tiny_counts() -> None:
    assert DRY_RUN.kind == "KIND_CPU"
    # The export runs too, with the CPU standing in for the GPU; fp32 and the served encoder keep it short.
    assert DRY_RUN.export_args == (
        "--served-on", "cpu", "--precision", "fp32", "--only", "text", "--timing-batches", "1,4",
    )  # fmt: skip
    same = {f.name for f in dataclasses.fields(GpuPlan)} - {"name", "kind", "export_args", "perf"}
    for name in same:
        small, big = getattr(DRY_RUN, name), getattr(GPU, name)
        if isinstance(big, tuple):
            assert len(small) <= len(big) and max(small) <= max(big), name
        elif isinstance(big, (int, float)):
            assert small <= big, name
    assert DRY_RUN.analyzer_sweep in SWEEPS


def test_a_plan_refuses_an_unknown_kind_and_empty_loads() -> None:
    with pytest.raises(ValueError, match="kind must be one of KIND_GPU, KIND_CPU"):
        dataclasses.replace(GPU, kind="KIND_TPU")
    with pytest.raises(ValueError, match="batching_concurrency must be positive"):
        dataclasses.replace(GPU, batching_concurrency=())
    with pytest.raises(ValueError, match=r"must say where the models are served \(--served-on\)"):
        dataclasses.replace(GPU, export_args=("--precision", "fp32"))
    with pytest.raises(ValueError, match="leave --repository and --records to the run"):
        dataclasses.replace(GPU, export_args=("--served-on", "gpu", "--records", "x"))


def test_the_export_runs_for_the_gpu_it_serves_into_the_given_repository(tmp_path: Path) -> None:
    command = stage.export_command(GPU, tmp_path / "repository", tmp_path / "precision")
    assert command[1:] == [
        "-m", "export", "--served-on", "gpu",
        "--repository", str(tmp_path / "repository"), "--records", str(tmp_path / "precision"),
    ]  # fmt: skip
    dry = stage.export_command(DRY_RUN, tmp_path / "repository", tmp_path / "precision")
    assert tuple(dry[3:11]) == DRY_RUN.export_args and dry[11:] == command[5:]


def test_a_gpu_run_without_cuda_is_refused_with_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(stage.GpuBenchError, match=r"no CUDA device here .*--dry-run"):
        stage.device_facts(GPU)
    assert stage.device_facts(DRY_RUN)["device"] == "cpu"


def test_bench_gpu_exits_1_naming_the_missing_device_before_measuring(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import torch

    from loadtest.bench.run import main

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["--mode", "gpu", "--output", str(tmp_path), "--run-id", "no-gpu"]) == 1
    assert "no CUDA device here" in capsys.readouterr().err
    assert not list(tmp_path.glob("*/results.json")), "nothing measured, nothing reported"


def test_dry_run_goes_with_the_gpu_mode_only() -> None:
    from loadtest.bench.run import main

    assert main(["--mode", "quick", "--dry-run"]) == 2


def test_the_alternative_is_labelled_by_its_worker_processes() -> None:
    assert alternative_label(1) == "one process, one request at a time"
    assert alternative_label(16) == "16 worker processes, one request at a time each"


def test_model_analyzer_searches_kind_gpu_instances_on_a_gpu(tmp_path: Path) -> None:
    parameters = model_config_parameters(SWEEPS["gpu"], "KIND_GPU")
    assert parameters["instance_group"] == [[{"kind": "KIND_GPU", "count": n}] for n in (2, 3, 4)]
    assert 0 in parameters["dynamic_batching"]["max_queue_delay_microseconds"]
    source = ROOT / "model_repository"
    gpu = make_plan(["text_embedder"], sweep="gpu", latency_budget_ms=1000, source=source, kind="KIND_GPU")
    cpu = make_plan(["text_embedder"], sweep="gpu", latency_budget_ms=1000, source=source)
    from tritonrepo.configs import load_repository

    models = load_repository(source)
    assert gpu.fingerprint(models) != cpu.fingerprint(models), "a GPU search never resumes a CPU checkpoint"
    with pytest.raises(ValueError, match="kind must be one of"):
        make_plan(["text_embedder"], sweep="gpu", latency_budget_ms=1000, source=source, kind="GPU")


def test_a_gpu_search_is_never_adopted_into_the_local_cpu_settings(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert tune_main(["--models", "text_embedder", "--kind", "KIND_GPU", "--adopt"]) == 2
    assert "--adopt writes the local CPU settings" in capsys.readouterr().err


def _records(folder: Path, fp32_bytes: bytes) -> Path:
    """minilm_onnx's export record: tf32 served, the fp32 file that passed kept beside it: ``fp32_bytes``."""
    from export.precision.records import RECORD_FORMAT

    candidates = [
        {"variant": "onnx-tf32-cuda", "precision": "tf32", "status": "served", "kept_file": None},
        {"variant": "onnx-fp32-cuda", "precision": "fp32", "status": "passed", "kept_file": "fp32.onnx"},
    ]
    (folder / "minilm_onnx").mkdir(parents=True)
    (folder / "minilm_onnx" / "fp32.onnx").write_bytes(fp32_bytes)
    record = {"format": RECORD_FORMAT, "served": "onnx-tf32-cuda", "candidates": candidates}
    (folder / "minilm_onnx.json").write_text(json.dumps(record))
    return folder


@pytest.mark.parametrize("same_bytes", [True, False])
def test_the_precision_experiment_never_presents_one_file_and_config_as_two_precisions(
    scaffold_project: Path, tmp_path: Path, same_bytes: bool
) -> None:
    from loadtest.bench.gpu.plan import FP32, precision_notes, served_clones

    source = scaffold_project / "model_repository"
    (source / "minilm_onnx" / "1").mkdir(exist_ok=True)
    (source / "minilm_onnx" / "1" / "model.onnx").write_bytes(b"float32 graph")
    records = _records(tmp_path / "precision", b"float32 graph" if same_bytes else b"another graph")
    served, arms = served_clones(GPU, source, records)
    clone = "text_embedder" + FP32
    if same_bytes:  # TF32 and fp32 of one ONNX file are the same bytes; the config alone would differ
        assert arms["precision"] == {
            "onnx: tf32 (served)": "text_embedder",
            "torchscript: fp32 (served)": "text_embedder_torchscript",
        }
        assert clone not in [v.served_name for v in served]
        (note,) = precision_notes(source, records)
        assert note.startswith(
            "onnx: the fp32 file kept beside the served tf32 one (fp32.onnx) is the served"
        )
    else:
        assert arms["precision"]["onnx: fp32"] == clone and clone in [v.served_name for v in served]
        assert precision_notes(source, records) == []
