"""Reduced-precision rewrites of an exported float32 ONNX file, with onnxruntime's own tools.

- int8, dynamic: weights quantized ahead of time (per output channel), activations at run time.
- int8, static QDQ: weights per channel, activations with ranges calibrated on real inputs (the caller
  passes them), written as QuantizeLinear/DequantizeLinear pairs that onnxruntime fuses into int8 kernels.
- fp16: every float initializer and op in float16, graph inputs and outputs kept as they were (for GPUs).

None of these checks accuracy: every result goes through a gate (export/gates.py) before it may be served.
On CPUs without VNNI, u8 x s8 products can saturate in AVX2 kernels, so ``reduce_range`` (7-bit weights)
is used there, as onnxruntime's documentation advises.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np
import onnx
from onnxruntime.quantization import (
    CalibrationDataReader,
    CalibrationMethod,
    QuantFormat,
    QuantType,
    quantize_dynamic,
    quantize_static,
)
from onnxruntime.quantization.shape_inference import quant_pre_process

logger = logging.getLogger(__name__)


class _Feeds(CalibrationDataReader):
    def __init__(self, feeds: Iterable[dict[str, np.ndarray]]) -> None:
        self._feeds: Iterator[dict[str, np.ndarray]] = iter(feeds)

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._feeds, None)


def nodes_with_weight_dim(model: Path, *, op_types: Sequence[str], dim: int) -> list[str]:
    """Names of the ``op_types`` nodes with a constant input (a weight) that has a dimension of ``dim``.

    Exported graphs name their nodes by module scope only where modules are called directly (the
    ragged encoder calls its layers' methods, so its products are plain ``/MatMul_N``); the weight
    shapes tell the layers apart regardless.
    """
    graph = onnx.load(str(model)).graph
    shapes = {tensor.name: tuple(tensor.dims) for tensor in graph.initializer}
    shapes |= {
        node.output[0]: tuple(attribute.t.dims)
        for node in graph.node
        if node.op_type == "Constant"
        for attribute in node.attribute
        if attribute.name == "value"
    }
    return [
        node.name
        for node in graph.node
        if node.op_type in op_types and any(dim in shapes.get(name, ()) for name in node.input)
    ]


def quantize_int8_dynamic(
    source: Path, destination: Path, *, exclude: Sequence[str] = (), reduce_range: bool = False
) -> None:
    """Dynamic int8: per-channel int8 weights, activations quantized at run time.

    onnxruntime rewrites each Gemm as MatMul + Add (the MatMul named ``<gemm>_MatMul``) before it
    quantizes, so an excluded Gemm is excluded under both names.
    """
    exclude = [*exclude, *(f"{name}_MatMul" for name in exclude)]
    quantize_dynamic(
        str(source),
        str(destination),
        per_channel=True,
        reduce_range=reduce_range,
        weight_type=QuantType.QInt8,
        nodes_to_exclude=list(exclude),
    )


def quantize_int8_static(
    source: Path,
    destination: Path,
    *,
    calibration: Iterable[dict[str, np.ndarray]],
    op_types: Sequence[str] | None = None,
    exclude: Sequence[str] = (),
    method: CalibrationMethod = CalibrationMethod.MinMax,
    reduce_range: bool = False,
) -> None:
    """Static int8 in QDQ format: per-channel weights, activation ranges from ``calibration`` feeds."""
    with tempfile.TemporaryDirectory(prefix="quantize-") as folder:
        prepared = Path(folder) / "prepared.onnx"
        # Shape inference and graph cleanup first, as onnxruntime recommends before static quantization.
        quant_pre_process(str(source), str(prepared), skip_symbolic_shape=True)
        quantize_static(
            str(prepared),
            str(destination),
            _Feeds(calibration),
            quant_format=QuantFormat.QDQ,
            per_channel=True,
            reduce_range=reduce_range,
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8,
            op_types_to_quantize=list(op_types) if op_types else None,
            nodes_to_exclude=list(exclude),
            calibrate_method=method,
            extra_options={"CalibTensorRangeSymmetric": False},
        )


def convert_fp16(source: Path, destination: Path) -> None:
    """float16 weights and compute, float32 inputs and outputs (for a GPU execution provider)."""
    from onnxruntime.transformers.float16 import convert_float_to_float16

    model = onnx.load(str(source))
    converted = convert_float_to_float16(model, keep_io_types=True)
    onnx.save(converted, str(destination))
