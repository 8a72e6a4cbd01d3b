"""Run an exported ONNX or TorchScript file inside Triton's Python backend.

The local repository (``python -m tritonrepo derive``) places this file as ``model.py`` for every model
that NVIDIA's container runs with the onnxruntime or libtorch backend. It keeps the name, the inputs and
outputs, max_batch_size, dynamic batching, ragged inputs and batch inputs of the deployable
configuration, and runs the same exported file with onnxruntime or torch.jit on the CPU (or on a GPU
when one is present), feeding it what the native backend would:

- an input with ``allow_ragged_batch`` arrives from every request of the batch concatenated into one
  1-D array (the dynamic batcher lets requests of different shapes share the execution), and so does
  an input that a batch input describes (a benchmark clone that turns ragged batching off still
  feeds the graph the flat layout its batch input describes);
- each ``batch_input`` is computed from the requests' shapes as Triton's backends compute it
  (element counts, accumulated counts, item shapes).

The file runs in ``exported_runtime.py`` (tritonrepo/exported_runtime.py, linked beside this runner),
the runtime code the benchmark's in-process baselines run the same files with. It batches through
``RequestBatcher`` (pybackend_batching.py) like every Python model: each request is
checked before it joins the batch (its inputs' datatypes, a non-empty ragged input, the value bounds the
export recorded for an input: token ids inside the vocabulary), and a request that fails gets its own
INVALID_ARGUMENT response naming the input while the rest of the batch runs. Inputs that are not
flattened are concatenated along the batch axis: without ragged batching Triton's dynamic batcher
batches only requests of equal shapes.

Config parameters (written by derive): ``runtime`` ("onnxruntime" or "torchscript"), ``model_filename``,
``intra_op_threads`` (a number, or ``auto`` for the cores divided between this model's instances, what a
tuning that varies the instance count needs), ``intra_op_spinning`` ("false": onnxruntime's pool threads
sleep between operators instead of spinning, for pools that together take more than the cores;
tritonrepo/configs.py, ``intra_op_layout``), optionally ``input_bounds`` (JSON: input name -> [low,
high]); the libtorch backend's own ``DISABLE_OPTIMIZED_EXECUTION`` and ``ENABLE_JIT_PROFILING`` are
honoured as it does.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils

# Linked beside this runner by the derivation, with the two helpers below.
from exported_runtime import BATCH_INPUT_KINDS, OnnxRunner, TorchScriptRunner, batch_input_values
from pybackend_batching import InvalidInput, RequestBatcher
from pybackend_parameters import ModelParameters


@dataclass(frozen=True)
class _Input:
    name: str
    dtype: type
    ragged: bool
    bounds: tuple[float, float] | None


@dataclass(frozen=True)
class _BatchInput:
    kind: str
    target: str
    source: str
    dtype: type


def _threads(parameters: ModelParameters, config: dict) -> int:
    if parameters.text("intra_op_threads", default="") != "auto":
        return parameters.integer("intra_op_threads", default=os.cpu_count() or 1, minimum=1)
    instances = sum(max(1, int(group.get("count", 1))) for group in config.get("instance_group", []))
    return max(1, (os.cpu_count() or 1) // max(1, instances))


class TritonPythonModel:
    def initialize(self, args: dict) -> None:
        config = json.loads(args["model_config"])
        parameters = ModelParameters(config)
        bounds = parameters.json("input_bounds", default={})
        self.inputs = [
            _Input(
                name=tensor["name"],
                dtype=pb_utils.triton_string_to_numpy(tensor["data_type"]),
                ragged=bool(tensor.get("allow_ragged_batch")),
                bounds=tuple(bounds[tensor["name"]]) if tensor["name"] in bounds else None,
            )
            for tensor in config["input"]
        ]
        self.batch_inputs = _batch_inputs(config)
        self.flattened = {i.name for i in self.inputs if i.ragged} | {b.source for b in self.batch_inputs}
        self.outputs = [tensor["name"] for tensor in config["output"]]
        path = Path(args["model_repository"]) / args["model_version"] / parameters.text("model_filename")
        if not path.is_file():
            raise pb_utils.TritonModelException(
                f"{config['name']}: exported file {path} is missing; run `python -m export` first"
            )
        threads = _threads(parameters, config)
        feed_order = [i.name for i in self.inputs] + [b.target for b in self.batch_inputs]
        runtime = parameters.text("runtime")
        self.runner: OnnxRunner | TorchScriptRunner
        if runtime == "onnxruntime":
            self.runner = OnnxRunner(
                path,
                threads=threads,
                outputs=self.outputs,
                memory_pattern=parameters.flag("enable_mem_pattern", default=True),
                spinning=parameters.flag("intra_op_spinning", default=True),
            )
        elif runtime == "torchscript":
            self.runner = TorchScriptRunner(
                path,
                threads=threads,
                instance_kind=args.get("model_instance_kind"),
                feed_order=sorted(feed_order, key=_libtorch_position(feed_order)),
                optimized=not parameters.flag("DISABLE_OPTIMIZED_EXECUTION", default=False),
                profiling=parameters.flag("ENABLE_JIT_PROFILING", default=True),
            )
        else:
            raise pb_utils.TritonModelException(
                f"unknown runtime {runtime!r}; expected onnxruntime or torchscript"
            )
        self.batcher = RequestBatcher(config, prepare=self._prepare, run=self._run, with_rows=True)

    def execute(self, requests: list) -> list:
        return self.batcher.execute(requests)

    def _prepare(self, *arrays: np.ndarray) -> tuple:
        """Check one request; a flattened input becomes a list of its items, so requests of different
        lengths concatenate (into one list) and each item keeps its shape for the batch inputs."""
        columns: list = []
        for spec, array in zip(self.inputs, arrays, strict=True):
            problem = _problem(spec, array)
            if problem:
                raise InvalidInput(problem)
            columns.append(list(array) if spec.name in self.flattened else array)
        return tuple(columns)

    def _run(self, *columns: np.ndarray | list[np.ndarray], rows: list[int]) -> tuple[np.ndarray, ...]:
        feeds: dict[str, np.ndarray] = {}
        items: dict[str, list[np.ndarray]] = {}
        for spec, column in zip(self.inputs, columns, strict=True):
            if isinstance(column, list):  # a flattened input: the items of every request, in order
                items[spec.name] = column
                feeds[spec.name] = np.concatenate([item.reshape(-1) for item in column])
            else:
                feeds[spec.name] = column
        for batch_input in self.batch_inputs:
            feeds[batch_input.target] = _batch_input(
                batch_input, _request_shapes(items[batch_input.source], rows)
            )
        return tuple(self.runner.run(feeds))


def _batch_inputs(config: dict) -> list[_BatchInput]:
    batch_inputs = [
        _BatchInput(
            kind=entry["kind"],
            target=entry["target_name"][0],
            source=entry["source_input"][0],
            dtype=pb_utils.triton_string_to_numpy(entry["data_type"]),
        )
        for entry in config.get("batch_input", [])
    ]
    unknown = [b.kind for b in batch_inputs if b.kind not in BATCH_INPUT_KINDS]
    if unknown:
        raise pb_utils.TritonModelException(
            f"{config['name']}: batch_input kind(s) {unknown} are not supported here; "
            f"supported: {sorted(BATCH_INPUT_KINDS)}"
        )
    return batch_inputs


def _problem(spec: _Input, array: np.ndarray) -> str | None:
    if array.dtype != spec.dtype:
        return f"{spec.name}: expected {np.dtype(spec.dtype).name}, got {array.dtype.name}"
    if spec.ragged and array.size == 0:
        return f"{spec.name}: empty; every item needs at least one element"
    if spec.bounds is not None and array.size:
        low, high = spec.bounds
        outside = (array < low) | (array > high)
        if outside.any():
            value = array[outside].flat[0]
            return f"{spec.name}: value {value} is outside [{low:g}, {high:g}] (the model's valid range)"
    return None


def _request_shapes(items: list[np.ndarray], rows: list[int]) -> list[tuple[int, ...]]:
    """Each request's shape, from the items of the whole batch and each request's item count."""
    shapes, start = [], 0
    for count in rows:
        shapes.append((count, *items[start].shape) if count else (0,))
        start += count
    return shapes


def _batch_input(batch_input: _BatchInput, shapes: list[tuple[int, ...]]) -> np.ndarray:
    return batch_input_values(batch_input.kind, shapes, batch_input.dtype)


def _libtorch_position(names: list[str]):
    """libtorch binds NAME__<index> to forward()'s argument <index>; other names keep their order."""

    def position(name: str) -> int:
        _, _, suffix = name.rpartition("__")
        return int(suffix) if suffix.isdigit() else names.index(name)

    return position
