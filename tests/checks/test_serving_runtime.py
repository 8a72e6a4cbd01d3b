"""Every ONNX file is gated with the serving onnxruntime (the container's 1.19.2) as well as the local one
(export/precision/serving_runtime.py): a real worker process in build/serving-runtime runs the file, and a
file whose serving-runtime outputs fail the gate is not served, with the variant named."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import numpy_helper

from export.common import ExportError
from export.precision import serving_runtime
from export.precision.device import Capabilities
from export.precision.gates import image_gate
from export.precision.selection import Variant, select_and_write
from export.precision.serving_runtime import SERVING_ONNXRUNTIME, ServingSession
from tritonrepo.paths import SERVING_RUNTIME

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = SERVING_RUNTIME
ROWS = np.random.default_rng(0).normal(size=(64, 16)).astype(np.float32)


@pytest.fixture(scope="module")
def runtime() -> Path:
    assert (RUNTIME / "bin" / "python").is_file(), f"the serving runtime is missing: {serving_runtime.CREATE}"
    return RUNTIME


def _local(path: Path, x: np.ndarray = ROWS) -> np.ndarray:
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(["Y"], {"X": x})[0]


def test_the_worker_runs_the_file_with_the_serving_version(runtime: Path, two_layer_onnx: Path) -> None:
    with ServingSession(two_layer_onnx, "cpu", runtime_dir=runtime) as session:
        assert session.info["onnxruntime"] == SERVING_ONNXRUNTIME == "1.19.2"
        served = [session.run({"X": ROWS[i : i + 8]})[0] for i in range(0, len(ROWS), 8)]
    np.testing.assert_allclose(np.concatenate(served), _local(two_layer_onnx), rtol=1e-5, atol=1e-5)


def test_a_feed_the_file_refuses_is_reported_and_the_worker_goes_on(
    runtime: Path, two_layer_onnx: Path
) -> None:
    with ServingSession(two_layer_onnx, "cpu", runtime_dir=runtime) as session:
        with pytest.raises(ExportError, match=r"onnxruntime 1\.19\.2 \(the serving runtime\): .*X"):
            session.run({"X": np.zeros((2, 5), np.float32)})
        assert [y.shape for y in session.run({"X": ROWS[:1]})] == [(1, 8)]


def test_a_file_the_serving_version_cannot_load_names_why(runtime: Path, tmp_path: Path) -> None:
    (tmp_path / "broken.onnx").write_bytes(b"not a model")
    with pytest.raises(ExportError, match=r"serving runtime\): .*(Protobuf|parsing|Load model)"):
        ServingSession(tmp_path / "broken.onnx", "cpu", runtime_dir=runtime)


def test_a_missing_serving_runtime_fails_with_how_to_create_it(tmp_path: Path) -> None:
    with pytest.raises(ExportError, match=r"not installed in .*`make venv` creates it"):
        ServingSession(tmp_path / "model.onnx", "cpu", runtime_dir=tmp_path / "none")


def _flipped(source: Path, destination: Path) -> None:
    """``source`` with the last layer's weights negated: its classes no longer agree with the original."""
    model = onnx.load(str(source))
    last = [t for t in model.graph.initializer if len(t.dims) == 2][-1]
    last.CopyFrom(numpy_helper.from_array(-numpy_helper.to_array(last), last.name))
    onnx.save(model, str(destination))


def test_a_variant_the_serving_runtime_disagrees_with_is_not_served(
    runtime: Path, two_layer_onnx: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The local runner reproduces the reference; the written file, run by the serving runtime, does not:
    as when two onnxruntime versions' kernels disagree beyond the gate."""
    monkeypatch.setattr(serving_runtime, "needed", lambda: True)
    reference = _local(two_layer_onnx)

    def build(flip: bool):
        def write(path: Path):
            (_flipped if flip else lambda s, d: d.write_bytes(s.read_bytes()))(two_layer_onnx, path)
            return lambda batch: _local(two_layer_onnx, batch)  # agrees with the reference locally

        return write

    def feed(batch: np.ndarray) -> dict[str, np.ndarray]:
        return {"X": batch}

    destination = tmp_path / "model.onnx"
    selection = select_and_write(
        model="m",
        destination=destination,
        variants=[
            Variant(name="onnx-fp32", precision="fp32", device="cpu", build=build(False), feed=feed),
            Variant(name="onnx-int8", precision="int8", device="cpu", build=build(True), feed=feed),
        ],
        gate=lambda runner: image_gate(reference, runner(ROWS)),
        workload={1: [(ROWS[:1], 1)]},
        choice="auto",
        capabilities=Capabilities(cpu_flags=frozenset()),
        timing_min_s=0.01,
    )
    fp32, flipped = selection.candidates
    assert fp32.status == "served" and fp32.gate.passed and fp32.serving_gate.passed
    assert flipped.status == "failed gate" and flipped.gate.passed and not flipped.serving_gate.passed
    assert flipped.reason.startswith("onnxruntime 1.19.2 (the serving runtime): top1_agreement")
    assert destination.read_bytes() == two_layer_onnx.read_bytes()
    assert flipped.as_dict()["serving_gate"]["passed"] is False


def test_where_the_local_onnxruntime_is_the_serving_version_no_second_gate_runs() -> None:
    assert not serving_runtime.needed(SERVING_ONNXRUNTIME)
    assert serving_runtime.needed("1.31.1")


def test_the_makefile_installs_the_serving_version_beside_the_project_environment() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(rf"^SERVING_ONNXRUNTIME\s*:=\s*{re.escape(SERVING_ONNXRUNTIME)}$", makefile, re.M)
    assert f"SERVING_RUNTIME := {SERVING_RUNTIME.relative_to(ROOT)}" in makefile
    assert '-m pip install $(if $(QUIET),--quiet,) onnxruntime==$(SERVING_ONNXRUNTIME) "numpy<2"' in makefile
