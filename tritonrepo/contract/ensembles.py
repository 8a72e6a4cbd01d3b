"""An ensemble's steps against the models they name, as Triton r24.10 validates an ensemble when it loads
it (core src/ensemble_scheduler/ensemble_utils.cc): each step names a model of the repository that
batches at least as far as the ensemble, maps every input of that model and only its real inputs and
outputs, and every ensemble tensor has one datatype and one shape (-1 matching any size) wherever it is
produced or read. Every ensemble output, and every tensor a step reads, is an ensemble input or some
step's output (in any order of the steps: Triton orders them by their tensors)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tritonclient.grpc.model_config_pb2 import ModelConfig

from tritonrepo.contract.config import type_name
from tritonrepo.contract.finding import Finding, dims_text, error


@dataclass(frozen=True)
class _Tensor:
    """An ensemble tensor as one model sees it: its datatype, dims, and the dims with the batch axis."""

    model: str
    data_type: int
    dims: tuple[int, ...]
    batching: bool

    @property
    def full_dims(self) -> tuple[int, ...]:
        return ((-1,) if self.batching else ()) + self.dims


def _fits(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    return len(a) == len(b) and all(x == y or -1 in (x, y) for x, y in zip(a, b, strict=True))


def check_ensemble(name: str, config: ModelConfig, models: Mapping[str, ModelConfig]) -> list[Finding]:
    """The findings of ensemble ``name`` against the configs of the repository's ``models``."""
    batching = config.max_batch_size > 0
    tensors: dict[str, _Tensor] = {}
    steps = config.ensemble_scheduling.step
    written = {t.name for t in config.input} | {v for step in steps for v in step.output_map.values()}
    for tensor in config.input:
        dims = tensor.reshape.shape if tensor.HasField("reshape") else tensor.dims
        tensors[tensor.name] = _Tensor(name, tensor.data_type, tuple(dims), batching)
    found: list[Finding] = []
    for index, step in enumerate(steps):
        if step.model_name not in models:
            found.append(
                error(
                    name,
                    "ensemble-step-model",
                    f"step {index} names model {step.model_name!r}, which is not in the repository",
                    f"add {step.model_name}/ to the repository or name one of: {', '.join(sorted(models))}",
                )
            )
            continue
        found += _step(name, config, index, step, models[step.model_name], tensors, written)
    for tensor in config.output:
        if tensor.name not in written:
            found.append(
                error(
                    name,
                    "ensemble-output-not-written",
                    f"ensemble output {tensor.name} is written by no step (server #4560)",
                    f"map a step's output to {tensor.name} in its output_map",
                )
            )
        else:
            dims = tensor.reshape.shape if tensor.HasField("reshape") else tensor.dims
            found += _consistent(
                name, tensor.name, tensors, _Tensor(name, tensor.data_type, tuple(dims), batching)
            )
    return found


def _step(
    name: str,
    ensemble: ModelConfig,
    index: int,
    step,
    model: ModelConfig,
    tensors: dict[str, _Tensor],
    written: set[str],
) -> list[Finding]:
    where = f"step {index} ({step.model_name})"
    found = []
    if 0 < model.max_batch_size < ensemble.max_batch_size:
        found.append(
            error(
                name,
                "ensemble-batch-size",
                f"the ensemble batches up to {ensemble.max_batch_size}, {where} only up to "
                f"{model.max_batch_size}",
                f"lower the ensemble's max_batch_size to {model.max_batch_size} or raise the step's",
            )
        )
    batching = model.max_batch_size > 0
    inputs = {t.name: t for t in model.input}
    outputs = {t.name: t for t in model.output}
    for key in sorted(set(step.input_map) - set(inputs)):
        found.append(_unknown(name, where, "input", key, sorted(inputs)))
    for key in sorted(set(step.output_map) - set(outputs)):
        found.append(_unknown(name, where, "output", key, sorted(outputs)))
    for tensor in model.input:
        if tensor.name not in step.input_map:
            if not tensor.optional:
                found.append(
                    error(
                        name,
                        "ensemble-unmapped-input",
                        f"{where}: input {tensor.name} of {step.model_name} is mapped to no ensemble tensor",
                        f'add input_map {{ key: "{tensor.name}" value: "<ensemble tensor>" }}',
                    )
                )
            continue
        source = step.input_map[tensor.name]
        if source not in written:
            found.append(
                error(
                    name,
                    "ensemble-unwritten-tensor",
                    f"{where} reads ensemble tensor {source}, which no input or step output provides",
                    "name an ensemble input or a tensor another step's output_map writes",
                )
            )
        own = _Tensor(step.model_name, tensor.data_type, tuple(tensor.dims), batching)
        found += _consistent(name, source, tensors, own)
    for key, target in step.output_map.items():
        if key in outputs:
            own = _Tensor(step.model_name, outputs[key].data_type, tuple(outputs[key].dims), batching)
            found += _consistent(name, target, tensors, own)
    return found


def _unknown(name: str, where: str, kind: str, key: str, real: list[str]) -> Finding:
    return error(
        name,
        "ensemble-unknown-tensor",
        f"{where} maps {kind} {key}, which the model does not have (its {kind}s: {real})",
        f"use the model's own {kind} name as the key",
    )


def _consistent(name: str, tensor: str, tensors: dict[str, _Tensor], seen: _Tensor) -> list[Finding]:
    """``seen`` agrees with what is known of ensemble ``tensor`` (recorded when first seen)."""
    known = tensors.setdefault(tensor, seen)
    if known.data_type != seen.data_type:
        return [
            error(
                name,
                "ensemble-datatype",
                f"ensemble tensor {tensor} is {type_name(known.data_type)} in {known.model} but "
                f"{type_name(seen.data_type)} in {seen.model} (server #2885)",
                "make both configs state the same data_type (the exported file's)",
            )
        ]
    if not _fits(known.dims, seen.dims) and not _fits(known.full_dims, seen.full_dims):
        return [
            error(
                name,
                "ensemble-shape",
                f"ensemble tensor {tensor} has shape {dims_text(known.full_dims)} in {known.model} but "
                f"{dims_text(seen.full_dims)} in {seen.model}",
                "make the dims agree (-1 matches any size; the batch axis counts where max_batch_size > 0)",
            )
        ]
    return []
