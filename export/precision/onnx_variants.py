"""Reduced-precision rewrites of an exported float32 ONNX file, with onnxruntime's own tools.

- int8, static QDQ: weights per channel, activations with ranges calibrated on real inputs (the caller
  passes them), written as QuantizeLinear/DequantizeLinear pairs that onnxruntime fuses into int8 kernels.
- fp16: every float initializer and op in float16, graph inputs and outputs kept as they were (for GPUs).

The text encoder's int8 is export/minilm/per_token_int8.py (activation ranges per token, not per batch).
:func:`onnx_file_variants` lists an ONNX file's variants for every kind that serves one.
None of these checks accuracy: every result goes through a gate (export/precision/gates.py) before it may be
served. On CPUs without VNNI, u8 x s8 products can saturate in AVX2 kernels, so ``reduce_range`` (7-bit
weights) is used there, as onnxruntime's documentation advises.
"""

from __future__ import annotations

import functools
import logging
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

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

from export.precision.cuda_runtime import serving_mode
from export.precision.device import Capabilities
from export.precision.placement import require_cuda_placement
from export.precision.selection import Runner, Variant

logger = logging.getLogger(__name__)

# (file, device, CUDA provider options) -> a runner on that file in an onnxruntime session
OnnxRunner = Callable[[Path, str, Mapping[str, str] | None], Runner]


class Int8Writer(Protocol):
    def __call__(self, source: Path, destination: Path, *, reduce_range: bool) -> object:
        """Write the int8 rewrite of the float32 graph ``source`` to ``destination``."""


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


def onnx_file_variants(
    *,
    fp32: Callable[[Path], Runner],
    run: OnnxRunner,
    feed: Callable[[Any], dict[str, np.ndarray]],
    placement_feed: Callable[[], dict[str, np.ndarray]],
    capabilities: Capabilities,
    cuda_options: Mapping[str, str],
    fp32_onnx_file: Callable[[], Path] | None = None,
    int8: tuple[str, Int8Writer] | None = None,
) -> list[Variant]:
    """An ONNX file's variants: float32 and int8 for a CPU; float32 and fp16 for CUDA, each in sessions
    with ``cuda_options``, the CUDA provider options its config serves. The float32 one is ``tf32`` or
    ``fp32`` by the ``use_tf32`` those options serve on this GPU (export/precision/cuda_runtime.py): the
    config decides, the export gates what it will serve.

    ``fp32(path)`` writes and verifies the float32 file; ``fp32_onnx_file()`` is the float32 graph the
    int8 and fp16 files are rewritten from; ``int8``: the int8 variant's name and its writer, called as
    ``write(source, destination, reduce_range=...)``; ``feed(batch)`` turns a runner's input into
    onnxruntime's feed; ``placement_feed()`` is the input each CUDA file is placed on the GPU with.
    Without ``fp32_onnx_file`` or ``int8``: the float32 variants alone."""
    options = dict(cuda_options)
    mode = serving_mode("onnx", options, tf32_cores=capabilities.tf32_cores)
    float32 = "tf32" if mode.matmul else "fp32"

    def on_cuda(path: Path, what: str) -> Runner:
        require_cuda_placement(path, placement_feed(), what=what, cuda_options=options)
        return run(path, "cuda", options)

    def float32_on_cuda(path: Path) -> Runner:
        fp32(path)
        return on_cuda(path, f"onnx-{float32}-cuda")

    # Each CUDA file runs in sessions with the config's options and TF32 mode, as it is served.
    cuda = functools.partial(Variant, device="cuda", feed=feed, cuda_options=options, tf32=mode)

    cpu_fp32 = Variant(name="onnx-fp32", precision="fp32", device="cpu", build=fp32, feed=feed)
    cuda_float32 = cuda(name=f"onnx-{float32}-cuda", precision=float32, build=float32_on_cuda)
    if fp32_onnx_file is None or int8 is None:
        return [cpu_fp32, cuda_float32]
    source, (int8_name, write_int8) = fp32_onnx_file, int8

    def int8_file(path: Path) -> Runner:
        write_int8(source(), path, reduce_range=not capabilities.cpu_vnni)
        return run(path, "cpu", None)

    def fp16(path: Path) -> Runner:
        convert_fp16(source(), path)
        return on_cuda(path, "onnx-fp16-cuda")

    return [
        cpu_fp32,
        Variant(name=int8_name, precision="int8", device="cpu", build=int8_file, feed=feed),
        cuda_float32,
        cuda(name="onnx-fp16-cuda", precision="fp16", build=fp16),
    ]
