"""The GPU benchmark's plan run on the CPU (``python -m loadtest.bench --mode gpu --dry-run``): every step
of the GPU run against the real local server with tiny counts, so its plumbing is tested where no GPU is:
the export into the run's copy of the repository (the CPU standing in for the GPU, fp32, the text encoder
the benchmark serves: about a minute of the run here), then serving and measuring what it wrote.
The command starts and stops its own servers (Triton, the alternative's workers, Model Analyzer's)."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from loadtest.bench.gpu.server import LOCAL_LABEL
from loadtest.tune.analyzer import prepare
from loadtest.tune.plan import make_plan

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def dry_run(
    tmp_path_factory: pytest.TempPathFactory, run_python: Callable[..., object]
) -> Iterator[tuple[Path, dict]]:
    output = tmp_path_factory.mktemp("gpu-bench")
    run_id = f"gpu-dry-run-test-{os.getpid()}"
    work = ROOT / "build" / "bench" / run_id  # where the run derives its repositories
    try:
        bench = ["-m", "loadtest.bench", "--mode", "gpu", "--dry-run"]
        run_python(*bench, "--output", output, "--run-id", run_id, timeout_s=1200)
        left = [
            p.pid for p in psutil.process_iter(["cmdline"]) if str(work) in " ".join(p.info["cmdline"] or [])
        ]
        assert not left, f"servers of the run still running: {left}"
        folder = output / run_id
        yield folder, json.loads((folder / "results.json").read_text())
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_the_dry_run_exports_into_its_copy_on_the_cpu_and_reports_no_error(
    dry_run: tuple[Path, dict],
) -> None:
    folder, results = dry_run
    assert results["dry_run"] is True and results["device"]["device"] == "cpu"
    assert results["plan"]["kind"] == "KIND_CPU" and results["errors"] == []
    export = results["export"]
    assert export["command"].startswith(
        "python -m export --served-on cpu --precision fp32 --only text --timing-batches 1,4 --repository "
    )
    assert export["seconds"] > 0 and (folder / "raw" / export["log"]).is_file()
    log = (folder / "raw" / export["log"]).read_text()
    assert "model 1/1 all_minilm_l6_v2, variants 2/2 - finished" in log  # the export's progress lines
    section = results["precision_section"]  # the records the export wrote beside the copy, as on a GPU
    assert "minilm_onnx: onnx-fp32 (--precision fp32)" in section
    assert "minilm_torchscript: torchscript-fp32 (--precision fp32)" in section
    report = (folder / "report.md").read_text()
    assert "Dry run on the CPU" in report and "(dry run: not a verdict)" in report
    assert "python -m export --served-on cpu" in report
    assert (folder / "raw" / "tritonserver.log").is_file() and (folder / "raw" / "perf_analyzer").is_dir()


def test_the_report_says_the_local_server_runs_the_files_in_the_python_backend(
    dry_run: tuple[Path, dict],
) -> None:
    folder, results = dry_run
    server = results["server"]
    assert server["kind"] == "local" and server["label"] == LOCAL_LABEL
    assert server["models"]["minilm_onnx"] == "python" and server["version"] == "2.51.0"
    report = (folder / "report.md").read_text()
    assert "the local tritonserver from the nvidia-pytriton wheel" in report
    assert "do not describe a compose deployment" in report and "| minilm_onnx | python |" in report


def test_batching_precision_and_instances_are_measured_side_by_side(dry_run: tuple[Path, dict]) -> None:
    _, results = dry_run
    served, plan = results["served"], results["plan"]
    cells = {(p["arm"], p["perf"]["concurrency"]) for p in served["batching"]}
    assert cells == {
        (arm, c) for arm in ("batching on", "batching off") for c in plan["batching_concurrency"]
    }
    assert all(
        p["perf"]["throughput_per_s"] > 0
        for key in ("batching", "precision", "instances")
        for p in served[key]
    )
    precision_arms = {p["arm"] for p in served["precision"]}
    assert {arm.split(":")[0] for arm in precision_arms} == {"onnx", "torchscript"}
    assert any(arm.endswith("(served)") for arm in precision_arms)
    assert {p["arm"] for p in served["instances"]} == {"1 instance per device", "2 instances per device"}
    off = [p for p in served["batching"] if p["arm"] == "batching off"]
    assert all(s["average_batch_size"] == 1 for p in off for s in p["server"].values()), (
        "off means one by one"
    )


def test_served_rate_sits_beside_in_process_batches_of_the_same_file(dry_run: tuple[Path, dict]) -> None:
    _, results = dry_run
    section = results["served"]["served_vs_inprocess"]
    assert len(section["served"]) == len(section["inprocess"]) == results["plan"]["rounds"]
    assert all(point["model"] == "minilm_onnx" and point["items_per_s"] > 0 for point in section["inprocess"])


def test_the_alternative_runs_as_one_process_and_as_worker_processes(dry_run: tuple[Path, dict]) -> None:
    _, results = dry_run
    labels = {outcome["label"] for outcome in results["served"]["minimal"]}
    assert "Triton (text_embedder)" in labels and "one process, one request at a time" in labels
    assert any("worker processes" in label for label in labels) or psutil.cpu_count() == 1
    assert all(outcome["failures"] == 0 for outcome in results["served"]["minimal"])


def test_model_analyzer_searched_queue_delay_and_instances(dry_run: tuple[Path, dict]) -> None:
    folder, results = dry_run
    assert "--kind KIND_CPU" in results["analyzer"]["command"]
    summary = (folder / results["analyzer"]["summary"]).read_text()
    assert "queue delay" in summary and "instance(s)" in summary


def test_the_gpu_search_keeps_kind_gpu_in_model_analyzers_repository(tmp_path: Path) -> None:
    """Not a server test: it derives the exported files, which the integration tier has."""
    source = ROOT / "model_repository"
    plan = make_plan(["text_embedder"], sweep="gpu", latency_budget_ms=1000, source=source, kind="KIND_GPU")
    workspace = prepare(plan, tmp_path)  # derives the repository as Model Analyzer will serve it
    config = (workspace.repository / "minilm_onnx" / "config.pbtxt").read_text()
    assert "KIND_GPU" in config and "KIND_CPU" not in config
    analyzer_config = workspace.config_file.read_text()
    assert "cpu_only: false" in analyzer_config and "kind: KIND_GPU" in analyzer_config
