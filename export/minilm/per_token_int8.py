"""int8 matrix products whose answer for a row does not depend on the other rows of its batch.

onnxruntime's dynamic quantization takes one activation range per tensor, at run time: in a ragged
batch, every token of every request shares it, so a sentence's embedding changes with its neighbours
(docs/measurements.md). Served behind
a dynamic batcher, that makes an answer depend on the traffic around it. Static quantization fixes
the ranges ahead of time, and loses too much on this encoder's activations.

This rewrite quantizes each row (token) on its own:

- weights: int8, symmetric, one scale per output channel, computed once (7-bit with ``reduce_range``,
  for CPUs without VNNI, whose u8 x s8 kernels add pairs of products in 16 bits and can saturate);
- activations: uint8, asymmetric, one scale and zero point per row, computed at run time from that row
  alone (``QuantizeLinear`` with ``axis=0``), so a row quantizes the same in any batch;
- products: ``MatMulInteger`` (u8 x s8, VNNI kernels where the CPU has them), then float:
  ``y = s_row * s_col * (q @ w) - (s_row * z_row) * colsum(w) * s_col + bias``;
- smoothing (as SmoothQuant): a transformer's activations carry a few channels with large values, which
  would spend a row's 256 levels on them. Each input channel ``j`` is divided by
  ``m_j = max|x_j|^alpha / max|w_j|^(1 - alpha)`` and the weights multiplied by it (the product is
  unchanged), with ``max|x_j|`` measured on calibration inputs; ``m_j`` is at least 1, so a channel
  quiet in calibration is never amplified. ``alpha = 0`` smooths nothing.

Every Gemm with a constant weight, and every MatMul of rows by one, is rewritten; an input shared by
several (query, key and value read one tensor) is quantized once. The rewrite checks nothing about
accuracy: the result goes through a gate (export/precision/gates.py) like every variant.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from export.precision.onnx_graph import probe_session

Feed = dict[str, np.ndarray]


def _attribute(node: onnx.NodeProto, name: str, default: float | int) -> float | int:
    for attribute in node.attribute:
        if attribute.name == name:
            return helper.get_attribute_value(attribute)
    return default


def _ranks(model: onnx.ModelProto) -> dict[str, int]:
    inferred = onnx.shape_inference.infer_shapes(model)
    values = [*inferred.graph.value_info, *inferred.graph.input]
    return {v.name: len(v.type.tensor_type.shape.dim) for v in values if v.type.tensor_type.HasField("shape")}


def _weight(
    node: onnx.NodeProto, initializers: dict[str, onnx.TensorProto], ranks: dict[str, int]
) -> np.ndarray | None:
    """The constant weight of a Gemm, or of a MatMul on rows ([T, K] input), as [N, K]; else None."""
    if len(node.input) < 2 or node.input[1] not in initializers:
        return None
    weight = numpy_helper.to_array(initializers[node.input[1]]).astype(np.float32)
    if node.op_type == "MatMul":
        return weight.T if weight.ndim == 2 and ranks.get(node.input[0]) == 2 else None
    if node.op_type != "Gemm" or _attribute(node, "transA", 0):
        return None
    if _attribute(node, "alpha", 1.0) != 1.0 or _attribute(node, "beta", 1.0) != 1.0:
        return None
    return weight if _attribute(node, "transB", 0) else weight.T


def activation_maxima(model: onnx.ModelProto, tensors: Sequence[str], calibration: Sequence[Feed]) -> dict:
    """Per channel (last axis), the largest absolute value of each named tensor over the calibration feeds."""
    session = probe_session(model, tensors)
    maxima: dict[str, np.ndarray] = {}
    for feed in calibration:
        for name, value in zip(tensors, session.run(list(tensors), feed), strict=True):
            channel_max = np.abs(value).reshape(-1, value.shape[-1]).max(axis=0)
            maxima[name] = np.maximum(maxima[name], channel_max) if name in maxima else channel_max
    return maxima


class _Builder:
    """Appends nodes and constants under unique names."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.constants: list[onnx.TensorProto] = []

    def constant(self, name: str, value: np.ndarray) -> str:
        self.constants.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def op(self, op_type: str, inputs: Sequence[str], output: str, **attributes: Any) -> str:
        self.nodes.append(helper.make_node(op_type, list(inputs), [output], name=output, **attributes))
        return output


def quantize_int8_per_token(
    source: Path,
    destination: Path,
    *,
    calibration: Sequence[Feed],
    smoothing: float,
    reduce_range: bool = False,
) -> int:
    """Rewrite every product with a constant weight of ``source`` as described above; the number rewritten."""
    model = onnx.load(str(source))
    rewritten = rewrite(model, calibration=calibration, smoothing=smoothing, reduce_range=reduce_range)
    onnx.save(model, str(destination))
    return rewritten


def rewrite(
    model: onnx.ModelProto, *, calibration: Sequence[Feed], smoothing: float, reduce_range: bool = False
) -> int:
    """:func:`quantize_int8_per_token` on a loaded model, in place."""
    if not 0.0 <= smoothing <= 1.0:
        raise ValueError(f"smoothing must be in [0, 1], got {smoothing}")
    graph = model.graph
    initializers = {tensor.name: tensor for tensor in graph.initializer}
    nodes = list(graph.node)
    ranks = _ranks(model)
    weights = {i: w for i, node in enumerate(nodes) if (w := _weight(node, initializers, ranks)) is not None}
    if not weights:
        raise ValueError("no Gemm or MatMul with a constant weight to quantize")
    divisors = (
        _smoothing_divisors(
            model, {nodes[i].input[0]: [] for i in weights}, weights, nodes, calibration, smoothing
        )
        if smoothing > 0.0
        else {}
    )
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    build = _Builder()
    rows = _RowQuantizer(build, opset, divisors)
    for index, node in enumerate(nodes):
        if index in weights:
            _quantized_product(build, rows, node, weights[index], divisors, 63.0 if reduce_range else 127.0)
        else:
            build.nodes.append(node)
    used = {name for node in build.nodes for name in node.input}
    kept = [tensor for tensor in graph.initializer if tensor.name in used]
    del graph.node[:]
    graph.node.extend(build.nodes)
    del graph.initializer[:]
    graph.initializer.extend([*kept, *build.constants])
    return len(weights)


def _smoothing_divisors(
    model: onnx.ModelProto,
    readers: dict[str, list[np.ndarray]],
    weights: dict[int, np.ndarray],
    nodes: list[onnx.NodeProto],
    calibration: Sequence[Feed],
    smoothing: float,
) -> dict[str, np.ndarray]:
    """Per input channel of each quantized activation: the divisor that moves its range into the weights."""
    for i, weight in weights.items():
        readers[nodes[i].input[0]].append(weight)
    maxima = activation_maxima(model, list(readers), calibration)
    divisors = {}
    for name, read_by in readers.items():
        weight_max = np.max([np.abs(w).max(axis=0) for w in read_by], axis=0)
        divisor = np.power(np.maximum(maxima[name], 1e-5), smoothing) / np.power(
            np.maximum(weight_max, 1e-5), 1.0 - smoothing
        )
        # Never amplify a channel: one quiet in calibration may be loud in service.
        divisors[name] = np.maximum(divisor, 1.0).astype(np.float32)
    return divisors


class _RowQuantizer:
    """Quantizes an activation's rows once, however many products read it."""

    def __init__(self, build: _Builder, opset: int, divisors: dict[str, np.ndarray]) -> None:
        self.build, self.opset, self.divisors = build, opset, divisors
        self.axis = build.constant("int8pt/axis1", np.array([1], np.int64))
        self.zero = build.constant("int8pt/zero", np.array(0.0, np.float32))
        self.tiny = build.constant("int8pt/tiny", np.array(1e-8, np.float32))
        self.levels = build.constant("int8pt/levels", np.array(255.0, np.float32))
        self.quantized: dict[str, tuple[str, str, str]] = {}

    def _reduce(self, op_type: str, x: str, output: str) -> str:
        """Per row, over the last axis (``axes`` became an input in opset 18)."""
        if self.opset >= 18:
            return self.build.op(op_type, [x, self.axis], output, keepdims=0)
        return self.build.op(op_type, [x], output, axes=[1], keepdims=0)

    def __call__(self, name: str) -> tuple[str, str, str]:
        """(uint8 rows, row scale [T, 1], row scale x zero point [T, 1]) of a float [T, K] tensor."""
        if name in self.quantized:
            return self.quantized[name]
        build, p, x = self.build, f"int8pt/{len(self.quantized)}/", name
        if name in self.divisors:
            x = build.op(
                "Mul", [name, build.constant(p + "smooth", 1.0 / self.divisors[name])], p + "smoothed"
            )
        low = build.op("Min", [self._reduce("ReduceMin", x, p + "min"), self.zero], p + "low")
        high = build.op("Max", [self._reduce("ReduceMax", x, p + "max"), self.zero], p + "high")
        span = build.op("Max", [build.op("Sub", [high, low], p + "span"), self.tiny], p + "span_safe")
        scale = build.op("Div", [span, self.levels], p + "scale")
        zero_point = build.op(
            "Round", [build.op("Neg", [build.op("Div", [low, scale], p + "z")], p + "nz")], p + "zr"
        )
        zero_u8 = build.op("Cast", [zero_point], p + "zero_point", to=TensorProto.UINT8)
        rows = build.op("QuantizeLinear", [x, scale, zero_u8], p + "rows", axis=0)
        scale_col = build.op("Unsqueeze", [scale, self.axis], p + "scale_col")
        offset = build.op("Mul", [scale, zero_point], p + "offset")
        offset_col = build.op("Unsqueeze", [offset, self.axis], p + "offset_col")
        self.quantized[name] = (rows, scale_col, offset_col)
        return self.quantized[name]


def _quantized_product(
    build: _Builder,
    quantize_rows: _RowQuantizer,
    node: onnx.NodeProto,
    weight: np.ndarray,
    divisors: dict[str, np.ndarray],
    weight_levels: float,
) -> None:
    """``node`` (x @ W [+ b]) as an int8 product of x's quantized rows and W's quantized columns."""
    p = f"int8pt/{node.name or node.output[0]}/"
    if node.input[0] in divisors:
        weight = weight * divisors[node.input[0]][None, :]
    column_scale = (np.maximum(np.abs(weight).max(axis=1), 1e-12) / weight_levels).astype(np.float32)
    weight_q = np.clip(np.round(weight / column_scale[:, None]), -weight_levels, weight_levels).astype(
        np.int8
    )
    rows, scale_col, offset_col = quantize_rows(node.input[0])
    product = build.op("MatMulInteger", [rows, build.constant(p + "w", weight_q.T.copy())], p + "int")
    product = build.op("Cast", [product], p + "float", to=TensorProto.FLOAT)
    product = build.op("Mul", [product, scale_col], p + "row_scaled")
    product = build.op("Mul", [product, build.constant(p + "col_scale", column_scale)], p + "scaled")
    column_sums = (weight_q.astype(np.float32).sum(axis=1) * column_scale)[None, :]
    correction = build.op("Mul", [offset_col, build.constant(p + "colsum", column_sums)], p + "correction")
    output = node.output[0]
    if len(node.input) > 2 and node.input[2]:
        product = build.op("Sub", [product, correction], p + "unbiased")
        build.nodes.append(helper.make_node("Add", [product, node.input[2]], [output], name=p + "bias"))
    else:
        build.nodes.append(helper.make_node("Sub", [product, correction], [output], name=p + "out"))
