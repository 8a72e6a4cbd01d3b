"""How a variant's file runs on a CUDA GPU: TF32 on or off, and onnxruntime's CUDA provider options.

TF32 (compute capability 8.0 and later) runs float32 products and convolutions with 10-bit mantissas on
tensor cores. It is on by default in two of the runtimes that serve our files: onnxruntime's CUDA provider
(``use_tf32`` defaults to 1) and libtorch's cuDNN convolutions (``torch.backends.cudnn.allow_tf32``
defaults to True; cuBLAS products default to off). So a strict float32 variant on CUDA runs with TF32
switched off (:func:`tf32_mode`, :func:`with_tf32`, ``use_tf32 = 0``), and TF32 is a variant of its own,
the same file run with TF32 on, gated against eager float32 (computed on the CPU, where there is no TF32)
like bf16 and fp16, timed, and served only if it passes.

An ONNX file is gated in an onnxruntime session with the CUDA provider options the model's config serves
(:func:`provider_options`, read from the config as Triton's onnxruntime backend reads them), plus the
variant's ``use_tf32``. What the server runs is recorded for each candidate; where the config serves
another TF32 setting than the variant chosen (:func:`served_tf32`), the export says so (the config, the
source of truth, is never written by the export).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from tritonclient.grpc.model_config_pb2 import ModelConfig

from export.common import ExportError

# Triton's onnxruntime backend (r24.10, src/onnxruntime.cc) reads these from a config's ``parameters``:
# integer codes -> onnxruntime's names, or the value as given; with any parameter present, a missing one
# is set to the backend's default (onnxruntime's own default too).
_CONV_ALGO_SEARCH = {"0": "EXHAUSTIVE", "1": "HEURISTIC", "2": "DEFAULT"}
_ARENA_EXTEND = {"0": "kNextPowerOfTwo", "1": "kSameAsRequested"}
_PARAMETER_DEFAULTS = {
    "cudnn_conv_algo_search": "EXHAUSTIVE",
    "gpu_mem_limit": str(2**64 - 1),
    "arena_extend_strategy": "kNextPowerOfTwo",
    "do_copy_in_default_stream": "1",
}
ONNXRUNTIME_TF32_DEFAULT = "1"  # onnxruntime's CUDA provider: use_tf32 unless the session says 0

Runner = Callable[[Any], Any]


def provider_options(config: ModelConfig) -> dict[str, str]:
    """The CUDA provider options Triton's onnxruntime backend gives a session of this model: the
    ``gpu_execution_accelerator`` named ``cuda`` with its parameters, then the config's ``parameters``
    ``cudnn_conv_algo_search``, ``gpu_mem_limit``, ``arena_extend_strategy`` and
    ``do_copy_in_default_stream`` over them. Options the config leaves to onnxruntime are left out."""
    options: dict[str, str] = {}
    for accelerator in config.optimization.execution_accelerators.gpu_execution_accelerator:
        if accelerator.name == "cuda":
            options.update({key: value for key, value in accelerator.parameters.items() if value})
    parameters = {key: value.string_value for key, value in config.parameters.items()}
    if not parameters:
        return options  # the backend sets none of them: onnxruntime's defaults
    codes = {"cudnn_conv_algo_search": _CONV_ALGO_SEARCH, "arena_extend_strategy": _ARENA_EXTEND}
    for key, default in _PARAMETER_DEFAULTS.items():
        if key in parameters:
            value = parameters[key]
            if key in codes and value not in codes[key]:
                raise ExportError(
                    f"{config.name}: parameter {key} is {value!r}; Triton's onnxruntime backend takes "
                    f"{sorted(codes[key])} ({codes[key]}); fix it in its config.pbtxt"
                )
            options[key] = codes[key][value] if key in codes else value
        elif key in options:
            options[key] = default  # the backend writes its default over the accelerator's value
    return options


def with_use_tf32(options: Mapping[str, str], *, tf32: bool) -> dict[str, str]:
    """``options`` with onnxruntime's ``use_tf32`` set for a variant (1: TF32 on, 0: strict float32)."""
    return {**options, "use_tf32": "1" if tf32 else "0"}


def served_tf32(options: Mapping[str, str]) -> bool:
    """Whether Triton runs an ONNX model with TF32, given its config's provider options."""
    return options.get("use_tf32", ONNXRUNTIME_TF32_DEFAULT) != "0"


def serving_mismatch(runtime: Mapping[str, Any], config: ModelConfig) -> str | None:
    """For the variant chosen for an ONNX model on CUDA (its ``Variant.runtime``): how the config would
    serve it differently from how it was gated (TF32 on or off), with the fix; None when they agree."""
    if not runtime.get("cuda_options"):
        return None
    served, gated = served_tf32(provider_options(config)), bool(runtime["tf32"])
    if served == gated:
        return None
    how = "sets" if "use_tf32" in provider_options(config) else "leaves onnxruntime's default,"
    return (
        f"{config.name}: the variant served was gated with use_tf32 {int(gated)}, but its config {how} "
        f"use_tf32 {int(served)}, so Triton would run it {'with' if served else 'without'} TF32. To serve "
        "what was gated, add to its config.pbtxt: optimization { execution_accelerators { "
        'gpu_execution_accelerator: [ { name: "cuda" parameters { key: "use_tf32" value: '
        f'"{int(gated)}" }} }} ] }} }}'
    )


@contextlib.contextmanager
def tf32_mode(enabled: bool) -> Iterator[None]:
    """torch's TF32 switches for cuBLAS products and cuDNN convolutions, both set, then restored."""
    import torch

    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    before = (matmul.allow_tf32, cudnn.allow_tf32)
    matmul.allow_tf32 = cudnn.allow_tf32 = enabled
    try:
        yield
    finally:
        matmul.allow_tf32, cudnn.allow_tf32 = before


def with_tf32(runner: Runner, *, tf32: bool) -> Runner:
    """``runner`` with torch's TF32 switches set as the variant says on every call (gate and timing)."""

    def run(batch: Any) -> Any:
        with tf32_mode(tf32):
            return runner(batch)

    return run
