"""Tools on ONNX graphs shared by the exporters: onnxruntime sessions on a device, reading the values of
intermediate tensors, and folding a ``Pad`` into the convolution it feeds."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

import numpy as np
import onnx
import onnxruntime

# The intra-op threads of the sessions opened now (None: onnxruntime's default, every core), set while the
# export builds, gates and times a served file at its server's thread count (export/precision/timing.py).
_INTRA_OP_THREADS: ContextVar[int | None] = ContextVar("intra_op_threads", default=None)


@contextmanager
def intra_op_threads(threads: int) -> Iterator[None]:
    """Every session opened inside gets ``threads`` intra-op threads and one inter-op thread."""
    token = _INTRA_OP_THREADS.set(threads)
    try:
        yield
    finally:
        _INTRA_OP_THREADS.reset(token)


def providers(device: str, cuda_options: Mapping[str, str] | None = None) -> list:
    """onnxruntime's providers for ``device`` ("cpu", or "cuda" with the CUDA provider's options)."""
    if device == "cpu":
        return ["CPUExecutionProvider"]
    return [("CUDAExecutionProvider", dict(cuda_options or {}))]


def session(
    model: Path | str | bytes, device: str = "cpu", cuda_options: Mapping[str, str] | None = None
) -> onnxruntime.InferenceSession:
    """An onnxruntime session on ``device`` ("cpu" or "cuda", with ``cuda_options`` for the CUDA
    provider) for a file or a serialized model, warnings silenced, with the threads of
    :func:`intra_op_threads` when it is in force."""
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    threads = _INTRA_OP_THREADS.get()
    if threads is not None:
        options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    source = model if isinstance(model, bytes) else str(model)
    return onnxruntime.InferenceSession(source, options, providers=providers(device, cuda_options))


def probe_session(model: onnx.ModelProto, tensors: Sequence[str]) -> onnxruntime.InferenceSession:
    """A CPU session on a copy of ``model`` that also outputs the named intermediate tensors."""
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    probe.graph.output.extend(onnx.helper.make_empty_tensor_value_info(name) for name in tensors)
    return session(probe.SerializeToString())


def fold_pads_into_convs(model: onnx.ModelProto, feed: dict[str, np.ndarray]) -> int:
    """Fold each zero ``Pad`` that feeds only a ``Conv`` into the convolution's own (asymmetric) ``pads``,
    in place; the number folded.

    TensorFlow's "SAME" padding pads a stride-2 convolution on the bottom and right only, which a PyTorch
    convolution cannot express, so the model pads first (``F.pad``). Exported, that is a ``Pad`` whose pad
    list is computed at run time, and onnxruntime keeps it: each one copies a whole activation and, on
    CPUs, forces a layout change out of and back into onnxruntime's blocked format around it. ONNX's
    ``Conv`` takes asymmetric pads, so the same arithmetic needs no copy, with the same logits to the bit
    and a faster file (docs/measurements.md). The pad lists
    are read by running the graph once on ``feed``; the nodes only they used are removed.
    """
    graph = model.graph
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    pads = [
        node
        for node in graph.node
        if node.op_type == "Pad"
        and _pad_mode(node) == b"constant"
        and len(node.input) < 4  # no ``axes`` input (opset 18): the pad list covers every axis
        and [reader.op_type for reader in readers.get(node.output[0], [])] == ["Conv"]
        and not any(
            a.name == "auto_pad" and a.s not in (b"", b"NOTSET") for a in readers[node.output[0]][0].attribute
        )
    ]
    if not pads:
        return 0
    wanted = [name for node in pads for name in node.input[1:3] if name]
    values = dict(zip(wanted, probe_session(model, wanted).run(wanted, feed), strict=True))
    folded = 0
    for node in pads:
        amounts = values[node.input[1]].astype(np.int64)
        fill = values[node.input[2]] if len(node.input) > 2 and node.input[2] else np.zeros(1)
        rank = len(amounts) // 2
        if (
            rank != 4
            or amounts[:2].any()
            or amounts[rank : rank + 2].any()
            or (amounts < 0).any()
            or fill.any()
        ):
            continue  # pads the batch or channel axis, crops, or pads with a non-zero value
        conv = readers[node.output[0]][0]
        attribute = next((a for a in conv.attribute if a.name == "pads"), None)
        before = list(onnx.helper.get_attribute_value(attribute)) if attribute is not None else [0, 0, 0, 0]
        if attribute is not None:
            conv.attribute.remove(attribute)
        added = [*amounts[2:rank], *amounts[rank + 2 :]]  # [top, left, bottom, right]
        conv.attribute.append(
            onnx.helper.make_attribute("pads", [int(a + b) for a, b in zip(before, added, strict=True)])
        )
        conv.input[0] = node.input[0]
        graph.node.remove(node)
        folded += 1
    _remove_unused(graph)
    return folded


def _pad_mode(node: onnx.NodeProto) -> bytes:
    attribute = next((a for a in node.attribute if a.name == "mode"), None)
    return b"constant" if attribute is None else onnx.helper.get_attribute_value(attribute)


def _remove_unused(graph: onnx.GraphProto) -> None:
    """Drop the nodes and initializers that no graph output depends on any more."""
    needed = {output.name for output in graph.output}
    kept = []
    for node in reversed(graph.node):
        if any(name in needed for name in node.output):
            kept.append(node)
            needed.update(name for name in node.input if name)
    del graph.node[:]
    graph.node.extend(reversed(kept))
    initializers = [tensor for tensor in graph.initializer if tensor.name in needed]
    del graph.initializer[:]
    graph.initializer.extend(initializers)
