"""A TorchScript file's precision variants, for every kind that serves one.

fp32 and bf16 for a CPU (bf16 where it has bf16 instructions: export/precision/device.py); float32, bf16 and
fp16 on CUDA, each run as the libtorch backend serves it, with its TF32 convolutions and strict products
(export/precision/cuda_runtime.py). What a file holds and how it is written is the kind's: this module only
names the variants and says which dtype on which device each one writes.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from export.precision.cuda_runtime import LIBTORCH, with_tf32
from export.precision.selection import Runner, Variant

# (file, torch dtype name such as "bfloat16", device) -> a runner on the TorchScript file written there
TorchScriptWriter = Callable[[Path, str, str], Runner]


def torchscript_file_variants(
    *,
    fp32: Callable[[Path], Runner],
    fp32_cuda: Callable[[Path], Runner],
    write: TorchScriptWriter,
    bf16_cpu_name: str = "torchscript-bf16",
) -> list[Variant]:
    """fp32 and bf16 on the CPU, then float32, bf16 and fp16 on CUDA. ``fp32(path)`` writes the float32
    file and verifies it against eager; ``fp32_cuda(path)`` writes the float32 file served on CUDA and
    returns a runner on the GPU; ``write(path, dtype, device)`` writes a reduced-precision file."""

    def written(dtype: str, device: str) -> Callable[[Path], Runner]:
        return lambda path: write(path, dtype, device)

    def cuda(name: str, precision: str, build: Callable[[Path], Runner]) -> Variant:
        return Variant(
            name=name,
            precision=precision,
            device="cuda",
            build=lambda path: with_tf32(build(path), LIBTORCH),
            tf32=LIBTORCH,
        )

    return [
        Variant(name="torchscript-fp32", precision="fp32", device="cpu", build=fp32),
        Variant(name=bf16_cpu_name, precision="bf16", device="cpu", build=written("bfloat16", "cpu")),
        cuda("torchscript-fp32-cuda", "fp32", fp32_cuda),
        cuda("torchscript-bf16-cuda", "bf16", written("bfloat16", "cuda")),
        cuda("torchscript-fp16-cuda", "fp16", written("float16", "cuda")),
    ]
