"""Which input shapes a model's dynamic batcher hands to the backend, and which of them a warm-up runs.

A backend that compiles or searches per input shape (onnxruntime's exhaustive cuDNN convolution search,
libtorch's profiling executor) pays that cost on the first batch of every new shape. Triton's dynamic
batcher dispatches whatever it holds when ``max_queue_delay_microseconds`` runs out, not only the
preferred sizes, so it forms every batch size from 1 to ``max_batch_size``; a model without a dynamic
batcher runs each request as sent, also 1 to ``max_batch_size``. An input with a variable dimension
(``-1``) multiplies that by the lengths the sender produces (for example a tokenizer's length buckets),
which only the caller knows: pass them as ``variable_dims``. A ragged input (``allow_ragged_batch``)
reaches the backend as one concatenated vector of any total length: no finite list covers it, and
:func:`batcher_shapes` says so.

    missing = uncovered_shapes(config)            # [] when the warm-up covers every batch the batcher forms
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tritonclient.grpc.model_config_pb2 import ModelConfig

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
