"""A torch_module whose inputs another repository model prepares (``preprocessing: {model: NAME}``): that
model's outputs must be the module's inputs, checked before anything is written, and ``check_inputs`` is
handed its folder so that the check rows come from the served preprocessing."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch
import yaml

from description.model import load_description
from export.pipeline import Options, export_model
from export.precision import timing
from export.precision.device import Capabilities
from tritonrepo.configs import parse_config
from tritonrepo.derive import derive_repository

CODE = '''
import numpy as np
import torch
from torch import nn


def model(weights):
    linear = nn.Linear(4, 3)
    linear.load_state_dict(torch.load(weights, weights_only=True))
    return linear.eval()


def rows(preprocessing):
    """Rows scaled by the preprocessing model's own parameter, read from its folder."""
    scale = float((preprocessing / "scale.txt").read_text())
    return {"FEATURES": scale * np.random.default_rng(0).normal(size=(6, 4)).astype(np.float32)}
'''

PREPROCESS_CONFIG = """
name: "toy_preprocess"
backend: "python"
max_batch_size: 8
input [ { name: "TEXT" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "VALUES" data_type: TYPE_FP32 dims: [ %s ] } ]
"""


@pytest.fixture(autouse=True)
def one_timing_round(monkeypatch: pytest.MonkeyPatch) -> None:
    """Time each variant once, briefly between the curve's ends: these tests read what was checked and
    written, not how fast it ran."""
    monkeypatch.setattr(timing, "TIMING_ROUNDS", 1)
    monkeypatch.setattr(timing, "CURVE_MIN_S", 0.01)


def _project(tmp_path: Path, *, produced_dims: str = "4", preprocessing: dict | None = None) -> Path:
    """A linear toy behind a preprocessing model of the repository tmp_path/repository; its description."""
    (tmp_path / "toy.py").write_text(CODE)
    torch.manual_seed(0)
    torch.save(torch.nn.Linear(4, 3).state_dict(), tmp_path / "toy.pt")
    folder = tmp_path / "repository" / "toy_preprocess"
    folder.mkdir(parents=True)
    (folder / "config.pbtxt").write_text(PREPROCESS_CONFIG % produced_dims)
    (folder / "scale.txt").write_text("3.0")
    description = {
        "name": "toy",
        "kind": "torch_module",
        "weights": {
            "path": "toy.pt",
            "sha256": hashlib.sha256((tmp_path / "toy.pt").read_bytes()).hexdigest(),
        },
        "preprocessing": preprocessing or {"model": "toy_preprocess"},
        "module": {
            "model": "toy.py:model",
            "check_inputs": "toy.py:rows",
            "inputs": [{"name": "FEATURES", "dtype": "FP32", "dims": [4]}],
            "outputs": [
                {"name": "SCORES", "dtype": "FP32", "dims": [3], "metric": "max_abs_diff", "tolerance": 1e-5}
            ],
            "max_batch_size": 8,
            "dynamic_batching": {"max_queue_delay_us": 100, "latency_budget_ms": 50},
            "instance_groups": [{"kind": "KIND_CPU", "count": 2}],
        },
        "served": [{"model": "toy_onnx", "format": "onnx"}],
        "precisions": {"cpu": ["fp32"], "cuda": ["fp32"]},
    }
    path = tmp_path / "toy.yaml"
    path.write_text(yaml.safe_dump(description, sort_keys=False))
    return path


def _export(tmp_path: Path, description: Path, **settings: object) -> list:
    options = Options(
        repository=tmp_path / "repository",
        precision="fp32",
        capabilities=Capabilities(cpu_flags=frozenset(), served_on="cpu"),
        record_dir=tmp_path / "records",
        **settings,  # type: ignore[arg-type]
    )
    return export_model(load_description(description), options)


def _refused(tmp_path: Path, **changes: object) -> str:
    """The model's failure (an ExportError, reported while the next model would go on); nothing written."""
    results = _export(tmp_path, _project(tmp_path, **changes))  # type: ignore[arg-type]
    assert [r.written for r in results] == [False] and results[0].failure, results
    assert not (tmp_path / "repository" / "toy_onnx").exists(), "wrote files before refusing"
    assert results[0].failure.startswith("ExportError: "), results[0].failure
    return results[0].failure.removeprefix("ExportError: ")


def test_check_inputs_is_handed_the_preprocessing_models_folder_and_the_export_checks_on_its_rows(
    tmp_path: Path,
) -> None:
    results = _export(tmp_path, _project(tmp_path))
    exported = next(r for r in results if r.selection is not None)
    assert exported.selection.served == "onnx-fp32"
    gate = exported.selection.candidates[0].gate
    assert gate is not None and gate.samples == 6  # the rows check_inputs read from the folder


def test_timing_batches_time_every_variant_at_each_size_asked_and_record_them(tmp_path: Path) -> None:
    results = _export(tmp_path, _project(tmp_path), timing_batches=(1, 2, 4, 8))
    selection = next(r for r in results if r.selection is not None).selection
    candidate = next(c for c in selection.candidates if c.status == "served")
    assert sorted(candidate.items_per_s) == [1, 2, 4, 8] and min(candidate.items_per_s.values()) > 0
    record = json.loads((tmp_path / "records" / "toy_onnx.json").read_text())
    (served,) = [c for c in record["candidates"] if c["status"] == "served"]
    assert sorted(served["items_per_s"], key=int) == ["1", "2", "4", "8"]


def test_the_default_curve_is_recorded_with_the_batching_it_chose_and_derive_serves_it(
    tmp_path: Path,
) -> None:
    _export(tmp_path, _project(tmp_path))
    record = json.loads((tmp_path / "records" / "toy_onnx.json").read_text())
    (served,) = [c for c in record["candidates"] if c["status"] == "served"]
    assert sorted(served["items_per_s"], key=int) == ["1", "2", "4", "8"]  # up to max_batch_size 8
    chosen = record["batching"]
    assert (chosen["device"], chosen["latency_budget_ms"]) == ("cpu", 50)
    assert chosen["preferred_batch_sizes"] and max(chosen["preferred_batch_sizes"]) <= 8

    derive_repository(tmp_path / "repository", tmp_path / "local", records=tmp_path / "records")
    path = tmp_path / "local" / "toy_onnx" / "config.pbtxt"
    batching = parse_config(path).dynamic_batching
    assert list(batching.preferred_batch_size) == chosen["preferred_batch_sizes"]
    assert batching.max_queue_delay_microseconds == chosen["max_queue_delay_us"]
    assert "from the onnx-fp32 curve, budget 50 ms" in path.read_text()


def test_a_preprocessing_model_whose_outputs_are_not_the_module_inputs_is_refused(tmp_path: Path) -> None:
    message = _refused(tmp_path, produced_dims="5")
    assert "model 'toy': preprocessing.model: toy_preprocess outputs [('VALUES', 'FP32', [5])]" in message
    assert "module.inputs declares [('FEATURES', 'FP32', [4])]" in message
    assert "make the datatypes and dims agree" in message


def test_a_preprocessing_model_the_repository_lacks_is_refused(tmp_path: Path) -> None:
    message = _refused(tmp_path, preprocessing={"model": "no_such_model"})
    assert "model 'toy': preprocessing.model: cannot read the model config" in message
    assert "name a model of the repository" in message


def test_preprocessing_keys_other_than_model_are_refused(tmp_path: Path) -> None:
    message = _refused(tmp_path, preprocessing={"tokenizer_model": "toy_preprocess"})
    assert "model 'toy': preprocessing: keys ['tokenizer_model']" in message
    assert "preprocessing: {model: NAME}" in message
