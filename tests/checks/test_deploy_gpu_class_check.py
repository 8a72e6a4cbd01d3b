"""The server's start-up check (deploy/tritonserver/gpu_class_check.py): files gated on another GPU class,
or a CPU export on a GPU, are refused with a message to re-export; the same class, and a CPU export on a
server without a GPU, start tritonserver. The script runs here as in the container, with a stand-in
nvidia-smi on PATH answering as a given GPU does, and execs a stand-in server command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from description.model import load_description
from export.pipeline import Options, export_model
from export.precision import timing
from export.precision.device import Capabilities, CudaDevice
from tritonrepo.paths import DESCRIPTIONS

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "deploy" / "tritonserver" / "gpu_class_check.py"
IN_IMAGE = "/opt/tritonserver/gpu_class_check.py"
T4 = CudaDevice(name="Tesla T4", compute_capability=(7, 5), cuda_version="12.4", driver_version="550.54.15")
A100 = CudaDevice(name="NVIDIA A100-SXM4-80GB", compute_capability=(8, 0))
CPU_FLAGS = frozenset({"avx2"})


def _repository(tmp_path: Path, capabilities: Capabilities) -> Path:
    """A repository of two exported files whose manifests record the export's ``gated_on``."""
    repository = tmp_path / "models"
    gated_on = capabilities.gated_on()
    for model, artifact in (("minilm_onnx", "model.onnx"), ("minilm_torchscript", "model.pt")):
        version = repository / model / "1"
        version.mkdir(parents=True)
        (version / artifact).write_bytes(b"exported")
        (version / ".export.json").write_text(json.dumps({"artifact": artifact, "gated_on": gated_on}))
    tokenizer = repository / "text_tokenizer" / "1"
    tokenizer.mkdir(parents=True)
    (tokenizer / "tokenizer.json").write_text("{}")  # not an exported model file: never checked
    return repository


def _host(tmp_path: Path, gpu: CudaDevice | None, *, compute_cap_field: bool = True) -> dict[str, str]:
    """An environment whose PATH has an nvidia-smi answering as ``gpu`` (none: no nvidia-smi at all)."""
    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    if gpu is not None:
        row = f"{gpu.name}, {gpu.capability}" if compute_cap_field else gpu.name
        fail = (
            ""
            if compute_cap_field
            else 'case "$1" in *compute_cap*) echo "not a valid field" >&2; exit 2;; esac\n'
        )
        (folder / "nvidia-smi").write_text(f"#!/bin/sh\n{fail}echo '{row}'\n")
        (folder / "nvidia-smi").chmod(0o755)
    return {**os.environ, "PATH": str(folder)}  # only the stand-in: the commands run are absolute paths


def _start(repository: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The server's command as compose and Kubernetes run it, with a stand-in for tritonserver."""
    server = [sys.executable, "-c", "print('tritonserver started')", f"--model-repository={repository}"]
    return subprocess.run(
        [sys.executable, str(SCRIPT), *server], env=env, capture_output=True, text=True, timeout=60
    )


def test_files_gated_on_another_gpu_class_are_refused_with_a_message_to_re_export(tmp_path: Path) -> None:
    repository = _repository(tmp_path, Capabilities(cpu_flags=CPU_FLAGS, cuda=T4))
    result = _start(repository, _host(tmp_path, A100))
    assert result.returncode == 1 and "tritonserver started" not in result.stdout
    assert "REFUSED to serve" in result.stderr
    assert "minilm_onnx/1/model.onnx was gated on Tesla T4 (compute capability 7.5)" in result.stderr
    assert "this server's GPU is NVIDIA A100-SXM4-80GB (compute capability 8.0)" in result.stderr
    assert "minilm_torchscript/1/model.pt" in result.stderr and "tokenizer.json" not in result.stderr
    assert (
        "Re-export the repository on this server's GPU class (python -m export --served-on gpu"
        in result.stderr
    )


def test_files_gated_on_the_same_class_start_the_server(tmp_path: Path) -> None:
    repository = _repository(tmp_path, Capabilities(cpu_flags=CPU_FLAGS, cuda=A100, served_on="gpu"))
    another_a100 = CudaDevice(name="NVIDIA A100-PCIE-40GB", compute_capability=(8, 0))
    result = _start(repository, _host(tmp_path, another_a100))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"gpu_class_check: every exported file in {repository} was gated for this host (8.0)",
        "tritonserver started",
    ]


def test_a_cpu_export_is_refused_on_a_gpu_and_served_without_one(tmp_path: Path) -> None:
    repository = _repository(tmp_path, Capabilities(cpu_flags=CPU_FLAGS, cuda=A100, served_on="cpu"))
    refused = _start(repository, _host(tmp_path, A100))
    assert (
        refused.returncode == 1
        and "was gated on a CPU (a CPU export), but this server has NVIDIA A100" in (refused.stderr)
    )
    (tmp_path / "cpu-host").mkdir()
    served = _start(repository, _host(tmp_path / "cpu-host", None))
    assert served.returncode == 0 and "tritonserver started" in served.stdout


def test_files_gated_on_a_gpu_are_refused_by_a_server_without_one(tmp_path: Path) -> None:
    repository = _repository(tmp_path, Capabilities(cpu_flags=CPU_FLAGS, cuda=T4))
    (tmp_path / "cpu-host").mkdir()
    result = _start(repository, _host(tmp_path / "cpu-host", None))
    assert result.returncode == 1 and "but this server has no GPU" in result.stderr
    assert "(python -m export --served-on cpu" in result.stderr


def test_an_older_driver_without_the_compute_capability_field_compares_gpu_names(tmp_path: Path) -> None:
    repository = _repository(tmp_path, Capabilities(cpu_flags=CPU_FLAGS, cuda=T4))
    assert _start(repository, _host(tmp_path, T4, compute_cap_field=False)).returncode == 0
    (tmp_path / "other").mkdir()
    assert _start(repository, _host(tmp_path / "other", A100, compute_cap_field=False)).returncode == 1


def test_a_file_whose_manifest_does_not_say_where_it_was_gated_is_refused(tmp_path: Path) -> None:
    repository = _repository(tmp_path, Capabilities(cpu_flags=CPU_FLAGS))
    (repository / "minilm_onnx" / "1" / ".export.json").write_text(json.dumps({"artifact": "model.onnx"}))
    result = _start(repository, _host(tmp_path, None))
    assert (
        result.returncode == 1
        and "minilm_onnx/1/model.onnx: its manifest does not say where" in result.stderr
    )


def test_every_file_the_export_writes_for_a_model_of_any_tensors_is_accepted_where_it_was_gated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tabular classifier (a torch_module: the user's own nn.Module) through the real export: each
    served file gets a manifest naming it and where it was gated, so the server starts on a CPU host and
    is refused, naming both files, on a GPU."""
    monkeypatch.setattr(timing, "TIMING_ROUNDS", 1)  # which variant is served does not matter here
    monkeypatch.setattr(timing, "CURVE_MIN_S", 0.01)  # nor the batch-cost curve between its ends
    repository = tmp_path / "models"
    options = Options(
        repository=repository,
        precision="fp32",
        capabilities=Capabilities(cpu_flags=CPU_FLAGS, served_on="cpu"),
        record_dir=tmp_path / "records",
    )
    export_model(load_description(DESCRIPTIONS / "diabetes_classifier.yaml"), options)
    written = sorted(p.relative_to(repository).as_posix() for p in repository.glob("*/*/*") if p.is_file())
    assert written == [
        "diabetes_classifier_onnx/1/.export.json",
        "diabetes_classifier_onnx/1/model.onnx",
        "diabetes_classifier_torchscript/1/.export.json",
        "diabetes_classifier_torchscript/1/model.pt",
    ]
    (tmp_path / "cpu-host").mkdir()
    served = _start(repository, _host(tmp_path / "cpu-host", None))
    assert served.returncode == 0 and "tritonserver started" in served.stdout, served.stderr
    refused = _start(repository, _host(tmp_path, A100))
    assert refused.returncode == 1 and "tritonserver started" not in refused.stdout
    for path in ("diabetes_classifier_onnx/1/model.onnx", "diabetes_classifier_torchscript/1/model.pt"):
        assert f"{path} was gated on a CPU (a CPU export), but this server has NVIDIA A100" in refused.stderr


def test_the_manifest_records_the_gpu_cuda_driver_and_runtimes() -> None:
    recorded = Capabilities(cpu_flags=CPU_FLAGS, cuda=T4).gated_on()
    assert recorded["device"] == "cuda" and recorded["gpu_name"] == "Tesla T4"
    assert recorded["compute_capability"] == "7.5"
    assert recorded["cuda_version"] == "12.4" and recorded["driver_version"] == "550.54.15"
    assert recorded["serving_onnxruntime"] == "1.19.2" and recorded["torch"] and recorded["onnxruntime"]
    on_cpu = Capabilities(cpu_flags=CPU_FLAGS, cuda=T4, served_on="cpu").gated_on()
    assert on_cpu["device"] == "cpu" and on_cpu["gpu_name"] is None


def _server_commands() -> dict[str, list[str]]:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]["tritonserver"]
    deployment = next(
        doc for doc in yaml.safe_load_all((ROOT / "deploy/k8s/deployment.yaml").read_text()) if doc
    )
    (server,) = [
        c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "tritonserver"
    ]
    assert "command" not in server and "entrypoint" not in compose, "the image's entrypoint runs the command"
    return {"compose": compose["command"], "kubernetes": server["args"]}


@pytest.mark.parametrize("where", ["compose", "kubernetes"])
def test_the_server_starts_through_the_check_and_the_probe_stays_per_model(where: str) -> None:
    command = _server_commands()[where]
    # The check, then the instance counts that follow the cores (tritonrepo/host_instances.py), then the
    # server.
    host_instances = "/opt/tritonserver/host_instances.py"
    assert command[:5] == ["python3", IN_IMAGE, "python3", host_instances, "tritonserver"]
    assert "--model-repository=/models" in command
    dockerfile = (ROOT / "deploy" / "tritonserver" / "Dockerfile").read_text()
    assert f"COPY deploy/tritonserver/gpu_class_check.py {IN_IMAGE}" in dockerfile
    assert "COPY tritonrepo/host_instances.py /opt/tritonserver/host_instances.py" in dockerfile
    assert "gpu_class_check" not in (ROOT / "deploy" / "tritonserver" / "model_probe.py").read_text()
