"""Any torch.nn.Module from the command line to served outputs: the sequence model of examples/sensor, two
outputs (a score per time step, on an axis that varies, and class logits), goes through
``python -m export.scaffold torch_module``, the export (fp32, ONNX and TorchScript), the derived local
repository and a real server, and ``python -m clients infer`` returns both outputs equal to eager PyTorch
for series of two lengths. docs/your-model-module.md walks through the same steps.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from clients import cli
from description.model import load_description
from description.module_code import load_callable
from export.scaffold import cli as scaffold
from tritonlocal import LocalTritonServer, ServerConfig

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "sensor" / "sensor.py"
TENSORS = ["--input", "READINGS:FP32:-1,2", "--output", "SCORES:FP32:-1", "--output", "CLASS_LOGITS:FP32:3"]
STEPS = (7, 23)  # series lengths sent, neither among the check inputs'


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty model repository, a folder for descriptions and the example's seeded weights."""
    root = tmp_path_factory.mktemp("project")
    (root / "model_repository").mkdir()
    load_callable(f"{EXAMPLE}:save_weights", ROOT, where="test")(root / "sensor.safetensors")
    return root


def test_a_module_of_two_outputs_and_a_variable_axis_is_scaffolded_served_and_called(
    project: Path, export_and_derive: Callable[..., tuple[list, Path]], tmp_path: Path
) -> None:
    repository, models = project / "model_repository", project / "model_descriptions"
    code = [f"--model={EXAMPLE}:load_model", f"--check-inputs={EXAMPLE}:check_inputs"]
    folders = ["--repository", str(repository), "--models", str(models)]
    weights = ["--weights-path", str(project / "sensor.safetensors")]
    assert scaffold.main(["torch_module", "sensor", *code, *weights, *TENSORS, *folders]) == 0
    description = load_description(models / "sensor.yaml")

    results, local = export_and_derive(description, project)
    assert [(r.written, r.selection and r.selection.served) for r in results] == [
        (True, "onnx-fp32"),
        (True, "torchscript-fp32"),
    ], [str(r) for r in results]

    model = load_callable(f"{EXAMPLE}:load_model", ROOT, where="test")(project / "sensor.safetensors")
    readings = load_callable(f"{EXAMPLE}:readings", ROOT, where="test")
    with LocalTritonServer(ServerConfig(model_repository=local, exit_timeout_s=2)) as server:
        for served in ("sensor_onnx", "sensor_torchscript"):
            for steps in STEPS:
                series = readings(3, steps, seed=steps)
                np.save(tmp_path / "readings.npy", series)
                out = tmp_path / f"{served}_{steps}"
                argv = ["--url", f"grpc://{server.grpc_url}", "infer", served]
                argv += ["--input", f"READINGS={tmp_path / 'readings.npy'}", "--output-dir", str(out)]
                assert cli.main(argv) == 0
                with torch.no_grad():
                    scores, logits = model(torch.from_numpy(series))
                assert np.load(out / "SCORES.npy").shape == (3, steps)
                np.testing.assert_allclose(np.load(out / "SCORES.npy"), scores.numpy(), rtol=0, atol=1e-5)
                np.testing.assert_allclose(
                    np.load(out / "CLASS_LOGITS.npy"), logits.numpy(), rtol=0, atol=1e-5
                )
