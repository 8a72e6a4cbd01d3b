"""A file chosen for CUDA must run its compute on the GPU (export/precision/placement.py): the decision on
placement records, on the int8 graph's node types, and on the profile of a real onnxruntime run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper

from export.common import ExportError
from export.minilm.per_token_int8 import quantize_int8_per_token
from export.precision.onnx_variants import convert_fp16
from export.precision.placement import (
    NodePlacement,
    check_cuda_placement,
    placements_from_profile,
    predicted_placement,
    profiled_placement,
    require_cuda_placement,
)

CUDA, CPU = "CUDAExecutionProvider", "CPUExecutionProvider"


def _placed(*nodes: tuple[str, str, str]) -> list[NodePlacement]:
    return [NodePlacement(node=name, op_type=op, provider=provider) for name, op, provider in nodes]


# The compute on the GPU, the shape computations on the CPU: how onnxruntime places an fp16 encoder.
ON_THE_GPU = _placed(
    ("/attention/MatMul", "MatMul", CUDA),
    ("/attention/Softmax", "Softmax", CUDA),
    ("/norm/LayerNormalization", "LayerNormalization", CUDA),
    ("/act/Erf", "Erf", CUDA),
    ("/Shape", "Shape", CPU),
    ("/Gather_3", "Gather", CPU),
    ("/Concat", "Concat", CPU),
    ("MemcpyToHost", "MemcpyToHost", CUDA),
)


def test_shape_computations_on_the_cpu_pass_when_the_compute_runs_on_the_gpu() -> None:
    check_cuda_placement(ON_THE_GPU, what="onnx-fp16-cuda")


def test_a_compute_node_left_on_the_cpu_fails_the_variant_and_is_named() -> None:
    left = [
        ("/encoder/layer.0/output/LayerNorm", "LayerNormalization", CPU),
        ("/classifier/Gemm", "Gemm", CPU),
    ]
    record = ON_THE_GPU + _placed(*left)
    with pytest.raises(ExportError) as failed:
        check_cuda_placement(record, what="onnx-fp16-cuda")
    message = str(failed.value)
    assert message.startswith("onnx-fp16-cuda is chosen for CUDA, but 2 of its compute nodes run off the GPU")
    assert "/encoder/layer.0/output/LayerNorm (LayerNormalization on CPUExecutionProvider)" in message
    assert "1 Gemm, 1 LayerNormalization" in message and "/Shape" not in message


def test_an_empty_placement_record_is_not_a_pass() -> None:
    with pytest.raises(ExportError, match="no node placement was recorded"):
        check_cuda_placement([], what="onnx-fp32-cuda")


def test_the_int8_graphs_u8_by_s8_products_have_no_cuda_kernel(two_layer_onnx: Path, tmp_path: Path) -> None:
    int8 = tmp_path / "int8.onnx"
    rows = np.random.default_rng(0).normal(size=(8, 16)).astype(np.float32)
    quantize_int8_per_token(two_layer_onnx, int8, calibration=[{"X": rows}], smoothing=0.5)
    placed = predicted_placement(onnx.load(str(int8)))
    products = [p for p in placed if p.op_type == "MatMulInteger"]
    assert len(products) == 2 and {p.provider for p in products} == {CPU}
    with pytest.raises(ExportError, match=r"2 of its compute nodes run off the GPU \(2 MatMulInteger\)"):
        check_cuda_placement(placed, what="onnx-int8-per-token")


def test_an_int8_by_int8_product_and_the_fp16_graph_are_placed_on_the_gpu(
    two_layer_onnx: Path, tmp_path: Path
) -> None:
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["A", "B"], ["Y"], name="s8s8")],
        "s8",
        [
            helper.make_tensor_value_info("A", TensorProto.INT8, [2, 4]),
            helper.make_tensor_value_info("B", TensorProto.INT8, [4, 3]),
        ],
        [helper.make_tensor_value_info("Y", TensorProto.INT32, [2, 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    assert [p.provider for p in predicted_placement(model)] == [CUDA]
    convert_fp16(two_layer_onnx, tmp_path / "half.onnx")
    check_cuda_placement(predicted_placement(onnx.load(str(tmp_path / "half.onnx"))), what="onnx-fp16-cuda")


def test_the_placement_is_read_from_a_real_onnxruntime_profile(two_layer_onnx: Path) -> None:
    placed = profiled_placement(two_layer_onnx, {"X": np.ones((3, 16), np.float32)}, device="cpu")
    assert {p.provider for p in placed} == {CPU}
    assert {"FusedGemm", "MatMul"} <= {p.op_type for p in placed}  # Gemm+Relu fused, as onnxruntime runs it
    assert all(not p.node.endswith("_kernel_time") for p in placed)
    with pytest.raises(ExportError, match=r"compute nodes run off the GPU \(1 FusedGemm, 1 MatMul\)"):
        check_cuda_placement(placed, what="the CPU run")


def test_profile_events_other_than_node_kernels_are_ignored() -> None:
    events = [
        {"cat": "Session", "name": "model_run", "args": {}},
        {"cat": "Node", "name": "mm_kernel_time", "args": {"op_name": "MatMul", "provider": CUDA}},
        {"cat": "Node", "name": "mm_fence_before", "args": {"op_name": "MatMul"}},
        {"cat": "Node", "name": "mm_kernel_time", "args": {"op_name": "MatMul", "provider": CUDA}},
    ]
    assert placements_from_profile(events) == _placed(("mm", "MatMul", CUDA))


def test_without_a_cuda_provider_the_check_says_what_to_install(two_layer_onnx: Path) -> None:
    if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
        pytest.skip("this onnxruntime has the CUDA provider")
    with pytest.raises(ExportError, match="has no CUDA provider.*onnxruntime-gpu"):
        require_cuda_placement(two_layer_onnx, {"X": np.ones((1, 16), np.float32)}, what="onnx-fp16-cuda")
