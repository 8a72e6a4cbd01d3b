"""How a variant's file runs on a CUDA GPU: which float32 work runs as TF32, and onnxruntime's CUDA
provider options.

TF32 (compute capability 8.0 and later) runs float32 products and convolutions with 10-bit mantissas on
tensor cores. Each variant is gated in the mode the server will run it in (:func:`serving_mode`):

- An ONNX file runs with its config's CUDA provider options (:func:`provider_options`, read as Triton's
  onnxruntime backend reads them); ``use_tf32`` among them, onnxruntime's default 1 where the config is
  silent. The generated configs state it (description/config_rules.py), so the config is the one switch: its
  float32 variant is ``tf32`` or ``fp32`` by what the config serves, and every ONNX variant on CUDA is
  gated and timed in sessions with exactly those options.
- A TorchScript file runs in the libtorch backend, which has no TF32 switch (:data:`LIBTORCH`): torch's
  defaults, TF32 for cuDNN convolutions and strict float32 for cuBLAS products. Every TorchScript variant
  on CUDA is gated and timed with torch's switches set so (:func:`tf32_mode`, :func:`with_tf32`); there is
  no TF32 TorchScript variant to choose, since libtorch cannot serve another mode.

Gates compare against eager float32 computed on the CPU, where there is no TF32.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from tritonclient.grpc.model_config_pb2 import ModelConfig

from export.common import ExportError

# Triton's onnxruntime backend r24.10 (src/onnxruntime.cc, where it builds the CUDA provider's options)
# hands every parameter of a gpu_execution_accelerator named "cuda" to the provider as written, key and
# value: the one way use_tf32 reaches onnxruntime. Of the config's own ``parameters`` it reads only these
# four, after the accelerator's and over them: integer codes -> onnxruntime's names, or the value as
# given; with any parameter present, a missing one is set to the backend's default (onnxruntime's too).
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


def served_tf32(options: Mapping[str, str]) -> bool:
    """Whether Triton runs an ONNX model with TF32, given its config's provider options."""
    return options.get("use_tf32", ONNXRUNTIME_TF32_DEFAULT) != "0"


@dataclass(frozen=True, kw_only=True)
class Tf32Mode:
    """Which float32 work a CUDA runtime runs as TF32: cuBLAS products (``matmul``), cuDNN convolutions."""

    matmul: bool
    cudnn: bool

    def as_dict(self) -> dict[str, bool]:
        return {"tf32_matmul": self.matmul, "tf32_cudnn": self.cudnn}


# The libtorch backend r24.10 (pytorch_backend src/libtorch.cc) sets neither of torch's TF32 switches, so
# a TorchScript model runs with libtorch's defaults: TF32 for cuDNN convolutions, none for cuBLAS products.
LIBTORCH = Tf32Mode(matmul=False, cudnn=True)
FILE_FORMATS = ("onnx", "torchscript")


def serving_mode(
    file_format: str, cuda_options: Mapping[str, str] | None = None, *, tf32_cores: bool = True
) -> Tf32Mode:
    """The TF32 mode Triton's backend runs a file of ``file_format`` in on CUDA: libtorch's fixed one, or
    onnxruntime's ``use_tf32`` (products and convolutions alike) from the config's provider options, which
    runs strict float32 on a GPU without TF32 cores (``tf32_cores`` False: before compute capability 8.0)."""
    if file_format not in FILE_FORMATS:
        raise ValueError(f"file format {file_format!r} is not one of {FILE_FORMATS}")
    if file_format == "torchscript":
        return LIBTORCH
    on = served_tf32(cuda_options or {}) and tf32_cores
    return Tf32Mode(matmul=on, cudnn=on)


@contextlib.contextmanager
def tf32_mode(mode: Tf32Mode) -> Iterator[None]:
    """torch's TF32 switches for cuBLAS products and cuDNN convolutions set as ``mode``, then restored."""
    import torch

    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    before = (matmul.allow_tf32, cudnn.allow_tf32)
    matmul.allow_tf32, cudnn.allow_tf32 = mode.matmul, mode.cudnn
    try:
        yield
    finally:
        matmul.allow_tf32, cudnn.allow_tf32 = before


def with_tf32(runner: Runner, mode: Tf32Mode) -> Runner:
    """``runner`` with torch's TF32 switches set as ``mode`` on every call (gate and timing)."""

    def run(batch: Any) -> Any:
        with tf32_mode(mode):
            return runner(batch)

    return run
