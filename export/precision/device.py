"""The device an export is for: the exporting machine's CPU and CUDA GPU, and where the models are served.

A :class:`Capabilities` is detected (:meth:`Capabilities.detect`, what ``python -m export`` does) or
stated (the tests describe a CPU host, a compute capability 7.5 GPU and an 8.0 one). Which precision
variants an export offers follows from it alone (:func:`why_unavailable`):

- served on a CPU: fp32, int8 and, where the CPU has bf16 instructions, bf16, all gated on this CPU;
- served on a GPU: fp32, fp16 and, from compute capability 8.0, bf16 and TF32
(export/precision/cuda_runtime.py),
  all gated on this GPU; never int8 (onnxruntime's CUDA provider multiplies int8 x int8 only, so a u8 x s8
  graph runs on the CPU) and never a file gated on the CPU.

A GPU is served only by an export that ran on a GPU of its class: ``--served-on gpu`` without a CUDA
device here is refused, and the manifest records where each file was gated (:meth:`Capabilities.gated_on`)
for the server's start-up check (deploy/tritonserver/gpu_class_check.py).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from export.common import ExportError
from tritonrepo.choices import check_choice

logger = logging.getLogger(__name__)

SERVED_ON = ("here", "gpu", "cpu")
GPU_BF16_MIN_CAPABILITY = (8, 0)  # Ampere and later compute in bf16; Turing (7.5) and Volta (7.0) do not
GPU_TF32_MIN_CAPABILITY = (8, 0)  # TF32 tensor cores: Ampere and later
CPU_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})
CPU_VNNI_FLAGS = frozenset({"avx512_vnni", "avx_vnni", "amx_int8"})
NO_GPU_FOR_GPU_SERVING = (
    "--served-on gpu needs a CUDA GPU on the exporting machine, and this one has none: the fp16/bf16 files a "
    "GPU serves are gated and timed on that GPU, and an export without one would give a GPU server float32 "
    "files gated on a CPU. Run the export on a GPU of the serving class (the deployments' export steps "
    "reserve one), or export with --served-on cpu for a server without a GPU."
)


@dataclass(frozen=True, kw_only=True)
class CudaDevice:
    """A CUDA GPU: its name and compute capability (its class), and the CUDA and driver versions."""

    name: str
    compute_capability: tuple[int, int]
    cuda_version: str | None = None  # the CUDA runtime torch was built with
    driver_version: str | None = None

    def __post_init__(self) -> None:
        major, minor = self.compute_capability
        if not (isinstance(major, int) and isinstance(minor, int) and major > 0 and minor >= 0):
            raise ValueError(
                f"compute capability must be (major, minor) integers, got {self.compute_capability}"
            )

    @property
    def capability(self) -> str:
        """The compute capability as nvidia-smi writes it ("8.0"): the GPU class files are gated for."""
        return "{}.{}".format(*self.compute_capability)

    @property
    def bf16(self) -> bool:
        return self.compute_capability >= GPU_BF16_MIN_CAPABILITY

    @property
    def tf32(self) -> bool:
        return self.compute_capability >= GPU_TF32_MIN_CAPABILITY

    @classmethod
    def detect(cls) -> CudaDevice | None:
        """The first visible CUDA device (as torch sees it), or None where there is none."""
        import torch

        if not torch.cuda.is_available():
            return None
        major, minor = torch.cuda.get_device_capability(0)
        return cls(
            name=torch.cuda.get_device_name(0),
            compute_capability=(int(major), int(minor)),
            cuda_version=torch.version.cuda,
            driver_version=nvidia_driver_version(),
        )


def nvidia_driver_version(module_version: Path = Path("/sys/module/nvidia/version")) -> str | None:
    """The NVIDIA driver's version, as its loaded kernel module reports it ("580.159.04"; None where no
    NVIDIA module is loaded or the file cannot be read). The server's start-up check asks nvidia-smi."""
    try:
        return Path(module_version).read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


@dataclass(frozen=True, kw_only=True)
class Capabilities:
    """What the exporting machine computes fast (CPU instruction flags, a CUDA GPU) and where the models are
    served: ``served_on`` "here" (a GPU where this machine has one), "gpu" (needs one here) or "cpu"."""

    cpu_flags: frozenset[str]
    cuda: CudaDevice | None = None
    served_on: str = "here"

    def __post_init__(self) -> None:
        check_choice("served_on", self.served_on, SERVED_ON)
        if self.served_on == "gpu" and self.cuda is None:
            raise ExportError(NO_GPU_FOR_GPU_SERVING)

    @property
    def gpu_serves(self) -> bool:
        return self.served_on == "gpu" or (self.served_on == "here" and self.cuda is not None)

    @property
    def tf32_cores(self) -> bool:
        """Whether this machine's GPU runs TF32 (compute capability 8.0 and later)."""
        return self.cuda is not None and self.cuda.tf32

    @property
    def cpu_bf16(self) -> bool:
        return bool(CPU_BF16_FLAGS & self.cpu_flags)

    @property
    def cpu_vnni(self) -> bool:
        return bool(CPU_VNNI_FLAGS & self.cpu_flags)

    @classmethod
    def detect(cls, cpuinfo: Path = Path("/proc/cpuinfo"), *, served_on: str = "here") -> Capabilities:
        return cls(cpu_flags=cpu_flags(cpuinfo), cuda=CudaDevice.detect(), served_on=served_on)

    def as_dict(self) -> dict[str, object]:
        """What decides the variants and their gates (recorded, and part of the exported files'
        fingerprints, so that a file is re-exported when any of it changes)."""
        from export.precision.serving_runtime import SERVING_ONNXRUNTIME

        gpu = self.cuda
        return {
            "cpu_bf16": self.cpu_bf16,
            "cpu_vnni": self.cpu_vnni,
            "cuda": gpu is not None,
            "gpu": None if gpu is None else f"{gpu.name} (compute capability {gpu.capability})",
            "served_on_gpu": self.gpu_serves,
            "serving_onnxruntime": SERVING_ONNXRUNTIME,
        }

    def gated_on(self) -> dict[str, str | None]:
        """Where this export gates its files, for each manifest (read back by the server's start-up
        check, deploy/tritonserver/gpu_class_check.py): the device; for a GPU its name, compute
        capability, CUDA and driver versions; the runtimes that gate (the local ones and the serving
        onnxruntime, export/precision/serving_runtime.py)."""
        import onnxruntime
        import torch

        from export.precision.serving_runtime import SERVING_ONNXRUNTIME

        gpu = self.cuda if self.gpu_serves else None
        return {
            "device": "cpu" if gpu is None else "cuda",
            "gpu_name": gpu.name if gpu else None,
            "compute_capability": gpu.capability if gpu else None,
            "cuda_version": gpu.cuda_version if gpu else None,
            "driver_version": gpu.driver_version if gpu else None,
            "torch": torch.__version__,
            "onnxruntime": onnxruntime.__version__,
            "serving_onnxruntime": SERVING_ONNXRUNTIME,
        }


def why_unavailable(precision: str, device: str, capabilities: Capabilities) -> str | None:
    """Why a (precision, device) variant is not offered for this export, or None when it is.

    A variant is gated and timed where it runs: CUDA variants only when a GPU serves the models (and this
    machine has it), CPU variants only when a CPU does.
    """
    if device == "cuda":
        return _why_not_on_the_gpu(precision, capabilities)
    if capabilities.gpu_serves:
        return "a GPU serves this model: a file gated and timed on this CPU is offered only for CPU serving"
    if precision == "fp16":
        return "fp16 runs only on a GPU here (CPUs without fp16 arithmetic emulate it slowly)"
    if precision == "tf32":
        return "TF32 is a math mode of NVIDIA GPUs (compute capability 8.0 and later), not of a CPU"
    if precision == "bf16" and not capabilities.cpu_bf16:
        return "the CPU has no bf16 instructions (avx512_bf16 / amx_bf16)"
    return None


def _why_not_on_the_gpu(precision: str, capabilities: Capabilities) -> str | None:
    gpu = capabilities.cuda
    if not capabilities.gpu_serves:
        why = "--served-on cpu" if capabilities.served_on == "cpu" else "this machine has no GPU"
        return f"a CPU serves this model ({why}): CUDA variants are offered only for GPU serving"
    if gpu is None:
        return "no CUDA device"
    if precision == "int8":
        # onnxruntime's CUDA provider multiplies int8 x int8 only: a u8 x s8 product (and the integer ops
        # of a QDQ graph) would run on the CPU beside the GPU, with copies each way.
        return "int8 is never served from a GPU: its integer kernels would run on the CPU"
    if precision == "bf16" and not gpu.bf16:
        return (
            f"{gpu.name} (compute capability {gpu.capability}) has no bf16 arithmetic; bf16 needs compute "
            "capability 8.0 or later"
        )
    if precision == "tf32" and not gpu.tf32:
        return (
            f"{gpu.name} (compute capability {gpu.capability}) has no TF32 tensor cores; TF32 needs "
            "compute capability 8.0 or later"
        )
    return None


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    """The ``flags`` of the first processor in /proc/cpuinfo (empty where there is no such file)."""
    try:
        text = Path(cpuinfo).read_text(encoding="utf-8", errors="replace")
    except OSError:
        logger.warning("cannot read %s; assuming no bf16/VNNI instructions", cpuinfo)
        return frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return frozenset(value.split())
    return frozenset()
