"""The rules a config.pbtxt must keep on its own, as Triton r24.10 checks them when it loads the model
(core src/model_config_utils.cc, src/backend_model_instance.cc): tensor dims, preferred batch sizes,
batch inputs and ragged inputs, warm-up samples. Each rule returns its findings; none raises."""

from __future__ import annotations

import math
from pathlib import Path

from tritonclient.grpc.model_config_pb2 import BatchInput, DataType, ModelConfig, ModelInput

from tritonrepo.contract.finding import Finding, dims_text, error, warning
from tritonrepo.files import WARMUP_FOLDER

# Batch input kinds that take exactly one source input (every kind r24.10 knows).
_ONE_SOURCE = {
    BatchInput.BATCH_ELEMENT_COUNT,
    BatchInput.BATCH_ACCUMULATED_ELEMENT_COUNT,
    BatchInput.BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO,
    BatchInput.BATCH_MAX_ELEMENT_COUNT_AS_SHAPE,
    BatchInput.BATCH_ITEM_SHAPE,
    BatchInput.BATCH_ITEM_SHAPE_FLATTEN,
}
_BATCH_INPUT_TYPES = (DataType.TYPE_INT32, DataType.TYPE_FP32)
_ELEMENT_BYTES = {
    DataType.TYPE_BOOL: 1,
    DataType.TYPE_UINT8: 1,
    DataType.TYPE_INT8: 1,
    DataType.TYPE_UINT16: 2,
    DataType.TYPE_INT16: 2,
    DataType.TYPE_FP16: 2,
    DataType.TYPE_BF16: 2,
    DataType.TYPE_UINT32: 4,
    DataType.TYPE_INT32: 4,
    DataType.TYPE_FP32: 4,
    DataType.TYPE_UINT64: 8,
    DataType.TYPE_INT64: 8,
    DataType.TYPE_FP64: 8,
}


def type_name(data_type: int) -> str:
    return DataType.Name(data_type)


def io_dims(name: str, config: ModelConfig) -> list[Finding]:
    """Every input and output has dims, each >= 1 or -1; an NCHW/NHWC input has three (server #4815)."""
    found = []
    for kind, tensors in (("input", config.input), ("output", config.output)):
        for tensor in tensors:
            bad = [d for d in tensor.dims if d < 1 and d != -1]
            if not tensor.dims or bad:
                found.append(
                    error(
                        name,
                        "config-dims",
                        f"{kind} {tensor.name} has dims {dims_text(tensor.dims)}",
                        "give every axis after the batch axis: a size >= 1, or -1 for any size",
                    )
                )
    for tensor in config.input:
        if tensor.format in (ModelInput.FORMAT_NCHW, ModelInput.FORMAT_NHWC) and len(tensor.dims) != 3:
            found.append(
                error(
                    name,
                    "config-dims",
                    f"input {tensor.name} is {ModelInput.Format.Name(tensor.format)} with dims "
                    f"{dims_text(tensor.dims)}; Triton requires 3 dims for that format",
                    "leave the batch axis out of dims (it comes from max_batch_size) or drop format",
                )
            )
    return found


def preferred_batch_sizes(name: str, config: ModelConfig) -> list[Finding]:
    """Each preferred batch size is within 1..max_batch_size (onnxruntime_backend #148)."""
    sizes = list(config.dynamic_batching.preferred_batch_size)
    bad = [s for s in sizes if s < 1 or s > config.max_batch_size]
    if not bad:
        return []
    return [
        error(
            name,
            "preferred-batch-size",
            f"preferred_batch_size {bad} outside 1..max_batch_size ({config.max_batch_size})",
            f"keep preferred sizes within 1..{config.max_batch_size} or raise max_batch_size",
        )
    ]


def queue_instances(name: str, config: ModelConfig) -> list[Finding]:
    """A bounded queue (any default_queue_policy) behind fewer than two instances of a group: the core's
    batcher then loses its prefetching and wakes on a new request only if an instance is idle at that
    instant (src/dynamic_batch_scheduler.cc), so a request that arrives while the lone instance finishes
    its previous batch waits for the batcher's 500 ms poll."""
    if not config.dynamic_batching.HasField("default_queue_policy"):
        return []
    counts = [group.count for group in config.instance_group] or [1]
    if min(counts) >= 2:
        return []
    return [
        warning(
            name,
            "queue-one-instance",
            f"a default_queue_policy with {min(counts)} instance(s) in a group: a request arriving as the "
            "instance finishes its previous batch waits up to 500 ms for the batcher",
            "set count: 2 or more in each instance_group, or drop default_queue_policy",
        )
    ]


def batch_inputs(name: str, config: ModelConfig) -> list[Finding]:
    """Each batch input has one source that is a real input, an INT32 or FP32 type, and a target name of
    its own (core ValidateBatchIO)."""
    inputs = [tensor.name for tensor in config.input]
    found, targets = [], []
    for entry in config.batch_input:
        kind = BatchInput.Kind.Name(entry.kind)
        where = f"batch_input {list(entry.target_name)} ({kind})"
        if entry.kind not in _ONE_SOURCE or len(entry.source_input) != 1:
            found.append(
                error(name, "batch-input", f"{where} has sources {list(entry.source_input)}", "name one")
            )
        unknown = [s for s in entry.source_input if s not in inputs]
        if unknown:
            found.append(
                error(
                    name,
                    "batch-input",
                    f"{where} reads source_input {unknown}, which is not an input of the model "
                    f"(inputs: {inputs})",
                    "set source_input to the name of the input it describes",
                )
            )
        if entry.data_type not in _BATCH_INPUT_TYPES:
            found.append(
                error(name, "batch-input", f"{where} is {type_name(entry.data_type)}", "use TYPE_INT32")
            )
        targets += list(entry.target_name)
    clashes = sorted({t for t in targets if t in inputs or targets.count(t) > 1})
    if clashes:
        found.append(
            error(
                name,
                "batch-input",
                f"batch_input target_name {clashes} is also an input or another batch input",
                "give each batch input a name of its own, the graph's name for it",
            )
        )
    return found


def ragged_inputs(name: str, config: ModelConfig, *, ensemble: bool) -> list[Finding]:
    """A ragged input belongs to a batching model that can tell where each request's items start."""
    ragged = [tensor.name for tensor in config.input if tensor.allow_ragged_batch]
    if not ragged:
        return []
    if ensemble:  # server #8653: the ensemble scheduler ignores the flag
        return [
            warning(
                name,
                "ragged-ensemble",
                f"inputs {ragged} of an ensemble set allow_ragged_batch, which ensembles ignore",
                "set allow_ragged_batch on the step that batches (the exported model) instead",
            )
        ]
    if config.max_batch_size < 1:
        return [
            warning(
                name,
                "ragged-unbatched",
                f"inputs {ragged} set allow_ragged_batch but max_batch_size is {config.max_batch_size}",
                "set max_batch_size > 0 or drop allow_ragged_batch",
            )
        ]
    described = {source for entry in config.batch_input for source in entry.source_input}
    return [
        warning(
            name,
            "ragged-boundaries",
            f"ragged input {tensor} reaches the model as one concatenated vector, but no batch_input "
            "tells it where each request's items start",
            f'add batch_input {{ kind: BATCH_ACCUMULATED_ELEMENT_COUNT source_input: "{tensor}" ... }} '
            "(or an item shape kind) and read it in the model",
        )
        for tensor in ragged
        if tensor not in described
    ]


def warmups(name: str, config: ModelConfig, folder: Path, *, ensemble: bool) -> list[Finding]:
    """Each warm-up sample names every input, in its datatype, with dims inside the config's and all of
    them given, within max_batch_size, its data file long enough (server #1795, #1796)."""
    if ensemble and config.model_warmup:
        return [error(name, "warmup", "an ensemble has model_warmup", "warm up each step instead")]
    found = []
    for sample in config.model_warmup:
        found += _warmup_sample(name, config, folder, sample)
    return found


def _warmup_sample(name: str, config: ModelConfig, folder: Path, sample) -> list[Finding]:
    where = f"warm-up sample {sample.name!r}"
    inputs = {tensor.name: tensor for tensor in config.input}
    found = []
    if config.max_batch_size > 0 and sample.batch_size > config.max_batch_size:
        found.append(
            error(
                name,
                "warmup",
                f"{where} has batch_size {sample.batch_size} > max_batch_size {config.max_batch_size}",
                f"use a batch_size of at most {config.max_batch_size}",
            )
        )
    unknown, missing = sorted(set(sample.inputs) - set(inputs)), sorted(set(inputs) - set(sample.inputs))
    missing = [m for m in missing if not inputs[m].optional]
    if unknown or missing:
        found.append(
            error(
                name,
                "warmup",
                f"{where} gives inputs {sorted(sample.inputs)}; the model's inputs are {sorted(inputs)}",
                f"give exactly the model's inputs (unknown: {unknown}, missing: {missing})",
            )
        )
    for key, value in sample.inputs.items():
        if key in inputs:
            found += _warmup_input(name, where, inputs[key], value, folder)
    return found


def _warmup_input(name: str, where: str, tensor: ModelInput, value, folder: Path) -> list[Finding]:
    found = []
    if value.data_type != tensor.data_type:
        found.append(
            error(
                name,
                "warmup",
                f"{where}: input {tensor.name} is {type_name(value.data_type)}, the model's is "
                f"{type_name(tensor.data_type)}",
                f"set data_type: {type_name(tensor.data_type)}",
            )
        )
    config_dims, dims = list(tensor.dims), list(value.dims)
    fits = tensor.allow_ragged_batch or (
        len(dims) == len(config_dims) and all(c in (-1, d) for c, d in zip(config_dims, dims, strict=True))
    )
    if -1 in dims or not fits:
        found.append(
            error(
                name,
                "warmup",
                f"{where}: input {tensor.name} has dims {dims_text(dims)}, the config's are "
                f"{dims_text(config_dims)}",
                "give every axis a size, each fixed one as the config states it",
            )
        )
    if value.WhichOneof("input_data_type") is None:
        found.append(error(name, "warmup", f"{where}: input {tensor.name} has no data", "set zero_data"))
    elif value.WhichOneof("input_data_type") == "input_data_file":
        found += _warmup_file(name, where, tensor, value, folder / WARMUP_FOLDER / value.input_data_file)
    return found


def _warmup_file(name: str, where: str, tensor: ModelInput, value, path: Path) -> list[Finding]:
    if not path.is_file():
        return [
            error(
                name,
                "warmup",
                f"{where}: input {tensor.name} reads {path}, which does not exist",
                f"write it into the model's {WARMUP_FOLDER}/ folder or use zero_data",
            )
        ]
    needed = math.prod(value.dims) * _ELEMENT_BYTES.get(value.data_type, 0)
    size = path.stat().st_size
    if size >= needed:
        return []
    return [
        error(
            name,
            "warmup",
            f"{where}: input {tensor.name} needs {needed} bytes for dims {dims_text(value.dims)}, "
            f"{path.name} holds {size}",
            "write a data file of the sample's full size or reduce its dims",
        )
    ]
