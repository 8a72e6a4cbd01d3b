"""The copy of the deployable repository for NVIDIA's container on a host without a GPU.

``derive`` (tritonrepo/derive.py) turns native models into Python-backend models for the pip-wheel
server. The container has the native onnxruntime and libtorch backends, so on a host without a GPU
it needs a different copy: every model unchanged except ``instance_group`` ``KIND_GPU`` -> ``KIND_CPU``
(and the GPU-only settings that come with it), each native model's thread pools sized so that its
instances share the cores instead of each taking all of them, and only its smallest warm-up kept.
docker-compose.cpu.yml runs this as a one-shot step:

    python -m tritonrepo cpu-copy --source model_repository --target build/cpu_repository

Files are copied, not linked (:data:`tritonrepo.writer.COPY`): the target is mounted into a container on
its own, where links that point back into model_repository/ would dangle.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path

from tritonclient.grpc.model_config_pb2 import ModelConfig

from tritonrepo.configs import ModelEntry, instance_count, load_repository, threads_per_instance
from tritonrepo.files import NATIVE_RUNTIMES
from tritonrepo.host_instances import scale_parsed_config, usable_cores
from tritonrepo.writer import COPY, DerivedModel, write_repository

# The parameters each native backend reads for its thread pools (read in the r24.10 sources):
# onnxruntime_backend src/onnxruntime.cc (per session; 0 or absent = onnxruntime picks, i.e. every core)
# and pytorch_backend src/libtorch.cc (at::set_num_threads / set_num_interop_threads; absent = every core).
THREAD_PARAMETERS = {
    "onnxruntime": ("intra_op_thread_count", "inter_op_thread_count"),
    "torchscript": ("INTRA_OP_THREAD_COUNT", "INTER_OP_THREAD_COUNT"),
}
MADE_BY = "`python -m tritonrepo cpu-copy`"


@dataclass(kw_only=True)
class CpuCopyResult:
    written: list[str] = field(default_factory=list)
    moved_to_cpu: list[str] = field(default_factory=list)  # models that had a KIND_GPU instance group


# onnxruntime on a CPU: a memory pattern is planned and kept for every new input shape, on top of the
# arena that grows to the largest batch seen, and the dynamic batcher forms up to max_batch_size shapes.
# Measured in one process (EfficientNet-Lite0, 1 thread, 14 batches of sizes 1 to 16 in mixed order):
# resident memory 125 -> 509 MB with the defaults and still 505 MB back at batch 1; 124 -> 415 MB without
# the memory pattern; images/s at batch 8 within the (large) noise of each other. The onnxruntime
# backend reads this parameter (src/onnxruntime.cc); the local runner reads the same name.
CPU_ONNXRUNTIME_PARAMETERS = {"enable_mem_pattern": "false"}


def cpu_config(entry: ModelEntry, *, cores: int) -> ModelConfig:
    """``entry``'s configuration with every instance group on the CPU and no GPU-only accelerator.

    A native model's instances divide ``cores`` between them (intra-op threads = cores // instances,
    inter-op threads 1), as the local runner does: several pools that each take every core slow each
    other down.
    """
    if cores < 1:
        raise ValueError(f"cores must be at least 1, got {cores}")
    config = ModelConfig()
    config.CopyFrom(entry.config)
    for group in config.instance_group:
        if group.kind in (group.KIND_GPU, group.KIND_AUTO):
            group.kind = group.KIND_CPU
        del group.gpus[:]
    # TensorRT / CUDA execution accelerators need a GPU; the CPU ones (e.g. openvino) stay.
    config.optimization.execution_accelerators.ClearField("gpu_execution_accelerator")
    if not config.optimization.execution_accelerators.ListFields():
        config.optimization.ClearField("execution_accelerators")
    if not config.optimization.ListFields():
        config.ClearField("optimization")
    scale_parsed_config(config, None)  # the model needs the cores the preprocessing would take on a GPU host
    if entry.is_native:
        runtime = NATIVE_RUNTIMES[entry.kind][0]
        intra, inter = THREAD_PARAMETERS[runtime]
        config.parameters[intra].string_value = str(threads_per_instance(cores, instance_count(config)))
        config.parameters[inter].string_value = "1"
        if runtime == "onnxruntime":
            set_default_parameters(config, CPU_ONNXRUNTIME_PARAMETERS)
        keep_smallest_warmup(config)
    return config


def keep_smallest_warmup(config: ModelConfig) -> None:
    """Keep only the warm-up samples of the smallest batch size.

    The deployable configs warm up every batch size the batcher forms, for the GPU's per-shape
    searches and compilations. On a CPU neither onnxruntime nor libtorch without optimized execution
    has one worth that price: every size from 1 to 64 costs ~2,000 images of compute per instance
    (15-25 s per instance on 2 cores) at each start.
    """
    if not config.model_warmup:
        return
    smallest = min(sample.batch_size for sample in config.model_warmup)
    kept = [copy.deepcopy(sample) for sample in config.model_warmup if sample.batch_size == smallest]
    del config.model_warmup[:]
    config.model_warmup.extend(kept)


def set_default_parameters(config: ModelConfig, defaults: dict[str, str]) -> None:
    """Add each parameter the configuration does not set already (its own value wins)."""
    for key, value in defaults.items():
        if key not in config.parameters:
            config.parameters[key].string_value = value


def write_cpu_copy(source: Path, target: Path, *, cores: int | None = None) -> CpuCopyResult:
    """Copy the repository at ``source`` to ``target`` with every model moved to the CPU.

    ``cores``: the CPU cores the server will have (default: this machine's).

    Native models keep their platform; exported files are copied as they are. A model whose exported
    file is missing is copied anyway: the server then reports it by name when it fails to load.
    """
    models = load_repository(source)
    cores = cores or usable_cores()
    result = CpuCopyResult()
    copies = [DerivedModel(entry=entry, config=cpu_config(entry, cores=cores)) for entry in models.values()]
    result.written = list(write_repository(source, target, copies, placement=COPY, made_by=MADE_BY))
    result.moved_to_cpu = [model.entry.name for model in copies if model.config != model.entry.config]
    return result
