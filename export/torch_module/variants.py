"""A ``torch_module``'s served files: TorchScript and ONNX from the user's module, and their precisions.

The user's module is served through :class:`Served`: the declared inputs in the declared order as
``forward``'s arguments, a tuple of the declared outputs back, each cast to its declared datatype, the
compute optionally in a reduced floating-point type (integer inputs such as categorical ids stay as they
are). TorchScript is traced by default (``torch.jit.trace``, then frozen); ``script: true`` scripts the
user's module first (``torch.jit.script`` keeps its control flow) and traces only the thin wrapper.
ONNX is opset 17 from the TorchScript-based exporter (``dynamo=False``), the batch axis and every
declared variable axis dynamic. Runners take and return tuples of numpy arrays in declared order.

Variants, each gated on the device that serves it (export/precision/selection.py decides what this machine
offers): TorchScript fp32 and bf16 on a CPU (bf16 where it has bf16 instructions), float32, bf16 and fp16 on
CUDA (with libtorch's TF32 convolutions); ONNX fp32 on a CPU and float32 on CUDA, TF32 or strict by its
config's use_tf32 (export/precision/cuda_runtime.py; the placement checked: export/precision/placement.py).
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import torch
from torch import nn

from description.module_spec import ModuleSpec
from export.common import ExportError
from export.precision import onnx_graph
from export.precision.device import Capabilities
from export.precision.onnx_variants import onnx_file_variants
from export.precision.selection import Runner, Variant
from export.precision.torchscript_variants import torchscript_file_variants
from export.torch_module.checks import Batch, torch_dtype

ONNX_OPSET = 17  # read by the onnxruntime 1.19.2 of NVIDIA's Triton container (it reads up to 21)


class Served(nn.Module):
    """``model`` as served: positional inputs in, a tuple of outputs in their declared datatypes out."""

    def __init__(
        self, model: nn.Module, output_dtypes: tuple[torch.dtype, ...], compute: torch.dtype | None
    ) -> None:
        super().__init__()
        self.model, self.output_dtypes, self.compute = model, output_dtypes, compute

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if self.compute is not None:
            inputs = tuple(x.to(self.compute) if x.is_floating_point() else x for x in inputs)
        result = self.model(*inputs)
        outputs = (result,) if isinstance(result, torch.Tensor) else tuple(result)
        return tuple(out.to(dtype) for out, dtype in zip(outputs, self.output_dtypes, strict=True))


def served_module(model: nn.Module, spec: ModuleSpec, *, dtype: torch.dtype, device: str) -> Served:
    """A copy of ``model`` on ``device`` computing in ``dtype``, scripted when the description asks."""
    converted = copy.deepcopy(model).eval().to(device=device)
    if dtype != torch.float32:
        converted = converted.to(dtype=dtype)
    if spec.script:
        converted = torch.jit.script(converted)
    output_dtypes = tuple(torch_dtype(decl.datatype) for decl in spec.outputs)
    return Served(converted, output_dtypes, None if dtype == torch.float32 else dtype).eval()


def trace(
    model: nn.Module, spec: ModuleSpec, example: Batch, *, dtype: torch.dtype, device: str, check: bool = True
) -> torch.jit.ScriptModule:
    """The traced (not yet frozen) served module; TracerWarnings are raised as errors by the caller.

    ``check``: torch's own trace check (it re-traces and re-runs the module on the example, and warns
    when the two disagree)."""
    served = served_module(model, spec, dtype=dtype, device=device)
    inputs = tuple(torch.from_numpy(array).to(device) for array in example)
    with torch.no_grad():
        return torch.jit.trace(served, inputs, check_trace=check)


def quiet_trace(
    model: nn.Module, spec: ModuleSpec, example: Batch, *, dtype: torch.dtype, device: str
) -> Any:
    """:func:`trace` with the tracer's warnings silenced and without torch's trace check: both were
    checked once, on fp32, before any export (export/torch_module/kind.py), and the check would only repeat
    that work (seconds for a convolutional network) to emit warnings that are silenced here."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        return trace(model, spec, example, dtype=dtype, device=device, check=False)


def torchscript_file(
    model: nn.Module, spec: ModuleSpec, example: Batch, path: Path, *, dtype: torch.dtype, device: str
) -> Runner:
    """Trace, freeze and save the served module in ``dtype`` on ``device``; a runner on the saved file."""
    traced = quiet_trace(model, spec, example, dtype=dtype, device=device)
    torch.jit.save(torch.jit.freeze(traced.eval()), str(path))
    return torchscript_runner(path, device)


def torchscript_runner(path: Path, device: str) -> Runner:
    """A runner on a saved file, loaded onto ``device`` as the libtorch backend loads it."""
    loaded = torch.jit.load(str(path), map_location=device).eval()

    def run(batch: Batch) -> Batch:
        # As served: the generated config sets DISABLE_OPTIMIZED_EXECUTION, which the backend honours.
        with torch.no_grad(), torch.jit.optimized_execution(False):
            outputs = loaded(*(torch.from_numpy(np.ascontiguousarray(a)).to(device) for a in batch))
        return tuple(out.cpu().numpy() for out in outputs)

    return run


def onnx_file(model: nn.Module, spec: ModuleSpec, example: Batch, path: Path) -> Runner:
    """Write ONNX (opset 17, batch and declared variable axes dynamic), check its names and datatypes;
    an onnxruntime runner on it."""
    # The exporter takes the traced module: a scripted model's control flow inside it becomes ONNX If and
    # Loop nodes (the exporter's own tracer cannot call into a ScriptModule).
    traced = quiet_trace(model, spec, example, dtype=torch.float32, device="cpu")
    names = [decl.name for decl in (*spec.inputs, *spec.outputs)]
    axes = {
        decl.name: {0: "batch", **{axis: f"{decl.name}_axis{axis}" for axis in decl.variable_axes}}
        for decl in (*spec.inputs, *spec.outputs)
    }
    with warnings.catch_warnings(), torch.no_grad():
        # A traced module's forward has no Python signature to read the inputs' names from: they are given.
        warnings.filterwarnings("ignore", message="no signature found", category=UserWarning)
        torch.onnx.export(
            traced,
            tuple(torch.from_numpy(array) for array in example),
            str(path),
            input_names=names[: len(spec.inputs)],
            output_names=names[len(spec.inputs) :],
            dynamic_axes=axes,
            opset_version=ONNX_OPSET,
            dynamo=False,
        )
    graph = onnx.load(str(path))
    onnx.checker.check_model(graph)
    _check_graph_io(graph, spec)
    return onnx_runner(path, spec, "cpu")


def _check_graph_io(graph: onnx.ModelProto, spec: ModuleSpec) -> None:
    """The graph's inputs and outputs carry the declared names and datatypes, in order."""
    found = [
        (value.name, np.dtype(onnx.helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type)))
        for value in (*graph.graph.input, *graph.graph.output)
    ]
    declared = [(decl.name, decl.numpy_dtype) for decl in (*spec.inputs, *spec.outputs)]
    if found != declared:
        raise ExportError(
            f"the ONNX graph has inputs and outputs {found}, the description declares {declared}: an input "
            "the model never reads is dropped by the exporter; declare only the inputs forward uses"
        )


def onnx_runner(
    path: Path, spec: ModuleSpec, device: str, cuda_options: Mapping[str, str] | None = None
) -> Runner:
    session = onnx_graph.session(path, device, cuda_options)
    outputs = [decl.name for decl in spec.outputs]

    def run(batch: Batch) -> Batch:
        return tuple(session.run(outputs, feed(spec, batch)))

    return run


def feed(spec: ModuleSpec, batch: Batch) -> dict[str, np.ndarray]:
    return {decl.name: array for decl, array in zip(spec.inputs, batch, strict=True)}


def variants(
    file_format: str,
    *,
    model: nn.Module,
    spec: ModuleSpec,
    example: Batch,
    fp32: Callable[[Path], Runner],
    cuda_options: Mapping[str, str],
    capabilities: Capabilities,
) -> list[Variant]:
    """The variants of one served file; ``fp32`` writes the float32 file and verifies it against eager;
    ``cuda_options``: the CUDA provider options an ONNX file's config serves; ``capabilities``: this
    machine's (whether its GPU runs TF32). On CUDA each runs as its backend serves it
    (export/precision/cuda_runtime.py)."""
    if file_format == "onnx":
        return onnx_file_variants(
            fp32=fp32,
            run=lambda path, device, options: onnx_runner(path, spec, device, options),
            feed=lambda batch: feed(spec, batch),
            placement_feed=lambda: feed(spec, example),
            capabilities=capabilities,
            cuda_options=cuda_options,
        )

    def reduced(path: Path, dtype: str, device: str) -> Runner:
        return torchscript_file(model, spec, example, path, dtype=getattr(torch, dtype), device=device)

    def fp32_cuda(path: Path) -> Runner:
        fp32(path)  # traced on the CPU and verified against eager; the libtorch backend maps it to the GPU
        return torchscript_runner(path, "cuda")

    return torchscript_file_variants(fp32=fp32, fp32_cuda=fp32_cuda, write=reduced)
