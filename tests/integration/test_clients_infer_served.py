"""`python -m clients infer MODEL`, the command for any model, run as people run it (a subprocess) on the
tabular classifier of examples/tabular: inputs from .npy and .json files, outputs printed, as JSON or
written as .npy files, equal to eager PyTorch's; bad inputs named with the exit code that says whose."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from description.model import load_description
from export.torch_module.kind import check_batches, load_model
from tritonlocal import LocalTritonServer
from tritonrepo.paths import REPOSITORY

ROOT = Path(__file__).resolve().parents[2]
DESCRIPTION = ROOT / "model_descriptions" / "diabetes_classifier.yaml"
MODEL = "diabetes_classifier_onnx"
ROWS = 6


def cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "clients", *map(str, args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture(scope="module")
def rows() -> dict[str, np.ndarray]:
    """The first real rows (features, sex) and eager PyTorch's logits for them."""
    description = load_description(DESCRIPTION)
    features, sex = (array[:ROWS] for array in check_batches(description, REPOSITORY)[0])
    with torch.no_grad():
        logits = load_model(description)(torch.from_numpy(features), torch.from_numpy(sex)).numpy()
    return {"FEATURES": features, "SEX": sex, "LOGITS": logits}


@pytest.fixture
def input_files(rows: dict[str, np.ndarray], tmp_path: Path) -> list[str]:
    """FEATURES as a .npy file and SEX as a .json nested list, as --input arguments."""
    np.save(tmp_path / "features.npy", rows["FEATURES"])
    (tmp_path / "sex.json").write_text(json.dumps(rows["SEX"].tolist()))
    return ["--input", f"FEATURES={tmp_path / 'features.npy'}", "--input", f"SEX={tmp_path / 'sex.json'}"]


@pytest.fixture(scope="module")
def url(triton_server: LocalTritonServer) -> list[str]:
    return ["--url", f"grpc://{triton_server.grpc_url}"]


def test_infer_prints_the_outputs_as_json_equal_to_eager_pytorch(
    url: list[str], input_files: list[str], rows: dict[str, np.ndarray]
) -> None:
    run = cli("infer", MODEL, *input_files, *url, "--json")
    assert run.returncode == 0, run.stderr
    logits = json.loads(run.stdout)["LOGITS"]
    assert (logits["datatype"], logits["shape"]) == ("FP32", [ROWS, 3])
    np.testing.assert_allclose(np.array(logits["data"]), rows["LOGITS"], rtol=0, atol=1e-5)


def test_infer_takes_one_json_request_and_prints_a_readable_block(
    url: list[str], rows: dict[str, np.ndarray], tmp_path: Path
) -> None:
    request = tmp_path / "request.json"
    request.write_text(json.dumps({"FEATURES": rows["FEATURES"].tolist(), "SEX": rows["SEX"].tolist()}))
    run = cli("infer", MODEL, "--inputs", request, *url)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[0] == f"LOGITS (FP32, shape [{ROWS}, 3]):"


def test_infer_writes_each_output_as_a_npy_file(
    url: list[str], input_files: list[str], rows: dict[str, np.ndarray], tmp_path: Path
) -> None:
    run = cli("infer", MODEL, *input_files, *url, "--output-dir", tmp_path / "out")
    assert run.returncode == 0, run.stderr
    assert f"wrote {tmp_path / 'out' / 'LOGITS.npy'} [{ROWS}, 3]" in run.stdout
    np.testing.assert_allclose(np.load(tmp_path / "out" / "LOGITS.npy"), rows["LOGITS"], rtol=0, atol=1e-5)


def test_infer_with_rows_of_the_wrong_width_exits_1_naming_the_input(
    url: list[str], rows: dict[str, np.ndarray], tmp_path: Path
) -> None:
    np.save(tmp_path / "narrow.npy", rows["FEATURES"][:, :8])
    (tmp_path / "sex.json").write_text(json.dumps(rows["SEX"].tolist()))
    run = cli(
        "infer",
        MODEL,
        "--input",
        f"FEATURES={tmp_path / 'narrow.npy'}",
        "--input",
        f"SEX={tmp_path / 'sex.json'}",
        *url,
    )
    assert run.returncode == 1, run.stdout
    assert "FEATURES" in run.stderr and "unexpected shape" in run.stderr, run.stderr


def test_infer_with_a_missing_input_file_exits_2_before_calling_the_server(
    url: list[str], tmp_path: Path
) -> None:
    run = cli("infer", MODEL, "--input", f"FEATURES={tmp_path / 'absent.npy'}", *url)
    assert run.returncode == 2
    assert "absent.npy" in run.stderr, run.stderr
