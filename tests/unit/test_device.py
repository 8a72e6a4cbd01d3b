"""The device an export is for decides exactly which precision variants it offers
(export/precision/device.py).

Each described device (a CPU host with and without bf16 instructions, a compute capability 7.5 GPU, an
8.0 and a 9.0 GPU, a GPU host exporting for CPU serving) is run through the real variant lists of the four
served files; the builders are never called.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from export.__main__ import main
from export.common import ExportError
from export.efficientnet_lite import variants as image_variants
from export.minilm import variants as text_variants
from export.precision import device
from export.precision.device import Capabilities, CudaDevice, why_unavailable
from export.precision.selection import offered
from tritonrepo.tensors import TensorSpec

T4 = CudaDevice(name="Tesla T4", compute_capability=(7, 5), cuda_version="12.4", driver_version="550.54")
A100 = CudaDevice(name="NVIDIA A100-SXM4-80GB", compute_capability=(8, 0))
H100 = CudaDevice(name="NVIDIA H100 80GB HBM3", compute_capability=(9, 0))
ZEN4 = frozenset({"avx2", "avx512f", "avx512_bf16", "avx512_vnni"})
AVX2 = frozenset({"avx2"})


def _never(*_args: object) -> object:
    raise AssertionError("offering a variant must not build it")


def _files(capabilities: Capabilities | None = None) -> dict[str, list]:
    """The variant lists of the four served files, as the pipelines build them on a machine of
    ``capabilities``; the ONNX configs leave use_tf32 to onnxruntime (TF32 where the GPU has it)."""
    pixels = TensorSpec(name="PIXELS", datatype="FP32", dims=(3, 224, 224))
    logits = TensorSpec(name="LOGITS", datatype="FP32", dims=(1000,))
    capabilities = capabilities or Capabilities(cpu_flags=ZEN4)
    return {
        "minilm_onnx": text_variants.onnx_encoder_variants(
            fp32=_never,
            onnx_runner=_never,
            fp32_onnx_file=_never,
            calibration=[],
            capabilities=capabilities,
            cuda_options={},
        ),
        "minilm_torchscript": text_variants.torchscript_encoder_variants(
            fp32=_never, reduced_torchscript=_never
        ),
        "efficientnet_lite0_onnx": image_variants.onnx_classifier_variants(
            pixels,
            logits,
            fp32=_never,
            fp32_onnx_file=_never,
            calibration=_never,
            capabilities=capabilities,
            cuda_options={},
        ),
        "efficientnet_lite0_torchscript": image_variants.torchscript_classifier_variants(
            torch.nn.Identity(), pixels, fp32=_never
        ),
    }


CPU_WITHOUT_BF16 = {
    "minilm_onnx": ["onnx-fp32", "onnx-int8-per-token"],
    "minilm_torchscript": ["torchscript-fp32"],
    "efficientnet_lite0_onnx": ["onnx-fp32", "onnx-int8-static-qdq"],
    "efficientnet_lite0_torchscript": ["torchscript-fp32"],
}
CPU_WITH_BF16 = CPU_WITHOUT_BF16 | {
    "minilm_torchscript": ["torchscript-fp32", "torchscript-bf16"],
    "efficientnet_lite0_torchscript": ["torchscript-fp32", "torchscript-bf16-channels-last"],
}
GPU_WITHOUT_BF16 = {
    "minilm_onnx": ["onnx-fp32-cuda", "onnx-fp16-cuda"],
    "minilm_torchscript": ["torchscript-fp32-cuda", "torchscript-fp16-cuda"],
    "efficientnet_lite0_onnx": ["onnx-fp32-cuda", "onnx-fp16-cuda"],
    "efficientnet_lite0_torchscript": ["torchscript-fp32-cuda", "torchscript-fp16-cuda"],
}
# The ONNX float32 file runs as its config serves it (TF32 here), the TorchScript one as libtorch runs it:
# one float32 variant each (export/precision/cuda_runtime.py).
GPU_WITH_BF16_AND_TF32 = {
    "minilm_onnx": ["onnx-tf32-cuda", "onnx-fp16-cuda"],
    "minilm_torchscript": ["torchscript-fp32-cuda", "torchscript-bf16-cuda", "torchscript-fp16-cuda"],
    "efficientnet_lite0_onnx": ["onnx-tf32-cuda", "onnx-fp16-cuda"],
    "efficientnet_lite0_torchscript": [
        "torchscript-fp32-cuda",
        "torchscript-bf16-cuda",
        "torchscript-fp16-cuda",
    ],
}
DESCRIBED = {
    "a CPU host without bf16 instructions": (Capabilities(cpu_flags=AVX2), CPU_WITHOUT_BF16),
    "a CPU host with bf16 instructions": (Capabilities(cpu_flags=ZEN4), CPU_WITH_BF16),
    "a compute capability 7.5 GPU": (Capabilities(cpu_flags=ZEN4, cuda=T4), GPU_WITHOUT_BF16),
    "a 7.5 GPU, stated": (Capabilities(cpu_flags=ZEN4, cuda=T4, served_on="gpu"), GPU_WITHOUT_BF16),
    "a compute capability 8.0 GPU": (Capabilities(cpu_flags=AVX2, cuda=A100), GPU_WITH_BF16_AND_TF32),
    "a compute capability 9.0 GPU": (
        Capabilities(cpu_flags=ZEN4, cuda=H100, served_on="gpu"),
        GPU_WITH_BF16_AND_TF32,
    ),
    "a GPU host exporting for CPU serving": (
        Capabilities(cpu_flags=ZEN4, cuda=A100, served_on="cpu"),
        CPU_WITH_BF16,
    ),
}


@pytest.mark.parametrize("described", DESCRIBED)
def test_each_described_device_is_offered_exactly_its_variants(described: str) -> None:
    capabilities, expected = DESCRIBED[described]
    files = _files(capabilities)
    assert {name: offered(variants, capabilities) for name, variants in files.items()} == expected
    every = [variant for variants in files.values() for variant in variants]
    if capabilities.gpu_serves:  # nothing gated on the CPU, and never int8, reaches a GPU server
        assert {v.device for v in every if v.name in sum(expected.values(), [])} == {"cuda"}
    assert not any(v.precision == "int8" and v.device == "cuda" for v in every)


def test_every_variant_not_offered_says_why() -> None:
    t4 = Capabilities(cpu_flags=AVX2, cuda=T4)
    reasons = {
        v.name: why_unavailable(v.precision, v.device, t4)
        for v in _files(t4)["minilm_torchscript"] + _files(t4)["minilm_onnx"]
    }
    assert "compute capability 7.5" in reasons["torchscript-bf16-cuda"]
    assert "8.0 or later" in reasons["torchscript-bf16-cuda"]
    assert reasons["onnx-fp32-cuda"] is None, "a config serving TF32 runs strict float32 on a T4"
    assert "no TF32 tensor cores; TF32 needs compute capability 8.0" in str(
        why_unavailable("tf32", "cuda", t4)
    )
    assert "not of a CPU" in why_unavailable("tf32", "cpu", Capabilities(cpu_flags=ZEN4))
    assert "only for CPU serving" in reasons["onnx-int8-per-token"]
    assert "only for CPU serving" in reasons["torchscript-fp32"]
    assert reasons["onnx-fp16-cuda"] is None
    assert "never served from a GPU" in why_unavailable(
        "int8", "cuda", Capabilities(cpu_flags=ZEN4, cuda=H100)
    )
    for_cpu = Capabilities(cpu_flags=ZEN4, cuda=H100, served_on="cpu")
    assert "--served-on cpu" in why_unavailable("fp16", "cuda", for_cpu)
    assert "this machine has no GPU" in why_unavailable("fp16", "cuda", Capabilities(cpu_flags=ZEN4))


def test_serving_on_a_gpu_without_one_here_is_refused_with_the_fix() -> None:
    with pytest.raises(ExportError, match="needs a CUDA GPU on the exporting machine") as refused:
        Capabilities(cpu_flags=ZEN4, cuda=None, served_on="gpu")
    assert "--served-on cpu" in str(refused.value) and "serving class" in str(refused.value)
    assert not Capabilities(cpu_flags=ZEN4, served_on="here").gpu_serves
    with pytest.raises(ValueError, match="served_on must be one of"):
        Capabilities(cpu_flags=ZEN4, served_on="tpu")


def test_the_export_command_refuses_gpu_serving_on_a_machine_without_cuda(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device: the refusal is for machines without one")
    assert main(["--served-on", "gpu", "--repository", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "export refused: --served-on gpu needs a CUDA GPU" in err
    assert list(tmp_path.iterdir()) == []  # nothing exported


def test_a_compute_capability_is_two_integers_and_reads_as_nvidia_smi_writes_it() -> None:
    assert T4.capability == "7.5" and not T4.bf16
    assert A100.capability == "8.0" and A100.bf16 and H100.bf16 and A100.tf32 and not T4.tf32
    with pytest.raises(ValueError, match="compute capability"):
        CudaDevice(name="x", compute_capability=(0, 5))


def test_the_fingerprinted_capabilities_name_the_gpu_class() -> None:
    recorded = Capabilities(cpu_flags=AVX2, cuda=T4).as_dict()
    assert recorded["gpu"] == "Tesla T4 (compute capability 7.5)" and recorded["served_on_gpu"] is True
    assert Capabilities(cpu_flags=AVX2).as_dict()["gpu"] is None


def test_cpu_flags_come_from_the_cpuinfo_flags_line(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(
        "processor\t: 0\nmodel name\t: Some CPU\nflags\t\t: fpu avx2 avx512_bf16 avx512_vnni\n\n"
    )
    capabilities = Capabilities(cpu_flags=device.cpu_flags(cpuinfo))
    assert capabilities.cpu_bf16 and capabilities.cpu_vnni
    assert device.cpu_flags(tmp_path / "missing") == frozenset()


def test_the_driver_version_is_the_loaded_nvidia_module_s(tmp_path: Path) -> None:
    version = tmp_path / "version"
    version.write_text("580.159.04\n")
    assert device.nvidia_driver_version(version) == "580.159.04"
    assert device.nvidia_driver_version(tmp_path / "no-module") is None, "no NVIDIA module loaded"
