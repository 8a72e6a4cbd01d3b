"""Read and check a model's ``model_warmup`` samples as Triton runs them.

Triton (core, ``TritonModelInstance::GenerateWarmupData``) turns a sample of ``batch_size`` N into N
requests of shape [1, *dims] that share one input buffer, and hands all N to the backend in one
execution, bypassing the scheduler. ``input_data_file`` names a file in the model's ``warmup/`` folder
holding the raw little-endian values of one request, row-major; Triton refuses a file shorter than
that and reads only the first bytes of a longer one. So a ragged input (``allow_ragged_batch``) of dims
[L] in a sample of batch N reaches the backend as N x L concatenated values: one sample at
max_batch_size with the longest L is the largest batch the model can be given.

    problems = warmup_problems(config, model_dir, input_bounds={"INPUT_IDS__0": (0, 30521)})
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

import numpy as np
from tritonclient.grpc import model_config_pb2
from tritonclient.grpc.model_config_pb2 import ModelConfig, ModelWarmup

WARMUP_FOLDER = "warmup"  # Triton's kWarmupDataFolder, beside config.pbtxt
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
