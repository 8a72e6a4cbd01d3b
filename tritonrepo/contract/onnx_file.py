"""An ONNX file against its config, as the onnxruntime backend r24.10 checks it at load
(src/onnxruntime.cc ValidateInputs/ValidateOutputs, src/onnxruntime_utils.cc CompareDimsSupported), and
then run: at batch 1 and 2 where the config batches, since an exporter can declare the batch axis dynamic
while a node inside still holds the batch size it was traced with (pytorch #148886).

The graph's inputs are the config's inputs plus its batch inputs, one for one; each config input and
output is in the graph by name with the same datatype and, with the batch axis in front when
max_batch_size > 0, a shape whose fixed sizes the config states (an input's -1 in the file accepts any
size in the config; an output's sizes must be the config's exactly). A ragged input is one vector [-1].
onnxruntime is imported only here, when a file is checked; torch never.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from tritonclient.grpc.model_config_pb2 import BatchInput, ModelConfig

from tritonrepo.contract.config import type_name
from tritonrepo.contract.finding import Finding, dims_text, error
from tritonrepo.exported_runtime import BATCH_INPUT_KINDS, batch_input_values

# onnxruntime's element types -> Triton's (the onnxruntime backend's ModelConfigDataTypeToOnnxDataType).
_ONNX_TYPES = {
    "tensor(bool)": "TYPE_BOOL",
    "tensor(uint8)": "TYPE_UINT8",
    "tensor(uint16)": "TYPE_UINT16",
    "tensor(uint32)": "TYPE_UINT32",
    "tensor(uint64)": "TYPE_UINT64",
    "tensor(int8)": "TYPE_INT8",
    "tensor(int16)": "TYPE_INT16",
    "tensor(int32)": "TYPE_INT32",
    "tensor(int64)": "TYPE_INT64",
    "tensor(float16)": "TYPE_FP16",
    "tensor(float)": "TYPE_FP32",
    "tensor(double)": "TYPE_FP64",
    "tensor(string)": "TYPE_STRING",
    "tensor(bfloat16)": "TYPE_BF16",
}
_NUMPY_TYPES = {
    "TYPE_BOOL": np.bool_,
    "TYPE_UINT8": np.uint8,
    "TYPE_INT8": np.int8,
    "TYPE_INT16": np.int16,
    "TYPE_INT32": np.int32,
    "TYPE_INT64": np.int64,
    "TYPE_FP16": np.float16,
    "TYPE_FP32": np.float32,
    "TYPE_FP64": np.float64,
    "TYPE_STRING": np.object_,
}
# The length every variable axis gets in the batch run, and the batch sizes it runs.
_RUN_AXIS = 4
_RUN_BATCHES = (1, 2)


class _Graph:
    """A file's onnxruntime session and its inputs and outputs: name -> (Triton type, shape, -1 for a
    symbolic or unknown axis)."""

    def __init__(self, path: Path) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.log_severity_level = 4  # fatal only: a failing run is reported as a finding
        # Only the contract is checked: no graph rewrites or weight repacking to pay for at load.
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        options.add_session_config_entry("session.disable_prepacking", "1")
        options.enable_cpu_mem_arena = False
        self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self.run_options = ort.RunOptions()
        self.run_options.log_severity_level = 4
        self.inputs = {i.name: _tensor(i) for i in self.session.get_inputs()}
        self.outputs = {o.name: _tensor(o) for o in self.session.get_outputs()}


def triton_datatype(element_type: str) -> str:
    """onnxruntime's element type of a graph tensor ('tensor(float)') as Triton's datatype name in a
    request ('FP32', 'BYTES' for strings); an unknown type as it is."""
    name = _ONNX_TYPES.get(element_type, element_type).removeprefix("TYPE_")
    return "BYTES" if name == "STRING" else name


def _tensor(arg) -> tuple[str, list[int]]:
    return _ONNX_TYPES.get(arg.type, arg.type), [
        d if isinstance(d, int) and d >= 0 else -1 for d in arg.shape
    ]


def check_onnx(name: str, config: ModelConfig, path: Path) -> list[Finding]:
    """The findings of ``path`` against ``config`` (the model ``name``)."""
    try:
        graph = _Graph(path)
    except Exception as e:  # noqa: BLE001 - any load failure is the finding
        problem = f"{path.name} does not load in onnxruntime: {e}"
        return [error(name, "onnx-load", problem, "re-export the file")]
    found = _inputs(name, config, graph) + _outputs(name, config, graph)
    if not found and config.max_batch_size > 0:
        found = _batch_run(name, config, graph, path)
    return found


def _inputs(name: str, config: ModelConfig, graph: _Graph) -> list[Finding]:
    targets = {t: entry for entry in config.batch_input for t in entry.target_name}
    expected = [t.name for t in config.input] + list(targets)
    found = []
    if len(graph.inputs) != len(config.input) + len(config.batch_input):
        found.append(
            error(
                name,
                "onnx-inputs",
                f"the file takes {len(graph.inputs)} inputs {sorted(graph.inputs)}, the config gives "
                f"{len(expected)}: inputs and batch inputs {expected}",
                "declare one config input (or batch_input) per graph input, by the graph's names",
            )
        )
    for tensor in config.input:
        dims = list(tensor.reshape.shape) if tensor.HasField("reshape") else list(tensor.dims)
        found += _one(name, config, graph.inputs, "input", tensor.name, tensor.data_type, dims, tensor)
    for target, entry in targets.items():
        if target in graph.inputs and graph.inputs[target][0] != type_name(entry.data_type):
            found.append(_datatype(name, "batch input", target, entry.data_type, graph.inputs[target][0]))
    return found


def _outputs(name: str, config: ModelConfig, graph: _Graph) -> list[Finding]:
    found = []
    for tensor in config.output:
        dims = list(tensor.reshape.shape) if tensor.HasField("reshape") else list(tensor.dims)
        found += _one(name, config, graph.outputs, "output", tensor.name, tensor.data_type, dims, None)
    return found


def _one(name, config, tensors, kind, tensor, data_type, dims, config_input) -> list[Finding]:
    """One config tensor against the graph's ``tensors`` (server #998, #2644, #4194; #2387)."""
    if tensor not in tensors:
        return [
            error(
                name,
                f"onnx-{kind}-name",
                f"{kind} {tensor} is not in the file; its {kind}s are {sorted(tensors)}",
                f"name the config's {kind} as the graph does (or export the graph with this name)",
            )
        ]
    graph_type, shape = tensors[tensor]
    if graph_type != type_name(data_type):
        return [_datatype(name, kind, tensor, data_type, graph_type)]
    if config_input is not None and config_input.allow_ragged_batch:
        if shape == [-1]:
            return []
        return [
            error(
                name,
                "onnx-ragged-shape",
                f"ragged input {tensor} must be one vector of any length [-1] in the file, which has "
                f"{dims_text(shape)}",
                "export the input flat (all requests' items concatenated) with a dynamic axis",
            )
        ]
    return _shape(name, config.max_batch_size, kind, tensor, shape, dims)


def _datatype(name: str, kind: str, tensor: str, data_type: int, graph_type: str) -> Finding:
    return error(
        name,
        "onnx-datatype",
        f"{kind} {tensor} is {type_name(data_type)} in the config, {graph_type} in the file",
        f"set data_type: {graph_type} (or export the graph with {type_name(data_type)})",
    )


def _shape(name: str, max_batch_size: int, kind: str, tensor: str, shape: list[int], dims: list[int]):
    exact = kind == "output"
    if max_batch_size > 0:
        if not shape or shape[0] != -1:
            return [
                error(
                    name,
                    "onnx-batch-axis",
                    f"{kind} {tensor} has shape {dims_text(shape)} in the file: its first axis is not a "
                    f"dynamic batch axis, but max_batch_size is {max_batch_size}",
                    "export with the first axis dynamic (dynamic_axes / dynamic_shapes), or set "
                    "max_batch_size: 0 and give the full shape in dims",
                )
            ]
        full = [-1, *dims]
    else:
        full = dims
    if not shape and all(d == 1 for d in dims):
        return []  # a scalar in the file: the config may only say 1s
    fits = len(shape) == len(full) and all(
        (not exact and s == -1) or s == f for s, f in zip(shape, full, strict=True)
    )
    if fits:
        return []
    batch = " (the batch axis first, as max_batch_size > 0)" if max_batch_size > 0 else ""
    code = "onnx-rank" if len(shape) != len(full) else "onnx-dims"
    wanted = shape[1:] if max_batch_size > 0 else shape
    return [
        error(
            name,
            code,
            f"{kind} {tensor} is {dims_text(shape)} in the file, {dims_text(full)} in the config{batch}",
            f"set dims: {dims_text(wanted)}",
        )
    ]


def _batch_run(name: str, config: ModelConfig, graph: _Graph, path: Path) -> list[Finding]:
    """Run the file at batch 1 and 2 and check each declared output has the batch in front."""
    outputs = [t.name for t in config.output]
    kinds = [BatchInput.Kind.Name(entry.kind) for entry in config.batch_input]
    if not set(kinds) <= set(BATCH_INPUT_KINDS):
        return []  # a batch input this check cannot compute: the file is not run
    for batch in _RUN_BATCHES:
        try:
            results = graph.session.run(outputs, batch_feeds(config, batch), graph.run_options)
        except Exception as e:  # noqa: BLE001 - the failure is the finding
            return [_fixed_batch(name, path, batch, f"it fails: {str(e).splitlines()[0][:300]}")]
        wrong = {
            o: r.shape for o, r in zip(outputs, results, strict=True) if not r.shape or r.shape[0] != batch
        }
        if wrong:
            return [_fixed_batch(name, path, batch, f"outputs come back with shapes {wrong}")]
    return []


def _fixed_batch(name: str, path: Path, batch: int, what: str) -> Finding:
    return error(
        name,
        "onnx-batch-run",
        f"{path.name} declares a dynamic batch axis, but run at batch {batch} {what} (pytorch #148886: "
        "a size traced into the graph)",
        "export with a batch of 2 or more and the batch axis dynamic, then check the file at batch 1 and 2",
    )


def batch_feeds(config: ModelConfig, batch: int) -> dict[str, np.ndarray]:
    """Zeros for every input as Triton would hand ``batch`` one-item requests to the file: -1 axes of
    length 4, a ragged input concatenated, each batch input computed from its source."""
    feeds: dict[str, np.ndarray] = {}
    shapes: dict[str, list[tuple[int, ...]]] = {}
    for tensor in config.input:
        dims = list(tensor.reshape.shape) if tensor.HasField("reshape") else list(tensor.dims)
        item = tuple(_RUN_AXIS if d == -1 else int(d) for d in dims)
        dtype = _NUMPY_TYPES[type_name(tensor.data_type)]
        shape = (batch * int(np.prod(item)),) if tensor.allow_ragged_batch else (batch, *item)
        feeds[tensor.name] = np.full(shape, b"" if dtype is np.object_ else 0, dtype=dtype)
        shapes[tensor.name] = [(1, *item)] * batch
    for entry in config.batch_input:
        kind = BatchInput.Kind.Name(entry.kind)
        dtype = _NUMPY_TYPES[type_name(entry.data_type)]
        for target in entry.target_name:
            feeds[target] = batch_input_values(kind, shapes[entry.source_input[0]], dtype)
    return feeds
