"""Reduced-precision rewrites of an exported float32 ONNX file, with onnxruntime's own tools.

- int8, static QDQ: weights per channel, activations with ranges calibrated on real inputs (the caller
  passes them), written as QuantizeLinear/DequantizeLinear pairs that onnxruntime fuses into int8 kernels.
- fp16: every float initializer and op in float16, graph inputs and outputs kept as they were (for GPUs).

The text encoder's int8 is export/per_token_int8.py (activation ranges per token, not per batch).
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
    quantize_static,
)
from onnxruntime.quantization.shape_inference import quant_pre_process

logger = logging.getLogger(__name__)


class _Feeds(CalibrationDataReader):
    def __init__(self, feeds: Iterable[dict[str, np.ndarray]]) -> None:
        self._feeds: Iterator[dict[str, np.ndarray]] = iter(feeds)

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._feeds, None)


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
