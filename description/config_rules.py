"""What every generated config of the project has, beside what its description states: the one source of
the project-wide rules, and of the reasons the generated files give for them.

- Every batching model has a bounded queue that rejects past its limits (docs/failure-modes.md), and so
  at least two instances in each instance group (:func:`check_queue_instances` says why).
- A native model warms up every batch size its batcher forms (zeros), or, with a ragged token input, one
  sentence and the largest batch of the longest texts (real ids from its ``warmup/`` folder).
- TorchScript runs with ``DISABLE_OPTIMIZED_EXECUTION`` (and without JIT profiling when ragged).
- An ONNX file on a GPU states its TF32 mode (onnxruntime's ``use_tf32``): on where the description allows
  tf32 on CUDA, off otherwise; the export gates the file in that mode (export/precision/cuda_runtime.py).
- The image preprocessing model decodes on the host CPU, does not wait for a batch, guards against
  decompression bombs and oversized uploads, and holds at most 64 requests for 2 s.
- An ensemble takes its first step's inputs and its last step's outputs; each step's outputs feed the
  next step's inputs in order, and its max_batch_size is the smallest of its steps'.

Each builder returns the config (Triton's own protobuf) and its notes: comment text keyed by the line
they stand above (``dynamic_batching``, ``parameters:KEY``, ...; description/generated_configs.py writes
them).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

from tritonclient.grpc import model_config_pb2
from tritonclient.grpc.model_config_pb2 import ModelConfig

from description.config_spec import ImagePreprocessingSpec, ModelSpec, NativeSpec, PythonSpec
from description.errors import DescriptionError
from description.module_spec import DynamicBatching, InstanceGroup
from tritonrepo.files import ONNX_FILENAME, TORCHSCRIPT_FILENAME
from tritonrepo.tensors import TensorSpec

Notes = dict[str, str]
PLATFORMS = {
    "onnx": ("onnxruntime_onnx", ONNX_FILENAME),
    "torchscript": ("pytorch_libtorch", TORCHSCRIPT_FILENAME),
}
SENTENCE_TOKENS = 16  # the ragged warm-up's one sentence
IMAGE_QUEUE = DynamicBatching(
    max_queue_delay_us=0, preferred_batch_sizes=(), max_queue_size=64, queue_timeout_us=2_000_000
)
IMAGE_GUARDS = {"max_image_pixels": "50000000", "max_image_bytes": "16777216"}
REASONS = {
    "parameters:DISABLE_OPTIMIZED_EXECUTION": (
        "The libtorch backend (r24.10, src/libtorch.cc) otherwise lets the profiling executor record and "
        "recompile the graph for each new input shape, and the batcher forms every batch size: each new "
        "size would pay it. The graph is frozen at export, so optimized execution buys nothing here "
        "(docs/measurements.md); the local runner reads the same parameters."
    ),
    "parameters:ENABLE_JIT_PROFILING": (
        "With ragged batching nearly every batch has a new total token count: JIT profiling is off too."
    ),
    "parameters:cudnn_conv_algo_search": (
        "HEURISTIC cuDNN algorithm search (onnxruntime backend r24.10, src/onnxruntime.cc): without it the "
        "CUDA provider runs EXHAUSTIVE, benchmarking every algorithm of every convolution the first time it "
        'sees an input shape; "1" makes that a lookup, at the price of cuDNN\'s predicted algorithm instead '
        "of the fastest measured one (not measured here: no GPU on the project's machines)."
    ),
    "parameters:max_image_pixels": (
        "Guard against decompression bombs: a few kilobytes of PNG can declare gigapixels. Images over this "
        "many pixels are refused from their header, before any pixel is decoded (50 MP > any camera photo)."
    ),
    "parameters:max_image_bytes": (
        "Guard against oversized uploads: Triton 2.51 has no request-size flag for HTTP or gRPC (a 300 MB "
        "request went through both), so the limit lives here. 16 MiB holds any camera JPEG; bigger inputs "
        "are refused before decoding (docs/failure-modes.md)."
    ),
    "batch_input": (
        "Filled in by Triton, not sent by clients: the length of every sequence in the batch. The graph "
        "cuts the concatenated token vector by these lengths."
    ),
}


def native_config(
    name: str, file_format: str, spec: NativeSpec, *, longest: int | None, tf32: bool = False
) -> tuple[ModelConfig, Notes]:
    """A served file's config; ``longest``: the most tokens a ragged input's request carries; ``tf32``:
    whether an ONNX file runs its float32 work as TF32 on a GPU (the description allows tf32 on CUDA)."""
    platform, filename = PLATFORMS[file_format]
    changes = spec.by_format.get(file_format)
    batching = spec.dynamic_batching
    if changes is not None and changes.max_queue_delay_us is not None:
        batching = dataclasses.replace(batching, max_queue_delay_us=changes.max_queue_delay_us)
    config = ModelConfig(name=name, platform=platform, default_model_filename=filename)
    notes = _model(config, spec, batching)
    for tensor in config.input:
        if tensor.name in spec.ragged:
            tensor.allow_ragged_batch = True
            config.batch_input.add(
                kind=model_config_pb2.BatchInput.BATCH_ITEM_SHAPE_FLATTEN,
                target_name=[spec.ragged[tensor.name]],
                data_type=model_config_pb2.TYPE_INT32,
                source_input=[tensor.name],
            )
            notes["input"] = (
                "Ragged batching: requests of different lengths are batched together and reach the model "
                "concatenated into one [total tokens] vector, the shape the exported graph takes."
            )
            notes["batch_input"] = REASONS["batch_input"]
    if file_format == "onnx" and _on_gpu(config):
        notes["optimization"] = _use_tf32(config, tf32)
    if file_format == "torchscript":
        config.parameters["DISABLE_OPTIMIZED_EXECUTION"].string_value = "true"
        if spec.ragged:
            config.parameters["ENABLE_JIT_PROFILING"].string_value = "false"
    for key, value in (changes.parameters if changes else {}).items():
        config.parameters[key].string_value = value
    notes.update(
        {
            f"parameters:{key}": REASONS[f"parameters:{key}"]
            for key in config.parameters
            if f"parameters:{key}" in REASONS
        }
    )
    notes["model_warmup"] = (
        _ragged_warmup(config, longest) if spec.ragged else _zeros_warmup(config, spec.inputs)
    )
    check_queue_instances(config)
    return config, notes


def _on_gpu(config: ModelConfig) -> bool:
    """Whether an instance may run on a GPU (no instance group: Triton's default, on the GPUs there are)."""
    gpu = (model_config_pb2.ModelInstanceGroup.KIND_GPU, model_config_pb2.ModelInstanceGroup.KIND_AUTO)
    return not config.instance_group or any(group.kind in gpu for group in config.instance_group)


def _use_tf32(config: ModelConfig, tf32: bool) -> str:
    """onnxruntime's ``use_tf32`` for the CUDA provider, stated; the reason the config gives for it."""
    accelerator = config.optimization.execution_accelerators.gpu_execution_accelerator.add(name="cuda")
    accelerator.parameters["use_tf32"] = "1" if tf32 else "0"
    mode = (
        "TF32 (the description allows tf32 on CUDA)"
        if tf32
        else "strict float32 (the description does not allow tf32 on CUDA)"
    )
    return (
        f"Float32 products and convolutions on the GPU in {mode}: the mode the export gates and times this "
        "file in. onnxruntime's CUDA provider defaults to use_tf32 1; the onnxruntime backend (r24.10, "
        'src/onnxruntime.cc) hands a "cuda" accelerator\'s parameters to the provider as written, the only '
        "way use_tf32 reaches it: of the model's own parameters it passes on only cudnn_conv_algo_search, "
        "gpu_mem_limit, arena_extend_strategy and do_copy_in_default_stream."
    )


def _zeros_warmup(config: ModelConfig, inputs: Sequence[TensorSpec]) -> str:
    for size in range(1, config.max_batch_size + 1):
        warmup = config.model_warmup.add(name=f"zeros_batch_{size}", batch_size=size)
        for decl in inputs:
            sample = warmup.inputs[decl.name]
            sample.data_type = _datatype(decl.datatype)
            sample.dims.extend(1 if d == -1 else d for d in decl.dims)
            sample.zero_data = True
    return (
        f"Every batch size the batcher forms (1 to {config.max_batch_size}), zeros, before the model is "
        "ready: the first client batch of any size finds the backend warm (tests/unit/test_warmup.py). "
        "The CPU copies (the local server, the CPU variant) keep only the batch-1 sample "
        "(tritonrepo/container_cpu.py)."
    )


def _ragged_warmup(config: ModelConfig, longest: int | None) -> str:
    (tensor,) = config.input
    if longest is None or tensor.data_type != model_config_pb2.TYPE_INT64:
        raise DescriptionError(
            f"{config.name}: a ragged input warms up with token ids (INT64) up to the longest request its "
            "tokenizer sends; name the tokenizer model as preprocessing.tokenizer_model"
        )
    samples = (
        ("one_sentence", 1, SENTENCE_TOKENS),
        ("largest_batch_longest_text", config.max_batch_size, longest),
    )
    for name, batch_size, tokens in samples:
        sample = config.model_warmup.add(name=name, batch_size=batch_size).inputs[tensor.name]
        sample.data_type = tensor.data_type
        sample.dims.append(tokens)
        sample.input_data_file = f"tokens_{tokens}.int64"
    return (
        f"One sentence, then the largest batch the batcher can form: {config.max_batch_size} requests of "
        f"{longest} tokens, the tokenizer's max_length. The ids are real text from warmup/ (written by "
        "`python -m export.text_warmup`), never random_data, whose ids would index past the embedding table. "
        "The CPU copies keep only the first sample (tritonrepo/container_cpu.py)."
    )


def python_config(spec: PythonSpec) -> tuple[ModelConfig, Notes]:
    config = ModelConfig(name=spec.model, backend="python")
    notes = _model(config, spec, spec.dynamic_batching)
    for key, value in spec.parameters.items():
        config.parameters[key].string_value = value
    check_queue_instances(config)
    return config, notes


def image_preprocess_config(
    name: str, spec: ImagePreprocessingSpec, *, pixels: TensorSpec, max_batch_size: int
) -> tuple[ModelConfig, Notes]:
    """The Python model that decodes, resizes, crops and normalises for a classifier taking ``pixels``."""
    batching = dataclasses.replace(IMAGE_QUEUE, preferred_batch_sizes=spec.preferred_batch_sizes)
    reserved = spec.host_cores_reserved
    host_cores = {} if reserved is None else {HOST_CORES_RESERVED: str(reserved)}
    model = PythonSpec(
        model=name,
        inputs=(TensorSpec(name="IMAGE_BYTES", datatype="STRING", dims=(1,)),),
        outputs=(TensorSpec(name="PIXELS", datatype=pixels.datatype, dims=pixels.dims),),
        max_batch_size=max_batch_size,
        dynamic_batching=batching,
        instance_groups=(InstanceGroup(kind="KIND_CPU", count=spec.instances),),
        about=spec.about,
        parameters={
            "resize_shorter_px": str(spec.resize_shorter_px),
            "mean_rgb": ",".join(f"{v:g}" for v in spec.mean_rgb),
            "std_rgb": ",".join(f"{v:g}" for v in spec.std_rgb),
            **IMAGE_GUARDS,
            **host_cores,
        },
    )
    config, notes = python_config(model)
    notes["instance_group"] = (
        "Decoding runs on the host CPU (Pillow and numpy), even on a GPU host: the GPU is left to the "
        "classifier; each instance is a stub process of its own, so instances decode on separate cores. "
        + QUEUE_INSTANCES_NOTE
    )
    if host_cores:
        notes[f"parameters:{HOST_CORES_RESERVED}"] = HOST_CORES_NOTE
    notes.update({key: REASONS[key] for key in ("parameters:max_image_pixels", "parameters:max_image_bytes")})
    return config, notes


HOST_CORES_RESERVED = "host_cores_reserved"
HOST_CORES_NOTE = (
    "On a GPU host the count above is a floor: at start-up the server's command "
    "(tritonrepo/host_instances.py) gives this model the cores the server may use less this many, the "
    "others' share (Triton's front ends, the classifier's and the postprocessing's instances). Decoding "
    "is the image service's CPU-bound step there: on a 16-core H200 host 2 instances served 462 images/s "
    "at 64 in flight, 14 served 1,730 (docs/measurements.md). A CPU-served copy drops this parameter, "
    "since there the classifier needs the same cores."
)


# Triton's dynamic batcher (core r24.10 to today, src/dynamic_batch_scheduler.cc and rate_limiter.cc):
# any default_queue_policy turns off its payload prefetching, and then a new request wakes the batcher
# only if an instance is waiting for work at that instant. A request that arrives while the one instance
# is still finishing the previous batch (its responses already sent) is not picked up until the batcher's
# idle poll, 500 ms later. A second instance is idle exactly then.
QUEUE_MIN_INSTANCES = 2  # per instance group of a model with a bounded queue (QUEUE_INSTANCES_NOTE)
QUEUE_INSTANCES_NOTE = (
    "At least two instances, as every model with a bounded queue: with one, a request that arrives while it "
    "finishes the previous batch waits for Triton's batcher to poll, 500 ms later (docs/measurements.md, "
    '"The queue policy\'s stall").'
)


def check_queue_instances(config: ModelConfig) -> None:
    """A model with a bounded queue needs at least two instances in each instance group."""
    if not config.dynamic_batching.HasField("default_queue_policy"):
        return
    counts = [group.count for group in config.instance_group] or [1]
    if min(counts) < QUEUE_MIN_INSTANCES:
        raise DescriptionError(
            f"{config.name}: an instance group of {min(counts)} instance(s) with a bounded queue. "
            f"{QUEUE_INSTANCES_NOTE} Set count: {QUEUE_MIN_INSTANCES} (or more) in its instance_groups."
        )


def ensemble_config(name: str, steps: Sequence[ModelConfig], *, about: str) -> tuple[ModelConfig, Notes]:
    """A chain: each step's outputs are the next step's inputs, by position."""
    config = ModelConfig(name=name, platform="ensemble", max_batch_size=min(s.max_batch_size for s in steps))
    config.input.extend(steps[0].input)
    for tensor in steps[-1].output:
        config.output.add(name=_stem(tensor.name), data_type=tensor.data_type, dims=tensor.dims)
    feeding = {tensor.name: tensor.name for tensor in steps[0].input}
    for position, step in enumerate(steps):
        if position and len(step.input) != len(feeding):
            raise DescriptionError(
                f"ensemble {name}: {steps[position - 1].name} has {len(feeding)} outputs and the next step, "
                f"{step.name}, {len(step.input)} inputs; chain models whose outputs are the next one's inputs"
            )
        added = config.ensemble_scheduling.step.add(model_name=step.name, model_version=-1)
        for tensor, value in zip(step.input, feeding.values(), strict=True):
            added.input_map[tensor.name] = value
        last = position == len(steps) - 1
        feeding = {t.name: _stem(t.name) if last else _stem(t.name).lower() for t in step.output}
        added.output_map.update(feeding)
    chain = " -> ".join(step.name for step in steps)
    return config, {
        "header": f"{about}: {chain}." if about else f"{chain}.",
        "ensemble_scheduling": (
            "Triton moves the tensors between the steps in memory; each step batches with its own dynamic "
            "batcher (an ensemble has no dynamic_batching of its own). max_batch_size is the smallest of "
            "the steps', so a full batch flows through the chain."
        ),
    }


def _stem(name: str) -> str:
    """A tensor name without libtorch's ``__<index>`` suffix."""
    return re.sub(r"__\d+$", "", name)


def _model(config: ModelConfig, spec: ModelSpec, batching: DynamicBatching) -> Notes:
    """The fields every non-ensemble model has: tensors, batching, its bounded queue, instances."""
    config.max_batch_size = spec.max_batch_size
    for tensor in spec.inputs:
        config.input.add(name=tensor.name, data_type=_datatype(tensor.datatype), dims=tensor.dims)
    for tensor in spec.outputs:
        config.output.add(name=tensor.name, data_type=_datatype(tensor.datatype), dims=tensor.dims)
    config.dynamic_batching.preferred_batch_size.extend(batching.preferred_batch_sizes)
    config.dynamic_batching.max_queue_delay_microseconds = batching.max_queue_delay_us
    policy = config.dynamic_batching.default_queue_policy
    policy.max_queue_size = batching.max_queue_size
    policy.default_timeout_microseconds = batching.queue_timeout_us
    policy.timeout_action = model_config_pb2.ModelQueuePolicy.REJECT
    policy.allow_timeout_override = True
    for group in spec.instance_groups:
        config.instance_group.add(
            count=group.count, kind=model_config_pb2.ModelInstanceGroup.Kind.Value(group.kind)
        )
    delay = batching.max_queue_delay_us
    return {
        "header": spec.about,
        "dynamic_batching": (
            f"Batches of up to {spec.max_batch_size}: the batcher waits at most {_duration(delay)} for more "
            "requests and dispatches as soon as it holds a preferred size."
            if delay
            else f"Batches of up to {spec.max_batch_size}, with no waiting: under load requests queue while "
            "a batch runs and leave together, up to a preferred size; a lone request goes at once."
        ),
        "instance_group": QUEUE_INSTANCES_NOTE,
        "default_queue_policy": (
            f"Overload: a full queue ({batching.max_queue_size} requests) rejects at once (HTTP 503 / gRPC "
            f"UNAVAILABLE) and a request still queued after {_duration(batching.queue_timeout_us)} is "
            "rejected (timeout_action REJECT, the default); the client retries both with backoff "
            "(docs/failure-modes.md)."
        ),
    }


def _datatype(datatype: str) -> int:
    return model_config_pb2.DataType.Value(f"TYPE_{datatype}")


def _duration(microseconds: int) -> str:
    return f"{microseconds / 1000:g} ms" if microseconds < 1_000_000 else f"{microseconds / 1_000_000:g} s"
