"""What the warm-up tests check a model's ``model_warmup`` against: the shapes its dynamic batcher hands
the backend, and its samples' data as Triton reads them.

Shapes. A backend that compiles or searches per input shape (onnxruntime's exhaustive cuDNN convolution
search, libtorch's profiling executor) pays that cost on the first batch of every new shape. Triton's dynamic
batcher dispatches whatever it holds when ``max_queue_delay_microseconds`` runs out, not only the
preferred sizes, so it forms every batch size from 1 to ``max_batch_size``; a model without a dynamic
batcher runs each request as sent, also 1 to ``max_batch_size``. An input with a variable dimension
(``-1``) multiplies that by the lengths the sender produces (for example a tokenizer's length buckets),
which only the caller knows: pass them as ``variable_dims``. A ragged input (``allow_ragged_batch``)
reaches the backend as one concatenated vector of any total length: no finite list covers it, and
:func:`batcher_shapes` says so.

Samples. Triton (core, ``TritonModelInstance::GenerateWarmupData``) turns a sample of ``batch_size`` N into N
requests of shape [1, *dims] that share one input buffer, and hands all N to the backend in one
execution, bypassing the scheduler. ``input_data_file`` names a file in the model's ``warmup/`` folder
holding the raw little-endian values of one request, row-major; Triton refuses a file shorter than
that and reads only the first bytes of a longer one. So a ragged input (``allow_ragged_batch``) of dims
[L] in a sample of batch N reaches the backend as N x L concatenated values: one sample at
max_batch_size with the longest L is the largest batch the model can be given.

    missing = uncovered_shapes(config)            # [] when the warm-up covers every batch the batcher forms
    problems = warmup_problems(config, model_dir, input_bounds={"INPUT_IDS__0": (0, 30521)})
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tritonclient.grpc import model_config_pb2
from tritonclient.grpc.model_config_pb2 import ModelConfig, ModelWarmup

from tritonrepo.files import WARMUP_FOLDER

# Input name -> dims without the batch dimension.
Dims = tuple[tuple[str, tuple[int, ...]], ...]


@dataclass(frozen=True, order=True, kw_only=True)
class BatchShape:
    """One batch as the backend sees it: its size and every input's dims (batch dimension excluded)."""

    batch_size: int
    dims: Dims

    def describe(self) -> str:
        inputs = ", ".join(f"{name} {list(shape)}" for name, shape in self.dims)
        return f"batch {self.batch_size} ({inputs})"


def batcher_shapes(
    config: ModelConfig, *, variable_dims: Mapping[str, Sequence[tuple[int, ...]]] | None = None
) -> list[BatchShape]:
    """Every (batch size, input dims) the server can hand this model's backend.

    ``variable_dims``: for each input whose config dims contain -1, the complete dims it arrives with
    (e.g. ``{"INPUT_IDS": [(16,), (32,), (64,), (128,)]}``). Inputs that vary together (ids and mask of
    one bucket) are paired by position when they list the same number of shapes.
    """
    if config.max_batch_size < 1:
        raise ValueError(
            f"{config.name}: max_batch_size is {config.max_batch_size}; only batching models have a batcher"
        )
    variable_dims = dict(variable_dims or {})
    per_input: list[tuple[str, list[tuple[int, ...]]]] = []
    for tensor in config.input:
        dims = tuple(tensor.dims)
        if tensor.allow_ragged_batch:
            raise ValueError(
                f"{config.name}: input {tensor.name} is ragged: the backend sees the requests' lengths "
                "concatenated, any total up to max_batch_size times the longest, so no warm-up list covers "
                "every shape; remove the per-shape cost with the backend's parameters instead"
            )
        if -1 in dims:
            if tensor.name not in variable_dims:
                raise ValueError(
                    f"{config.name}: input {tensor.name} has a variable dimension {list(dims)}; pass the "
                    f"dims it arrives with as variable_dims={{'{tensor.name}': [...]}}"
                )
            options = [tuple(d) for d in variable_dims[tensor.name]]
            for option in options:
                pairs = zip(dims, option, strict=False)
                if len(option) != len(dims) or any(c not in (-1, v) for c, v in pairs):
                    raise ValueError(f"{config.name}: {tensor.name} dims {option} do not fit {list(dims)}")
            per_input.append((tensor.name, options))
        else:
            per_input.append((tensor.name, [dims]))
    combinations = _pair_variable_inputs(per_input)
    return sorted(
        BatchShape(batch_size=size, dims=dims)
        for size in range(1, config.max_batch_size + 1)
        for dims in combinations
    )


def warmup_shapes(config: ModelConfig) -> list[BatchShape]:
    """The shapes the model's ``model_warmup`` samples run, in order."""
    shapes = []
    for sample in config.model_warmup:
        dims = tuple((name, tuple(sample.inputs[name].dims)) for name in (t.name for t in config.input))
        shapes.append(BatchShape(batch_size=max(1, sample.batch_size), dims=dims))
    return shapes


def uncovered_shapes(
    config: ModelConfig, *, variable_dims: Mapping[str, Sequence[tuple[int, ...]]] | None = None
) -> list[BatchShape]:
    """The batches the batcher can form that no warm-up sample runs first."""
    warmed = set(warmup_shapes(config))
    return [shape for shape in batcher_shapes(config, variable_dims=variable_dims) if shape not in warmed]


def _pair_variable_inputs(per_input: list[tuple[str, list[tuple[int, ...]]]]) -> list[Dims]:
    varying = [options for _, options in per_input if len(options) > 1]
    if varying and all(len(options) == len(varying[0]) for options in varying):
        count = len(varying[0])
        return [
            tuple((name, options[i] if len(options) > 1 else options[0]) for name, options in per_input)
            for i in range(count)
        ]
    names = [name for name, _ in per_input]
    return [tuple(zip(names, combo, strict=True)) for combo in itertools.product(*(o for _, o in per_input))]


_DTYPES: dict[int, np.dtype] = {
    model_config_pb2.TYPE_FP32: np.dtype("<f4"),
    model_config_pb2.TYPE_FP16: np.dtype("<f2"),
    model_config_pb2.TYPE_INT64: np.dtype("<i8"),
    model_config_pb2.TYPE_INT32: np.dtype("<i4"),
    model_config_pb2.TYPE_UINT8: np.dtype("u1"),
    model_config_pb2.TYPE_BOOL: np.dtype("?"),
}


def read_warmup_input(model_dir: Path, sample: ModelWarmup, name: str) -> np.ndarray:
    """One request's ``name`` input of ``sample`` from its data file, shaped [*dims]."""
    spec = sample.inputs[name]
    if spec.WhichOneof("input_data_type") != "input_data_file":
        raise ValueError(f"{sample.name}: input {name} is not read from a file")
    dtype = _DTYPES.get(spec.data_type)
    if dtype is None:
        raise ValueError(f"{sample.name}: input {name} has a data type this reader does not know")
    path = Path(model_dir) / WARMUP_FOLDER / spec.input_data_file
    count = math.prod(spec.dims)
    data = np.fromfile(path, dtype=dtype)
    if data.size != count:
        raise ValueError(
            f"{sample.name}: {path} holds {data.size} values of {dtype.name}, dims {list(spec.dims)} "
            f"need exactly {count}"
        )
    return data.reshape(tuple(spec.dims))


def warmup_problems(
    config: ModelConfig, model_dir: Path, *, input_bounds: Mapping[str, tuple[float, float]] | None = None
) -> list[str]:
    """Every reason the server would refuse a sample, or would warm up with inputs the model rejects.

    ``input_bounds``: input name -> inclusive (low, high) the values must lie in (token ids inside the
    vocabulary). An empty list means every sample is valid for ``config``.
    """
    bounds = dict(input_bounds or {})
    inputs = {tensor.name: tensor for tensor in config.input}
    problems = []
    for sample in config.model_warmup:
        where = f"{config.name} warm-up {sample.name!r}"
        if not 1 <= sample.batch_size <= max(1, config.max_batch_size):
            problems.append(f"{where}: batch_size {sample.batch_size} outside 1..{config.max_batch_size}")
        if set(sample.inputs) != set(inputs):
            problems.append(f"{where}: inputs {sorted(sample.inputs)}, the model takes {sorted(inputs)}")
        for name in sorted(set(sample.inputs) & set(inputs)):
            problems += _input_problems(where, config, model_dir, sample, inputs[name], bounds.get(name))
    return problems


def _input_problems(
    where: str,
    config: ModelConfig,
    model_dir: Path,
    sample: ModelWarmup,
    tensor: model_config_pb2.ModelInput,
    bounds: tuple[float, float] | None,
) -> list[str]:
    spec = sample.inputs[tensor.name]
    dims = list(spec.dims)
    problems = []
    if spec.data_type != tensor.data_type:
        kind = model_config_pb2.DataType.Name
        problems.append(
            f"{where}: {tensor.name} is {kind(spec.data_type)}, the model takes {kind(tensor.data_type)}"
        )
    declared = list(tensor.dims)
    if len(dims) != len(declared) or any(
        d < 1 or c not in (-1, d) for c, d in zip(declared, dims, strict=False)
    ):
        problems.append(f"{where}: {tensor.name} dims {dims} do not fit the model's {declared}")
    source = spec.WhichOneof("input_data_type")
    if source == "random_data" and bounds is not None:
        problems.append(f"{where}: {tensor.name} uses random_data, which ignores its bounds {list(bounds)}")
    if source == "input_data_file":
        try:
            values = read_warmup_input(model_dir, sample, tensor.name)
        except (OSError, ValueError) as e:
            return [*problems, f"{where}: {e}"]
        if bounds is not None and values.size and (values.min() < bounds[0] or values.max() > bounds[1]):
            problems.append(
                f"{where}: {tensor.name} values {values.min()}..{values.max()} outside {list(bounds)}"
            )
    elif source == "zero_data" and bounds is not None and not bounds[0] <= 0 <= bounds[1]:
        problems.append(f"{where}: {tensor.name} zero_data is outside its bounds {list(bounds)}")
    return problems


def largest_warmup_tokens(config: ModelConfig, name: str) -> tuple[int, int]:
    """(batch size, values per request) of the sample that hands the backend the most of ``name``."""
    sizes = [
        (
            sample.batch_size * math.prod(sample.inputs[name].dims),
            sample.batch_size,
            math.prod(sample.inputs[name].dims),
        )
        for sample in config.model_warmup
        if name in sample.inputs
    ]
    if not sizes:
        raise ValueError(f"{config.name}: no warm-up sample sets {name}")
    _, batch, per_request = max(sizes)
    return batch, per_request
