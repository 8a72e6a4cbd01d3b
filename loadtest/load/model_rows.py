"""Rows of any model's input tensors for the load generators, where its inputs are neither images, text,
token ids nor pixels (loadtest/load/perf_inputs.py decides that from the config).

- :func:`described_rows`: the rows the ``check_inputs`` callable of the model's description returns
  (``module.check_inputs`` of a ``torch_module``: real rows of the user's data set, the rows the export
  checks and gates on), checked against the description and the served config;
- :func:`random_rows`: where no description names check inputs, values of each input's datatype and dims:
  normal floats, integers uniform within the input's recorded range (:func:`recorded_bounds`), zeros
  where none is recorded (the value every warm-up sample sends, so one the model is known to accept),
  random booleans. A STRING input or a variable dim cannot be filled at random: that is refused, naming
  the fix.

A row is ``{input name: array of the input's dims}``, without the batch axis.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
from tritonclient.grpc import model_config_pb2
from tritonclient.grpc.model_config_pb2 import ModelConfig
from tritonclient.utils import triton_to_np_dtype

from description.errors import DescriptionError
from description.model import ModelDescription, load_descriptions
from description.module_code import load_callable
from export.common import ExportError
from tritonrepo.configs import ModelEntry
from tritonrepo.paths import DESCRIPTIONS

logger = logging.getLogger(__name__)

Row = dict[str, np.ndarray]
_TYPES = model_config_pb2.DataType
_FIX = "name real rows in its description's module.check_inputs (docs/your-model-module.md)"


def datatype(tensor: model_config_pb2.ModelInput) -> str:
    """Triton's name of an input's datatype ('FP32', 'INT64', 'BYTES')."""
    name = _TYPES.Name(tensor.data_type).removeprefix("TYPE_")
    return "BYTES" if name == "STRING" else name


def describing(model: str, folder: Path = DESCRIPTIONS) -> ModelDescription | None:
    """The ``torch_module`` description with a served file for ``model``, None where none has."""
    try:
        descriptions = load_descriptions(folder)
    except DescriptionError as e:
        raise ValueError(f"{model}: cannot read the model descriptions: {e}") from e
    for description in descriptions:
        if description.module is not None and any(s.model == model for s in description.served):
            return description
    return None


def described_services(folder: Path = DESCRIPTIONS) -> tuple[str, ...]:
    """What each ``torch_module`` description serves to clients: its ONNX model where nothing is in front
    of it, else the ensembles that put its preprocessing in front."""
    services: list[str] = []
    for description in load_descriptions(folder):
        if description.module is None:
            continue
        if not description.preprocessing:
            services += [s.model for s in description.served if s.format == "onnx"]
        elif description.configs is not None:
            services += [e.model for e in description.configs.ensembles][:1]
    return tuple(services)


def row_services(folder: Path = DESCRIPTIONS) -> tuple[str, ...]:
    """The described services that take rows: each ``torch_module`` description's ONNX model with no
    preprocessing in front of it (the models :func:`described_rows` fills)."""
    return tuple(
        s.model
        for description in load_descriptions(folder)
        if description.module is not None and not description.preprocessing
        for s in description.served
        if s.format == "onnx"
    )


def described_rows(model: str, config: ModelConfig, folder: Path = DESCRIPTIONS) -> list[Row] | None:
    """Every row ``check_inputs()`` of ``model``'s description returns, checked against the description
    (datatypes, dims, ranges) and against ``config``; None where no description names check inputs."""
    description = describing(model, folder)
    if description is None or description.module is None:
        return None
    from export.torch_module.checks import check_groups  # imports torch: only for a described model

    spec, where = description.module, f"{model} (description {description.name})"
    try:
        value = load_callable(spec.check_inputs, description.folder, where=where)()
        batches = check_groups(value, spec, where=where)
    except (DescriptionError, ExportError) as e:
        raise ValueError(str(e)) from e
    names = [decl.name for decl in spec.inputs]
    rows = [
        {name: batch[index][row] for index, name in enumerate(names)}
        for batch in batches
        for row in range(len(batch[0]))
    ]
    _check_against_config(config, rows[0], where)
    return rows


def _check_against_config(config: ModelConfig, row: Row, where: str) -> None:
    declared = sorted(tensor.name for tensor in config.input)
    if sorted(row) != declared:
        raise ValueError(
            f"{where}: check_inputs() gives {sorted(row)}, the served config declares the inputs {declared}; "
            "regenerate the config (python -m export --configs-only) or correct the description"
        )
    for tensor in config.input:
        value, dims = row[tensor.name], list(tensor.dims)
        expected = np.dtype(triton_to_np_dtype(datatype(tensor)))
        fits = len(value.shape) == len(dims) and all(
            want in (-1, got) for want, got in zip(dims, value.shape, strict=True)
        )
        if value.dtype != expected or not fits:
            raise ValueError(
                f"{where}: check_inputs() gives {tensor.name} rows of {value.dtype} {list(value.shape)}; the "
                f"served config declares {datatype(tensor)} {dims}; regenerate the config (python -m export "
                "--configs-only) or correct the description"
            )


def recorded_bounds(repository: Path, config: ModelConfig) -> dict[str, tuple[float, float]]:
    """Each input's inclusive value range as recorded for the served model: the ``input_bounds``
    parameter of a derived config, else the manifest beside the exported file (what the export recorded
    from the description)."""
    parameter = config.parameters["input_bounds"].string_value if "input_bounds" in config.parameters else ""
    entry = ModelEntry(name=config.name, path=Path(repository) / config.name, config=config)
    recorded = json.loads(parameter) if parameter else entry.recorded_input_bounds()
    return {name: (low, high) for name, (low, high) in recorded.items()}


def random_rows(
    config: ModelConfig, bounds: dict[str, tuple[float, float]], count: int, *, seed: int = 0
) -> list[Row]:
    """``count`` rows of values fitting each input's datatype, dims and recorded range."""
    rng = np.random.default_rng(seed)
    columns = {tensor.name: _column(config.name, tensor, bounds, count, rng) for tensor in config.input}
    return [{name: values[row] for name, values in columns.items()} for row in range(count)]


def _column(
    model: str,
    tensor: model_config_pb2.ModelInput,
    bounds: dict[str, tuple[float, float]],
    count: int,
    rng: np.random.Generator,
) -> np.ndarray:
    name, dims, kind = tensor.name, list(tensor.dims), datatype(tensor)
    if kind == "BYTES":
        raise ValueError(f"{model}: no real data is known for its STRING input {name!r}; {_FIX}")
    if any(d < 0 for d in dims):
        raise ValueError(f"{model}: input {name!r} has variable dims {dims}; random rows need sizes: {_FIX}")
    shape = (count, *dims)
    dtype = np.dtype(triton_to_np_dtype(kind))
    if kind == "BOOL":
        return rng.random(shape) < 0.5
    if np.issubdtype(dtype, np.integer):
        if name not in bounds:
            logger.warning("%s: input %s has no recorded range and no check inputs: zeros", model, name)
            return np.zeros(shape, dtype=dtype)
        low, high = bounds[name]
        return rng.integers(int(low), int(high), size=shape, endpoint=True).astype(dtype)
    return rng.normal(size=shape).astype(dtype)
