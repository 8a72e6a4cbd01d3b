"""Derive the local model repository from the deployable one.

``model_repository/`` is written for NVIDIA's container on a GPU host: ONNX and TorchScript models use
the onnxruntime and libtorch backends on ``KIND_GPU``. Those backends do not ship in the pip wheel, so the
local repository is generated, never hand-copied: each native model becomes a Python-backend model with
the same name, inputs, outputs, max_batch_size and dynamic batching that runs the same exported file;
``KIND_GPU`` becomes ``KIND_CPU`` when no GPU is present, and then a native model keeps only its
smallest warm-up batch; a native model's batcher takes the settings the export chose from its measured
batch-cost curve where none is stated by hand (tritonrepo/recorded_batching.py), each with its reason
as a comment; everything else is linked unchanged.
"""

from __future__ import annotations

import fnmatch
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

from tritonclient.grpc.model_config_pb2 import ModelConfig

from tritonrepo import cpu_overlay
from tritonrepo.configs import ModelEntry, instance_count, intra_op_layout, load_repository
from tritonrepo.container_cpu import CPU_ONNXRUNTIME_PARAMETERS, keep_smallest_warmup, set_default_parameters
from tritonrepo.files import EXPORT_OUTPUTS, NATIVE_RUNTIMES
from tritonrepo.host_instances import scale_parsed_config, usable_cores
from tritonrepo.paths import PRECISION_RECORDS
from tritonrepo.recorded_batching import HandStated, apply_recorded, read_recorded
from tritonrepo.writer import LINK, DerivedModel, write_repository

logger = logging.getLogger(__name__)

MADE_BY = "`python -m tritonrepo derive`"


@dataclass(kw_only=True)
class DeriveResult:
    written: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # model name -> reason


def derive_local_config(
    entry: ModelEntry,
    *,
    gpu_available: bool,
    intra_op_threads: int | None,
    records: Path | None = PRECISION_RECORDS,
) -> ModelConfig:
    """The configuration that serves ``entry`` in the local tritonserver.

    Without a GPU, the CPU settings a tuning adopted (``local_cpu.pbtxt`` beside config.pbtxt, see
    tritonrepo/cpu_overlay.py) replace the deployable ones before the threads are divided. The batcher's
    settings the export chose from its measured curve (under ``records``; None: none) replace those not
    stated by hand (tritonrepo/recorded_batching.py).
    """
    return _derive(entry, gpu_available=gpu_available, intra_op_threads=intra_op_threads, records=records)[0]


def _derive(
    entry: ModelEntry, *, gpu_available: bool, intra_op_threads: int | None, records: Path | None
) -> tuple[ModelConfig, dict[str, str]]:
    """:func:`derive_local_config`, and the comments on the batcher's numbers (field path -> comment)."""
    config = ModelConfig()
    config.CopyFrom(entry.config)
    config.name = entry.name
    overlay = None if gpu_available else cpu_overlay.read_overlay(entry.path)
    if overlay is not None:
        cpu_overlay.apply_overlay(config, overlay)
    comments: dict[str, str] = {}
    recorded = (
        read_recorded(entry.name, records, device="cuda" if gpu_available else "cpu")
        if entry.is_native and records is not None
        else None
    )
    if recorded is not None:
        comments = apply_recorded(config, recorded, _hand_stated(entry, overlay, gpu_available=gpu_available))
    if entry.is_native:
        _serve_in_python_backend(config, entry, overlay, intra_op_threads)
    if not gpu_available:
        for group in config.instance_group:
            if group.kind == group.KIND_GPU:
                group.kind = group.KIND_CPU
                del group.gpus[:]
        if entry.is_native:
            keep_smallest_warmup(config)
            if config.parameters["runtime"].string_value == "onnxruntime":
                set_default_parameters(config, CPU_ONNXRUNTIME_PARAMETERS)
    # On a GPU host some CPU steps take the cores the GPU leaves; without one the model needs them.
    scale_parsed_config(config, usable_cores() if gpu_available else None)
    return config, comments


def _hand_stated(entry: ModelEntry, overlay: ModelConfig | None, *, gpu_available: bool) -> HandStated:
    """Where the batcher's values were stated by hand: on a GPU host the description (its config.pbtxt,
    which always states a delay), without a GPU the CPU overlay (which states the delay whenever it has a
    dynamic_batching section); the deployable values are a GPU's, never the CPU's by hand."""
    if gpu_available:
        described = f"the description ({entry.path.name}/config.pbtxt)"
        stated = bool(entry.config.dynamic_batching.preferred_batch_size)
        return HandStated(preferred=described if stated else "", delay=described)
    if overlay is None or not overlay.HasField("dynamic_batching"):
        return HandStated()
    where = f"{entry.path.name}/{cpu_overlay.FILENAME}"
    return HandStated(preferred=where if overlay.dynamic_batching.preferred_batch_size else "", delay=where)


def _serve_in_python_backend(
    config: ModelConfig, entry: ModelEntry, overlay: ModelConfig | None, intra_op_threads: int | None
) -> None:
    """Make ``config`` (a native model's) run its exported file in the Python backend's runner."""
    runtime = NATIVE_RUNTIMES[entry.kind][0]
    filename = entry.model_filename
    assert filename is not None
    config.platform = ""
    config.backend = "python"
    config.default_model_filename = ""
    config.ClearField("optimization")  # TensorRT/ONNX accelerators have no meaning in the Python backend
    config.parameters["runtime"].string_value = runtime
    config.parameters["model_filename"].string_value = filename
    adopted = config.parameters["intra_op_threads"].string_value if overlay is not None else ""
    layout = intra_op_layout(
        usable_cores(), instance_count(config), str(intra_op_threads) if intra_op_threads else adopted
    )
    config.parameters["intra_op_threads"].string_value = str(layout.threads)
    if runtime == "onnxruntime" and not layout.spinning:
        config.parameters["intra_op_spinning"].string_value = "false"
    # The local runner refuses a request outside the recorded bounds with an error naming the input,
    # instead of failing inside the runtime.
    bounds = entry.recorded_input_bounds()
    if bounds:
        config.parameters["input_bounds"].string_value = json.dumps(bounds, sort_keys=True)


def derive_repository(
    source: Path,
    target: Path,
    *,
    gpu_available: bool = False,
    intra_op_threads: int | None = None,
    records: Path | None = PRECISION_RECORDS,
) -> DeriveResult:
    """Write ``target`` from ``source``; a model a file of which is missing (an exported file, a Python
    model's tokenizer or labels: :func:`why_files_missing`) is skipped with a reason and a warning, and so
    is every ensemble that needs it, so that the server starts with what is there. ``records``: the
    export's records, whose batching choices apply (:func:`derive_local_config`)."""
    models = load_repository(source)
    result = DeriveResult()
    for name, entry in models.items():
        reason = why_files_missing(entry)
        if reason:
            result.skipped[name] = reason
    _skip_broken_ensembles(models, result)

    derived = []
    for name, entry in models.items():
        if name in result.skipped:
            logger.warning("not serving %s locally: %s", name, result.skipped[name])
            continue
        config, comments = _derive(
            entry, gpu_available=gpu_available, intra_op_threads=intra_op_threads, records=records
        )
        derived.append(DerivedModel(entry=entry, config=config, comments=comments))
    result.written = list(write_repository(source, target, derived, placement=LINK, made_by=MADE_BY))
    return result


def why_files_missing(entry: ModelEntry) -> str:
    """Why ``entry`` cannot load, when a file it loads is missing ("" when none is): the export's files
    (an exported model, the tokenizer file) and the files a Python model names in ``*_file`` parameters."""
    missing = {path: source for path, source in entry.required_files().items() if not path.exists()}
    exported = [str(path) for path, source in missing.items() if _is_export_output(path, source)]
    own = [
        f"{path} (its parameter {source})"
        for path, source in missing.items()
        if not _is_export_output(path, source)
    ]
    reasons = []
    if exported:
        reasons.append(f"exported file(s) missing: {', '.join(exported)} (run `python -m export`)")
    if own:
        reasons.append(f"file(s) missing: {', '.join(own)}: put them there or correct the parameter")
    return "; ".join(reasons)


def _is_export_output(path: Path, source: str) -> bool:
    return source == "exported" or any(fnmatch.fnmatch(path.name, pattern) for pattern in EXPORT_OUTPUTS)


def _skip_broken_ensembles(models: dict[str, ModelEntry], result: DeriveResult) -> None:
    changed = True
    while changed:  # an ensemble of ensembles is skipped when any model below it is
        changed = False
        for name, entry in models.items():
            if entry.kind != "ensemble" or name in result.skipped:
                continue
            absent = [step for step in entry.ensemble_steps() if step not in models or step in result.skipped]
            if absent:
                result.skipped[name] = f"its step(s) {', '.join(absent)} are not served"
                changed = True


def gpu_is_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())
