"""onnxruntime's static int8 and fp16 rewrites, on a tiny two-layer graph: what is quantized, what is kept.

The input is 2-D (token rows, features), so each Linear exports as one Gemm, as in the ragged text encoder.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime
from onnx import TensorProto

from export.precision.onnx_variants import convert_fp16, quantize_int8_static


def _ops(path: Path) -> list[str]:
    return [node.op_type for node in onnx.load(str(path)).graph.node]


def _run(path: Path, x: np.ndarray) -> np.ndarray:
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(["Y"], {"X": x})[0]


def test_static_int8_writes_qdq_pairs_calibrated_on_the_given_inputs(
    two_layer_onnx: Path, tmp_path: Path
) -> None:
    rng = np.random.default_rng(0)
    feeds = [{"X": rng.normal(size=(1, 16)).astype(np.float32)} for _ in range(8)]
    quantize_int8_static(two_layer_onnx, tmp_path / "qdq.onnx", calibration=feeds)
    ops = _ops(tmp_path / "qdq.onnx")
    assert "QuantizeLinear" in ops and "DequantizeLinear" in ops
    x = feeds[0]["X"]
    assert np.abs(_run(tmp_path / "qdq.onnx", x) - _run(two_layer_onnx, x)).max() < 0.1


def test_fp16_keeps_float32_inputs_and_outputs_and_stores_float16_weights(
    two_layer_onnx: Path, tmp_path: Path
) -> None:
    convert_fp16(two_layer_onnx, tmp_path / "half.onnx")
    graph = onnx.load(str(tmp_path / "half.onnx")).graph
    assert graph.input[0].type.tensor_type.elem_type == TensorProto.FLOAT
    assert graph.output[0].type.tensor_type.elem_type == TensorProto.FLOAT
    weights = [t for t in graph.initializer if len(t.dims) == 2]
    assert weights and all(t.data_type == TensorProto.FLOAT16 for t in weights)
