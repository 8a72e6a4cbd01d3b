"""Where onnxruntime runs each node of a file chosen for CUDA: the compute must run on the GPU.

A node without a CUDA kernel for its types does not stop an onnxruntime session on the CUDA provider: it
runs on the CPU, with copies each way, and the only sign is onnxruntime's "some nodes were not assigned"
warning. So an ONNX variant chosen for CUDA is run once under onnxruntime's profiler at export
(:func:`profiled_placement`: the provider of every node that ran) and fails, with the nodes named, when a
compute node (:data:`COMPUTE_OPS`: products, convolutions, attention, normalisation, activations) ran
elsewhere (:func:`require_cuda_placement`). Small shape computations (Shape, Gather, Concat, ...) that
onnxruntime places on the CPU by design are fine.

:func:`predicted_placement` is the same decision read from a graph alone, for the kernels onnxruntime's
CUDA provider is known not to have (:data:`NO_CUDA_KERNEL`; ``MatMulInteger`` only for int8 x int8): the
int8 text graph's u8 x s8 products are why int8 is never offered for a GPU.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
from onnx import TensorProto

from export.common import ExportError
from export.precision import onnx_graph

GPU_PROVIDERS = frozenset({"CUDAExecutionProvider", "TensorrtExecutionProvider"})
COMPUTE_OPS = frozenset(
    {
        # products and convolutions (plain, fused by onnxruntime, integer)
        *("MatMul", "Gemm", "FusedMatMul", "FusedGemm", "MatMulInteger", "MatMulIntegerToFloat"),
        *("DynamicQuantizeMatMul", "QLinearMatMul", "Conv", "FusedConv", "ConvTranspose", "ConvInteger"),
        *("QLinearConv", "Einsum"),
        # attention
        *("Attention", "MultiHeadAttention", "GroupQueryAttention", "Softmax", "BiasSoftmax"),
        # normalisation
        *("LayerNormalization", "SkipLayerNormalization", "SimplifiedLayerNormalization"),
        *("SkipSimplifiedLayerNormalization", "EmbedLayerNormalization", "BatchNormalization"),
        *("InstanceNormalization", "GroupNormalization"),
        # activations
        *("Relu", "Gelu", "FastGelu", "BiasGelu", "QuickGelu", "Erf", "Sigmoid", "HardSigmoid", "Tanh"),
        *("HardSwish", "Swish", "Mish", "LeakyRelu", "Elu", "Selu", "Clip"),
    }
)
NO_CUDA_KERNEL = frozenset(
    {"ConvInteger", "DynamicQuantizeLinear", "DynamicQuantizeMatMul", "MatMulIntegerToFloat"}
)
NAMED_AT_MOST = 8


@dataclass(frozen=True, kw_only=True)
class NodePlacement:
    """One node of a graph and the execution provider that runs it."""

    node: str
    op_type: str
    provider: str


def off_gpu_compute(placements: Iterable[NodePlacement]) -> list[NodePlacement]:
    """The compute nodes that a GPU provider does not run."""
    return [p for p in placements if p.op_type in COMPUTE_OPS and p.provider not in GPU_PROVIDERS]


def check_cuda_placement(placements: Iterable[NodePlacement], *, what: str) -> None:
    """Raise ExportError naming the compute nodes of ``what`` that do not run on the GPU."""
    placed = list(placements)
    if not placed:
        raise ExportError(f"{what}: no node placement was recorded, so its CUDA placement cannot be checked")
    off = off_gpu_compute(placed)
    if not off:
        return
    by_op: dict[str, int] = {}
    for p in off:
        by_op[p.op_type] = by_op.get(p.op_type, 0) + 1
    counts = ", ".join(f"{count} {op}" for op, count in sorted(by_op.items()))
    named = ", ".join(f"{p.node} ({p.op_type} on {p.provider})" for p in off[:NAMED_AT_MOST])
    more = f" and {len(off) - NAMED_AT_MOST} more" if len(off) > NAMED_AT_MOST else ""
    raise ExportError(
        f"{what} is chosen for CUDA, but {len(off)} of its compute nodes run off the GPU ({counts}): "
        f"{named}{more}. onnxruntime's CUDA provider has no kernel for them; this variant is not served."
    )


def profiled_placement(
    model: Path | bytes,
    feed: dict[str, np.ndarray],
    *,
    device: str,
    cuda_options: Mapping[str, str] | None = None,
) -> list[NodePlacement]:
    """Run ``model`` once on ``feed`` under onnxruntime's profiler (the CUDA provider with
    ``cuda_options``, the CPU beside it); every node that ran, with its provider."""
    providers = onnx_graph.providers(device, cuda_options)
    if device == "cuda":
        providers.append("CPUExecutionProvider")  # what a node without a CUDA kernel falls back to
    if device == "cuda" and "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
        raise ExportError(
            f"onnxruntime {onnxruntime.__version__} here has no CUDA provider, so a file for CUDA cannot be "
            "placed and gated on the GPU; install the onnxruntime-gpu build of the serving version"
        )
    with tempfile.TemporaryDirectory(prefix="placement-") as folder:
        options = onnxruntime.SessionOptions()
        options.log_severity_level = 3
        options.enable_profiling = True
        options.profile_file_prefix = str(Path(folder) / "profile")
        source = model if isinstance(model, bytes) else str(model)
        session = onnxruntime.InferenceSession(source, options, providers=providers)
        session.run(None, feed)
        events = json.loads(Path(session.end_profiling()).read_text(encoding="utf-8"))
    return placements_from_profile(events)


def placements_from_profile(events: list[dict]) -> list[NodePlacement]:
    """The node placements in onnxruntime's profile (its "Node" events' op_name and provider), once each."""
    seen: dict[str, NodePlacement] = {}
    for event in events:
        args = event.get("args") or {}
        if event.get("cat") != "Node" or "provider" not in args or "op_name" not in args:
            continue
        node = str(event.get("name", "")).removesuffix("_kernel_time")
        seen.setdefault(node, NodePlacement(node=node, op_type=args["op_name"], provider=args["provider"]))
    return list(seen.values())


def require_cuda_placement(
    model: Path | bytes,
    feed: dict[str, np.ndarray],
    *,
    what: str,
    cuda_options: Mapping[str, str] | None = None,
) -> None:
    """Run ``model`` on the CUDA provider (with ``cuda_options``) once and fail unless its compute nodes
    ran on the GPU."""
    placements = profiled_placement(model, feed, device="cuda", cuda_options=cuda_options)
    check_cuda_placement(placements, what=what)


def predicted_placement(model: onnx.ModelProto) -> list[NodePlacement]:
    """Each node of ``model`` on the CUDA provider, except where that provider has no kernel for it: the
    ops of :data:`NO_CUDA_KERNEL`, and a ``MatMulInteger`` whose inputs are not both int8."""
    types = _element_types(model)
    placements = []
    for node in model.graph.node:
        cpu = node.op_type in NO_CUDA_KERNEL or (
            node.op_type == "MatMulInteger"
            and any(types.get(name) != TensorProto.INT8 for name in node.input[:2])
        )
        provider = "CPUExecutionProvider" if cpu else "CUDAExecutionProvider"
        placements.append(NodePlacement(node=node.name, op_type=node.op_type, provider=provider))
    return placements


def _element_types(model: onnx.ModelProto) -> dict[str, int]:
    inferred = onnx.shape_inference.infer_shapes(model)
    graph = inferred.graph
    types = {t.name: t.data_type for t in graph.initializer}
    for info in (*graph.input, *graph.value_info, *graph.output):
        types.setdefault(info.name, info.type.tensor_type.elem_type)
    return types
