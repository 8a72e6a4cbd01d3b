"""The per-token int8 rewrite, on a tiny two-layer graph (each Linear exports as one Gemm, as in the ragged
text encoder): every row's answer is independent of its batch, close to float32, and smoothing moves an
outlier channel's range into the weights."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest

from export.minilm.per_token_int8 import quantize_int8_per_token
from export.precision.device import Capabilities


def _run(path: Path, x: np.ndarray) -> np.ndarray:
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(["Y"], {"X": x})[0]


def _rows(count: int, *, outlier: float = 1.0, seed: int = 0) -> np.ndarray:
    x = np.random.default_rng(seed).normal(size=(count, 16)).astype(np.float32)
    x[:, 3] *= outlier  # one channel much larger than the others, as in a transformer's activations
    return x


def _relative_error(candidate: np.ndarray, reference: np.ndarray) -> float:
    return float(np.abs(candidate - reference).max() / np.abs(reference).max())


def test_every_gemm_becomes_an_integer_product_with_and_without_a_bias(
    two_layer_onnx: Path, tmp_path: Path
) -> None:
    out = tmp_path / "int8.onnx"
    # As the export does: 7-bit weights where the CPU has no VNNI, whose u8 x s8 kernels add pairs of
    # products in 16 bits and saturate with full-range weights.
    reduce_range = not Capabilities.detect().cpu_vnni
    rewritten = quantize_int8_per_token(
        two_layer_onnx, out, calibration=[{"X": _rows(8)}], smoothing=0.5, reduce_range=reduce_range
    )
    assert rewritten == 2
    ops = [node.op_type for node in onnx.load(str(out)).graph.node]
    assert ops.count("MatMulInteger") == 2 and "Gemm" not in ops and "MatMul" not in ops
    x = _rows(16, seed=1)
    assert _relative_error(_run(out, x), _run(two_layer_onnx, x)) < 0.03


def test_a_row_gets_the_same_answer_alone_and_in_any_batch(two_layer_onnx: Path, tmp_path: Path) -> None:
    out = tmp_path / "int8.onnx"
    quantize_int8_per_token(two_layer_onnx, out, calibration=[{"X": _rows(8)}], smoothing=0.5)
    batch = _rows(12, seed=2)
    batch[5] *= 40.0  # a loud neighbour: a per-batch range would coarsen every other row
    together = _run(out, batch)
    alone = np.concatenate([_run(out, row[None, :]) for row in batch])
    np.testing.assert_allclose(together, alone, rtol=1e-6, atol=1e-6)


def test_smoothing_recovers_the_precision_an_outlier_channel_takes(
    two_layer_onnx: Path, tmp_path: Path
) -> None:
    calibration = [{"X": _rows(64, outlier=50.0, seed=3)}]
    x = _rows(64, outlier=50.0, seed=4)
    reference = _run(two_layer_onnx, x)
    errors = {}
    for smoothing in (0.0, 0.5):
        out = tmp_path / f"int8-{smoothing}.onnx"
        quantize_int8_per_token(two_layer_onnx, out, calibration=calibration, smoothing=smoothing)
        errors[smoothing] = _relative_error(_run(out, x), reference)
    assert errors[0.5] < errors[0.0] / 2, errors


def test_reduce_range_keeps_weights_within_seven_bits(two_layer_onnx: Path, tmp_path: Path) -> None:
    out = tmp_path / "int8-7bit.onnx"
    quantize_int8_per_token(
        two_layer_onnx, out, calibration=[{"X": _rows(8)}], smoothing=0.0, reduce_range=True
    )
    int8_weights = [
        onnx.numpy_helper.to_array(t)
        for t in onnx.load(str(out)).graph.initializer
        if t.data_type == onnx.TensorProto.INT8
    ]
    assert len(int8_weights) == 2 and all(np.abs(w).max() <= 63 for w in int8_weights)
    x = _rows(16, seed=5)
    assert _relative_error(_run(out, x), _run(two_layer_onnx, x)) < 0.05


def test_smoothing_outside_zero_to_one_is_refused(two_layer_onnx: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="smoothing must be in"):
        quantize_int8_per_token(two_layer_onnx, tmp_path / "x.onnx", calibration=[], smoothing=1.5)
