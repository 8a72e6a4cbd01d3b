"""Every output of a model is gated, each with its own metric, in every comparison the export makes: a
module of three outputs built here is exported to ONNX, compared with eager PyTorch (the fp32 parity)
and gated locally and in the serving onnxruntime (export/precision/serving_runtime.py, a real worker process);
a file whose last output alone is wrong is not served, and a runner that answers fewer outputs than
declared fails its parity check or its gate naming the ones left out."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from description.module_spec import ModuleSpec, parse_module
from export.common import ExportError
from export.precision import serving_runtime
from export.precision.device import Capabilities
from export.precision.selection import Variant, select_and_write
from export.torch_module import checks as module_checks
from export.torch_module import kind as module_kind
from export.torch_module import variants as module_variants
from tritonrepo.paths import SERVING_RUNTIME

ROWS = np.random.default_rng(3).normal(size=(12, 4)).astype(np.float32)
SPEC = parse_module(
    {
        "model": "heads.py:model",
        "check_inputs": "heads.py:rows",
        "inputs": [{"name": "CROP", "dtype": "FP32", "dims": [4]}],
        "outputs": [
            {"name": "BOXES", "dtype": "FP32", "dims": [4], "metric": "max_abs_diff", "tolerance": 1e-5},
            {"name": "SCORES", "dtype": "FP32", "dims": [3], "metric": "top1_agreement", "tolerance": 1.0},
            {"name": "EMBEDDING", "dtype": "FP32", "dims": [2], "metric": "cosine", "tolerance": 0.9999},
        ],
        "max_batch_size": 16,
        "dynamic_batching": {"max_queue_delay_us": 100},
        "instance_groups": [{"kind": "KIND_CPU"}],
    },
    model="heads",
)


class Heads(nn.Module):
    """Three heads on one trunk, as a detector's boxes, class scores and an embedding."""

    def __init__(self, *, skew_last: bool = False) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.trunk = nn.Linear(4, 8)
        self.boxes, self.scores, self.embedding = nn.Linear(8, 4), nn.Linear(8, 3), nn.Linear(8, 2)
        if skew_last:  # the last head points elsewhere: only a gate that reads it can tell
            with torch.no_grad():
                self.embedding.weight.copy_(self.embedding.weight.flip(0))

    def forward(self, crop: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        hidden = torch.relu(self.trunk(crop))
        return self.boxes(hidden), self.scores(hidden), self.embedding(hidden)


def _export(path: Path, spec: ModuleSpec = SPEC, *, skew_last: bool = False) -> module_variants.Runner:
    return module_variants.onnx_file(Heads(skew_last=skew_last).eval(), spec, (ROWS[:2],), path)


def _reference() -> list[module_checks.Batch]:
    return [module_checks.eager(Heads().eval(), (ROWS,), SPEC, where="heads")]


def test_a_runner_that_leaves_an_output_out_fails_the_gate_naming_it() -> None:
    reference = _reference()
    first_two = [batch[:2] for batch in reference]
    result = module_checks.gate_result(SPEC.outputs, reference, first_two)
    assert not result.passed
    assert result.failures == ["EMBEDDING not answered (the file gave 2 of 3 outputs)"]
    assert sorted(result.metrics) == ["BOXES max_abs_diff", "EMBEDDING cosine", "SCORES top1_agreement"]


def test_the_serving_runtime_answers_every_output_in_the_graphs_order(tmp_path: Path) -> None:
    local = _export(tmp_path / "heads.onnx")
    with serving_runtime.ServingSession(tmp_path / "heads.onnx", "cpu") as session:
        assert session.outputs == ["BOXES", "SCORES", "EMBEDDING"]
        served = session.run({"CROP": ROWS})
    for mine, theirs in zip(local((ROWS,)), served, strict=True):
        np.testing.assert_allclose(theirs, mine, rtol=1e-5, atol=1e-6)


def test_a_file_whose_last_output_is_wrong_in_the_serving_runtime_is_not_served(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The local runner reproduces eager PyTorch; the written file, run by the serving onnxruntime, agrees
    on BOXES and SCORES but not on EMBEDDING: a gate that compared the first output alone would serve it."""
    assert (SERVING_RUNTIME / "bin" / "python").is_file(), serving_runtime.CREATE
    monkeypatch.setattr(serving_runtime, "needed", lambda: True)
    good = _export(tmp_path / "good.onnx")

    def build(path: Path) -> module_variants.Runner:
        _export(path, skew_last=True)
        return good

    reference = _reference()
    selection = select_and_write(
        model="heads_onnx",
        destination=tmp_path / "model.onnx",
        variants=[
            Variant(
                name="onnx-fp32",
                precision="fp32",
                device="cpu",
                build=build,
                feed=lambda batch: module_variants.feed(SPEC, batch),
            )
        ],
        gate=lambda runner: module_checks.gate_result(SPEC.outputs, reference, [tuple(runner((ROWS,)))]),
        workload={1: [((ROWS[:1],), 1)]},
        choice="auto",
        capabilities=Capabilities(cpu_flags=frozenset()),
        timing_min_s=0.01,
    )
    (candidate,) = selection.candidates
    assert candidate.gate is not None and candidate.gate.passed
    assert candidate.serving_gate is not None and not candidate.serving_gate.passed
    assert candidate.status == "failed gate" and selection.served is None
    assert candidate.reason.startswith(f"{serving_runtime.LABEL}: EMBEDDING cosine ")
    metrics = candidate.as_dict()["serving_gate"]["metrics"]
    assert metrics["BOXES max_abs_diff"] <= 1e-5 and metrics["SCORES top1_agreement"] == 1.0
    assert not (tmp_path / "model.onnx").exists()


def _prepared() -> module_kind.Prepared:
    model = Heads().eval()
    reference = [module_checks.eager(model, (ROWS,), SPEC, where="heads")]
    return module_kind.Prepared(
        name="heads", spec=SPEC, model=model, batches=[(ROWS,)], reference=reference, weights_sha256=""
    )


def test_the_fp32_parity_names_every_output_with_its_own_metric(tmp_path: Path) -> None:
    parity = module_kind.verify(_export(tmp_path / "heads.onnx"), _prepared(), what="heads_onnx")
    line = str(parity)
    assert line.startswith("fp32 BOXES max_abs_diff vs eager ")
    assert "; SCORES top1_agreement 1 (tolerance 1)" in line and "; EMBEDDING cosine " in line


def test_an_fp32_file_that_leaves_an_output_out_is_refused_naming_the_outputs(tmp_path: Path) -> None:
    runner = _export(tmp_path / "heads.onnx")
    with pytest.raises(ExportError, match=r"answered 2 of the 3 declared outputs \['BOXES', 'SCORES', 'EMB"):
        module_kind.verify(lambda batch: runner(batch)[:2], _prepared(), what="heads_onnx")
