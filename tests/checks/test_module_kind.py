"""The torch_module kind on small modules written here: a user's code that is wrong in one way stops the
export before anything is written, with a message naming the model, the field and the fix; code that is
right is exported (TorchScript and ONNX), verified against eager PyTorch and gated through the precision
machinery, variable axes and scripted control flow included."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import onnxruntime
import pytest
import torch
import yaml

from description.model import load_description
from export.pipeline import Options, estimated_variants, export_model, export_models
from export.precision import timing
from export.precision.device import Capabilities
from export.torch_module.kind import load_model

TOYS = '''
import numpy as np
import torch
from torch import nn


class Toy(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear, self.table = nn.Linear(4, 3), nn.Embedding(5, 4)

    def forward(self, x, ids):
        return self.linear(x + self.table(ids[:, 0]))


class TwoOutputs(Toy):
    def forward(self, x, ids):
        out = super().forward(x, ids)
        return out, out.sum(dim=1, keepdim=True)


class Double(Toy):
    def forward(self, x, ids):
        return super().forward(x, ids).double()


class Branchy(Toy):
    def forward(self, x, ids):
        out = super().forward(x, ids)
        if bool(out.sum() > 0):
            return out * 2
        return out


class Difference(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 3)

    def forward(self, a, b):
        return self.linear(a - b)


class Pooled(nn.Module):
    """x [rows, length, 4] with a variable length; a branch on the length that tracing would freeze."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 3)

    def forward(self, x, ids):
        if x.shape[1] > 2:
            x = x * 0.5
        return self.linear(x.mean(dim=1)) + ids.float()


def _loaded(cls, weights):
    model = cls()
    model.load_state_dict(torch.load(weights, weights_only=True), strict=False)
    return model.eval()


def model(weights):
    return _loaded(Toy, weights)


def two_outputs(weights):
    return _loaded(TwoOutputs, weights)


def double(weights):
    return _loaded(Double, weights)


def branchy(weights):
    return _loaded(Branchy, weights)


def pooled(weights):
    torch.manual_seed(0)
    return Pooled().eval()


def difference(weights):
    torch.manual_seed(0)
    return Difference().eval()


def pairs():
    rng = np.random.default_rng(2)
    return {name: rng.normal(size=(6, 4)).astype(np.float32) for name in ("a", "b")}


def training_mode(weights):
    return Toy()


def rows():
    rng = np.random.default_rng(0)
    return {"X": rng.normal(size=(10, 4)).astype(np.float32), "IDS": rng.integers(0, 5, (10, 1))}


def int32_ids():
    return rows() | {"IDS": rows()["IDS"].astype(np.int32)}


def sequences():
    rng = np.random.default_rng(1)
    return [
        {"X": rng.normal(size=(6, length, 4)).astype(np.float32), "IDS": np.ones((6, 1), np.int64)}
        for length in (2, 5)
    ]
'''

MODULE = {
    "model": "code/toys.py:model",
    "check_inputs": "code/toys.py:rows",
    "inputs": [
        {"name": "X", "dtype": "FP32", "dims": [4]},
        {"name": "IDS", "dtype": "INT64", "dims": [1], "range": [0, 4]},
    ],
    "outputs": [
        {"name": "SCORES", "dtype": "FP32", "dims": [3], "metric": "max_abs_diff", "tolerance": 1e-5}
    ],
    "max_batch_size": 8,
    "dynamic_batching": {"max_queue_delay_us": 100, "preferred_batch_sizes": [8]},
    "instance_groups": [{"kind": "KIND_CPU", "count": 2}],
}


TORCHSCRIPT_ONLY = [{"model": "toy_torchscript", "format": "torchscript"}]


@pytest.fixture(autouse=True)
def one_timing_round(monkeypatch: pytest.MonkeyPatch) -> None:
    """Time each variant once, briefly between the curve's ends: these tests read which variant passed its
    gate, not how fast it ran."""
    monkeypatch.setattr(timing, "TIMING_ROUNDS", 1)
    monkeypatch.setattr(timing, "CURVE_MIN_S", 0.01)


def _project(tmp_path: Path, served: list | None = None, **module: object) -> Path:
    """A description of the toy named ``toy`` (``module`` replaces fields of MODULE) beside its code and
    weights; returns the description's path. The repository it exports into is tmp_path/repository."""
    (tmp_path / "code").mkdir(exist_ok=True)
    (tmp_path / "code" / "toys.py").write_text(TOYS)
    torch.manual_seed(0)
    layers = torch.nn.ModuleDict({"linear": torch.nn.Linear(4, 3), "table": torch.nn.Embedding(5, 4)})
    torch.save(layers.state_dict(), tmp_path / "toy.pt")
    digest = hashlib.sha256((tmp_path / "toy.pt").read_bytes()).hexdigest()
    description = {
        "name": "toy",
        "kind": "torch_module",
        "weights": {"path": "toy.pt", "sha256": digest},
        "module": MODULE | module,
        "served": served or [{"model": "toy_onnx", "format": "onnx"}, *TORCHSCRIPT_ONLY],
        "precisions": {"cpu": ["fp32", "bf16"], "cuda": ["fp32"]},
    }
    path = tmp_path / "toy.yaml"
    path.write_text(yaml.safe_dump(description, sort_keys=False))
    return path


def _export(tmp_path: Path, description: Path, precision: str = "fp32") -> list:
    options = Options(
        repository=tmp_path / "repository",
        precision=precision,
        capabilities=Capabilities(cpu_flags=frozenset({"avx512_bf16"}), served_on="cpu"),
        record_dir=tmp_path / "records",
    )
    return export_model(load_description(description), options)


def _refused(tmp_path: Path, **module: object) -> str:
    """The export's error for a toy with ``module`` changed: the model fails as a whole (the next model
    would go on) with an ExportError or a DescriptionError, and nothing may have been written."""
    results = _export(tmp_path, _project(tmp_path, **module))
    assert [r.written for r in results] == [False] and results[0].failure, results
    written = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.glob("repository/**/*"))
    assert not written, f"wrote {written} before refusing"
    kind, _, message = results[0].failure.partition(": ")
    assert kind in ("ExportError", "DescriptionError"), results[0].failure
    return message


def test_a_module_that_does_not_import_is_refused_naming_the_missing_package(tmp_path: Path) -> None:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "broken.py").write_text("import no_such_package_here\n")
    message = _refused(tmp_path, model="code/broken.py:model")
    assert "model 'toy': module.model: importing" in message
    assert "install 'no_such_package_here'" in message


def test_a_callable_the_file_does_not_define_is_refused_listing_what_it_defines(tmp_path: Path) -> None:
    message = _refused(tmp_path, model="code/toys.py:load_modle")
    assert "model 'toy': module.model: code/toys.py has no 'load_modle'" in message
    assert "it defines" in message and "model" in message and "name one of them" in message


def test_a_model_returning_more_outputs_than_declared_is_refused(tmp_path: Path) -> None:
    message = _refused(tmp_path, model="code/toys.py:two_outputs")
    assert "model 'toy': module.outputs: the model returns 2 tensor(s), the description declares 1" in message
    assert "declare one output per returned tensor" in message


def test_a_declared_dim_the_model_does_not_produce_is_refused_with_the_dims_it_does(tmp_path: Path) -> None:
    outputs = [MODULE["outputs"][0] | {"dims": [5]}]  # type: ignore[index]
    message = _refused(tmp_path, outputs=outputs)
    assert "module.outputs[0].dims: SCORES is declared [5], the model produces [3]" in message
    assert "set dims: [3]" in message


def test_an_output_datatype_that_differs_from_the_declared_one_is_refused(tmp_path: Path) -> None:
    message = _refused(tmp_path, model="code/toys.py:double")
    assert "module.outputs[0].dtype: SCORES is declared FP32, the model returns torch.float64" in message


def test_check_inputs_of_another_datatype_than_declared_are_refused(tmp_path: Path) -> None:
    message = _refused(tmp_path, check_inputs="code/toys.py:int32_ids")
    assert "check_inputs(): IDS is int32, the description declares INT64 (int64)" in message


def test_a_model_that_tracing_cannot_follow_is_refused_suggesting_script(tmp_path: Path) -> None:
    message = _refused(tmp_path, model="code/toys.py:branchy")
    assert "model 'toy': module: the trace may not be faithful" in message
    assert "set module.script: true" in message


def test_inputs_named_as_forwards_arguments_but_in_another_order_are_refused(tmp_path: Path) -> None:
    inputs = [{"name": "b", "dtype": "FP32", "dims": [4]}, {"name": "a", "dtype": "FP32", "dims": [4]}]
    message = _refused(
        tmp_path, model="code/toys.py:difference", check_inputs="code/toys.py:pairs", inputs=inputs
    )
    assert "module.inputs: declared in the order ['b', 'a'], forward takes ['a', 'b']" in message


def test_a_model_in_training_mode_is_refused(tmp_path: Path) -> None:
    message = _refused(tmp_path, model="code/toys.py:training_mode")
    assert "returned a module in training mode" in message and "return model.eval()" in message


def test_a_good_module_is_exported_to_both_formats_equal_to_eager_with_generated_configs(
    tmp_path: Path,
) -> None:
    results = _export(tmp_path, _project(tmp_path))
    written = {r.path.relative_to(tmp_path / "repository").as_posix() for r in results if r.written}
    assert written == {
        "toy_onnx/config.pbtxt",
        "toy_torchscript/config.pbtxt",
        "toy_onnx/1/model.onnx",
        "toy_torchscript/1/model.pt",
    }
    files = [r for r in results if r.selection is not None]
    assert [r.selection.served for r in files] == ["onnx-fp32", "torchscript-fp32"]  # type: ignore[union-attr]
    assert all(r.parity is not None and r.parity.value <= 1e-5 for r in files)
    assert all(not r.written for r in _export(tmp_path, tmp_path / "toy.yaml"))  # up to date: nothing to do


def test_an_up_to_date_file_has_its_batching_chosen_again_from_its_recorded_curve(tmp_path: Path) -> None:
    batching = {"preferred_batch_sizes": [8], "max_queue_delay_us": 0, "latency_budget_ms": 100}
    description = _project(
        tmp_path, served=[{"model": "toy_onnx", "format": "onnx"}], dynamic_batching=batching
    )
    assert all(r.written for r in _export(tmp_path, description) if r.selection is not None)
    path = tmp_path / "records" / "toy_onnx.json"
    chosen = json.loads(path.read_text())["batching"]
    assert chosen and chosen["preferred_batch_sizes"], chosen
    # A record written under an earlier rule: the file is up to date, so it is not timed again.
    stale = json.loads(path.read_text())
    stale["batching"] = chosen | {"preferred_batch_sizes": [99], "reasons": {"preferred_batch_sizes": "old"}}
    path.write_text(json.dumps(stale))
    assert not any(r.written for r in _export(tmp_path, description))
    assert json.loads(path.read_text())["batching"] == chosen


def test_an_export_of_some_files_writes_those_and_leaves_the_descriptions_other_files_alone(
    tmp_path: Path,
) -> None:
    options = Options(
        repository=tmp_path / "repository",
        precision="fp32",
        capabilities=Capabilities(cpu_flags=frozenset(), served_on="cpu"),
        record_dir=tmp_path / "records",
        files=frozenset({"toy_torchscript"}),
    )
    description = load_description(_project(tmp_path))
    assert estimated_variants(description, options) == {"toy_torchscript": 1}
    results = export_models([description], options)
    assert results == []  # nothing failed
    assert (tmp_path / "repository" / "toy_torchscript" / "1" / "model.pt").is_file()
    assert not (tmp_path / "repository" / "toy_onnx" / "1").exists()
    assert not (tmp_path / "records" / "toy_onnx.json").exists()


def test_bf16_torchscript_is_gated_with_the_outputs_metric_and_served_when_it_passes(tmp_path: Path) -> None:
    loose = [MODULE["outputs"][0] | {"variant_tolerance": 0.1}]  # type: ignore[index]
    results = _export(tmp_path, _project(tmp_path, TORCHSCRIPT_ONLY, outputs=loose), precision="bf16")
    torchscript = next(r for r in results if r.model == "toy_torchscript" and r.selection is not None)
    assert torchscript.selection is not None and torchscript.selection.served == "torchscript-bf16"
    gate = next(c.gate for c in torchscript.selection.candidates if c.variant == "torchscript-bf16")
    assert gate is not None and 0 < gate.metrics["SCORES max_abs_diff"] <= 0.1


def test_a_bf16_file_outside_the_variant_tolerance_is_not_served(tmp_path: Path) -> None:
    strict = [MODULE["outputs"][0] | {"variant_tolerance": 1e-7, "tolerance": 1e-7}]  # type: ignore[index]
    results = _export(tmp_path, _project(tmp_path, TORCHSCRIPT_ONLY, outputs=strict), precision="bf16")
    failed = [r for r in results if r.failure]  # the generated config is written; the model file is not
    assert len(failed) == 1 and "no variant passed for --precision bf16" in (failed[0].failure or "")
    assert not failed[0].written


def test_a_scripted_module_with_a_variable_axis_is_served_right_at_every_length(tmp_path: Path) -> None:
    inputs = [{"name": "X", "dtype": "FP32", "dims": [-1, 4]}, {"name": "IDS", "dtype": "INT64", "dims": [1]}]
    description = _project(
        tmp_path,
        model="code/toys.py:pooled",
        check_inputs="code/toys.py:sequences",
        inputs=inputs,
        script=True,
    )
    _export(tmp_path, description)
    repository = tmp_path / "repository"
    onnx = onnxruntime.InferenceSession(str(repository / "toy_onnx" / "1" / "model.onnx"))
    scripted = torch.jit.load(str(repository / "toy_torchscript" / "1" / "model.pt"))
    model = load_model(load_description(description))
    for length in (1, 3, 7):  # the branch on the length is taken for 3 and 7, not for 1
        x, ids = (
            np.random.default_rng(length).normal(size=(2, length, 4)).astype(np.float32),
            np.ones((2, 1), np.int64),
        )
        with torch.no_grad():
            expected = model(torch.from_numpy(x), torch.from_numpy(ids)).numpy()
            from_script = scripted(torch.from_numpy(x), torch.from_numpy(ids))[0].numpy()
        np.testing.assert_allclose(onnx.run(["SCORES"], {"X": x, "IDS": ids})[0], expected, atol=1e-5)
        np.testing.assert_allclose(from_script, expected, atol=1e-5)


def test_the_same_module_traced_instead_of_scripted_is_refused_for_its_branch(tmp_path: Path) -> None:
    inputs = [{"name": "X", "dtype": "FP32", "dims": [-1, 4]}, {"name": "IDS", "dtype": "INT64", "dims": [1]}]
    message = _refused(
        tmp_path, model="code/toys.py:pooled", check_inputs="code/toys.py:sequences", inputs=inputs
    )
    assert "set module.script: true" in message
