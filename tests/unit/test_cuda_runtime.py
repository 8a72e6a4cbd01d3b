"""How each CUDA variant runs (export/precision/cuda_runtime.py), checked on the CPU: the onnxruntime CUDA
provider options every ONNX variant's sessions get (the config's, as Triton's onnxruntime backend reads them,
its use_tf32 included, which makes the float32 variant tf32 or fp32), and torch's TF32 switches around every
call of a TorchScript variant (libtorch's: TF32 convolutions, strict products). The sessions and runners
are replaced by recorders here (there is no GPU); the variant lists are the real ones.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from export.common import ExportError
from export.efficientnet_lite import variants as image_variants
from export.minilm import variants as text_variants
from export.precision import cuda_runtime, onnx_graph, onnx_variants, serving_runtime, serving_worker
from export.precision.cuda_runtime import LIBTORCH, Tf32Mode, provider_options, serving_mode, tf32_mode
from export.precision.device import Capabilities, CudaDevice
from export.precision.gates import image_gate
from export.precision.selection import Variant, select_and_write
from tritonrepo.configs import load_model_config
from tritonrepo.tensors import TensorSpec

ROOT = Path(__file__).resolve().parents[2]
LITE0 = load_model_config(ROOT / "model_repository" / "efficientnet_lite0_onnx")
MINILM = load_model_config(ROOT / "model_repository" / "minilm_onnx")
ZEN4 = frozenset({"avx512_bf16", "avx512_vnni"})
A100 = CudaDevice(name="NVIDIA A100-SXM4-80GB", compute_capability=(8, 0))
PIXELS = TensorSpec(name="X", datatype="FP32", dims=(16,))
LOGITS = TensorSpec(name="Y", datatype="FP32", dims=(8,))
CUDA_VARIANTS = ("onnx-tf32-cuda", "onnx-fp16-cuda")  # LITE0's config serves use_tf32 1
TF32, STRICT = Tf32Mode(matmul=True, cudnn=True), Tf32Mode(matmul=False, cudnn=False)


def _config(text: str) -> ModelConfig:
    return text_format.Parse('name: "m"\nplatform: "onnxruntime_onnx"\n' + text, ModelConfig())


# -- what the config serves ---------------------------------------------------------------------------------
def test_the_shipped_configs_serve_their_parameters_as_the_cuda_providers_options() -> None:
    # "1" in its parameters; use_tf32 from its description, which allows tf32 on CUDA
    assert provider_options(LITE0) == {"cudnn_conv_algo_search": "HEURISTIC", "use_tf32": "1"}
    assert provider_options(MINILM) == {"use_tf32": "1"}
    diabetes = load_model_config(ROOT / "model_repository" / "diabetes_classifier_onnx")
    assert provider_options(diabetes) == {"use_tf32": "0"}  # its description allows only fp32 on CUDA


def test_libtorch_runs_tf32_convolutions_and_strict_products_and_onnx_what_its_config_says() -> None:
    assert serving_mode("torchscript") == LIBTORCH == Tf32Mode(matmul=False, cudnn=True)
    assert serving_mode("torchscript", {"use_tf32": "0"}) == LIBTORCH  # libtorch has no such switch
    assert serving_mode("onnx", {"use_tf32": "0"}) == STRICT
    assert serving_mode("onnx", {}) == TF32  # onnxruntime's default
    assert serving_mode("onnx", provider_options(LITE0)) == TF32
    with pytest.raises(ValueError, match="'plan' is not one of"):
        serving_mode("plan")


def test_parameters_override_the_cuda_accelerators_options_as_the_backend_applies_them() -> None:
    config = _config(
        "parameters { key: 'arena_extend_strategy' value: { string_value: '1' } }\n"
        "optimization { execution_accelerators { gpu_execution_accelerator: [ { name: 'cuda' "
        "parameters { key: 'use_tf32' value: '0' } parameters { key: 'gpu_mem_limit' value: '1000' } } ] } }"
    )
    assert provider_options(config) == {
        "use_tf32": "0",
        "gpu_mem_limit": str(2**64 - 1),  # the backend's default written over the accelerator's value
        "arena_extend_strategy": "kSameAsRequested",
    }
    assert not cuda_runtime.served_tf32(provider_options(config))
    assert cuda_runtime.served_tf32(provider_options(LITE0))


def test_an_unknown_conv_algo_search_code_is_refused_with_the_codes() -> None:
    config = _config("parameters { key: 'cudnn_conv_algo_search' value: { string_value: '3' } }")
    with pytest.raises(ExportError, match=r"m: parameter cudnn_conv_algo_search is '3'.*\['0', '1', '2'\]"):
        provider_options(config)


# -- ONNX variants ------------------------------------------------------------------------------------------
@pytest.fixture
def sessions(monkeypatch: pytest.MonkeyPatch) -> dict[str, list]:
    """Every onnxruntime session and placement check a variant opens: (device, CUDA options)."""
    opened: dict[str, list] = {"session": [], "placement": []}

    def session(model, device="cpu", cuda_options=None):
        opened["session"].append((device, cuda_options))
        return None

    def placement(model, feed, *, what, cuda_options=None):
        opened["placement"].append((what, cuda_options))

    monkeypatch.setattr(onnx_graph, "session", session)
    monkeypatch.setattr(onnx_variants, "require_cuda_placement", placement)
    return opened


def _fp32(path: Path) -> object:
    path.write_bytes(b"float32 file")
    return lambda batch: batch


def _image_onnx_variants(two_layer_onnx: Path, cuda_options: dict[str, str] | None = None) -> list[Variant]:
    return image_variants.onnx_classifier_variants(
        PIXELS,
        LOGITS,
        fp32=_fp32,
        fp32_onnx_file=lambda: two_layer_onnx,
        calibration=lambda: np.zeros((2, 16), np.float32),
        capabilities=Capabilities(cpu_flags=ZEN4, cuda=A100),
        cuda_options=provider_options(LITE0) if cuda_options is None else cuda_options,
    )


def test_each_onnx_classifier_variant_for_cuda_runs_with_the_configs_options_as_served(
    sessions: dict[str, list], two_layer_onnx: Path, tmp_path: Path
) -> None:
    variants = {v.name: v for v in _image_onnx_variants(two_layer_onnx)}
    assert [v.name for v in variants.values() if v.device == "cuda"] == list(CUDA_VARIANTS)
    for name in CUDA_VARIANTS:
        variants[name].build(tmp_path / f"{name}.onnx")
    served = {"cudnn_conv_algo_search": "HEURISTIC", "use_tf32": "1"}
    assert sessions["session"] == [("cuda", served), ("cuda", served)]
    assert sessions["placement"] == [(name, served) for name in CUDA_VARIANTS]
    assert variants["onnx-tf32-cuda"].precision == "tf32"
    assert variants["onnx-tf32-cuda"].runtime == {**TF32.as_dict(), "cuda_options": served}
    assert variants["onnx-fp16-cuda"].runtime == {**TF32.as_dict(), "cuda_options": served}
    assert variants["onnx-fp32"].runtime == {} and variants["onnx-fp32"].cuda_options is None


def test_a_config_serving_strict_float32_makes_the_float32_variant_fp32_gated_strict(
    sessions: dict[str, list], two_layer_onnx: Path, tmp_path: Path
) -> None:
    strict = {"use_tf32": "0"}
    variants = _image_onnx_variants(two_layer_onnx, strict)
    (float32,) = [v for v in variants if v.device == "cuda" and v.precision in ("fp32", "tf32")]
    assert (float32.name, float32.precision) == ("onnx-fp32-cuda", "fp32")
    float32.build(tmp_path / "fp32.onnx")
    assert sessions["session"] == [("cuda", strict)]
    assert float32.runtime == {**STRICT.as_dict(), "cuda_options": strict}


def test_each_onnx_encoder_variant_for_cuda_runs_with_the_configs_options_as_served(
    sessions: dict[str, list], tmp_path: Path
) -> None:
    runners: list[tuple[str, object]] = []
    options = {"cudnn_conv_algo_search": "DEFAULT", "use_tf32": "0"}
    variants = text_variants.onnx_encoder_variants(
        fp32=_fp32,
        onnx_runner=lambda path, device, options: runners.append((device, options)),
        fp32_onnx_file=lambda: pytest.fail("fp16 is not built here"),
        calibration=[{"INPUT_IDS__0": np.zeros(3, np.int64), "ITEM_LENGTHS__1": np.array([3], np.int32)}],
        capabilities=Capabilities(cpu_flags=ZEN4, cuda=A100),
        cuda_options=options,
    )
    by_name = {v.name: v for v in variants}
    assert "onnx-tf32-cuda" not in by_name, "the config serves strict float32: no TF32 variant to choose"
    by_name["onnx-fp32-cuda"].build(tmp_path / "fp32.onnx")
    assert runners == [("cuda", options)]
    assert [options for _, options in sessions["placement"]] == [options for _, options in runners]
    assert by_name["onnx-fp16-cuda"].cuda_options == options


def test_the_serving_runtimes_gate_gets_the_variants_cuda_options(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    passed_on: list[dict] = []

    def serving_gate(path, device, feed, gate, *, cuda_options=None, runtime_dir=None):
        passed_on.append({"device": device, "cuda_options": cuda_options})
        return None

    monkeypatch.setattr(serving_runtime, "serving_gate", serving_gate)
    options = {"cudnn_conv_algo_search": "HEURISTIC", "use_tf32": "1"}
    variant = Variant(
        name="onnx-tf32-cuda",
        precision="tf32",
        device="cuda",
        build=lambda path: (path.write_text("tf32"), lambda batch: np.ones((len(batch), 4)))[1],
        feed=lambda batch: {"X": batch},
        cuda_options=options,
    )
    selection = select_and_write(
        model="m",
        destination=tmp_path / "model.onnx",
        variants=[variant],
        gate=lambda runner: image_gate(np.ones((10, 4)) + np.arange(4), runner(np.zeros(10)) + np.arange(4)),
        workload={1: [(np.zeros(1), 1)]},
        choice="auto",
        capabilities=Capabilities(cpu_flags=ZEN4, cuda=A100),
        timing_min_s=0.001,
    )
    assert passed_on == [{"device": "cuda", "cuda_options": options}]
    (served,) = selection.as_dict()["candidates"]
    assert served["status"] == "served" and served["runtime"] == {"cuda_options": options}


def test_the_serving_worker_gives_the_cuda_provider_those_options(monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list = []
    monkeypatch.setattr(
        serving_worker.onnxruntime, "get_available_providers", lambda: ["CUDAExecutionProvider"]
    )
    monkeypatch.setattr(
        serving_worker.onnxruntime,
        "InferenceSession",
        lambda model, options, providers: opened.append(providers),
    )
    serving_worker._session("model.onnx", "cuda", {"use_tf32": "0"})
    serving_worker._session("model.onnx", "cpu", {})
    assert opened == [[("CUDAExecutionProvider", {"use_tf32": "0"})], ["CPUExecutionProvider"]]


# -- TorchScript variants -----------------------------------------------------------------------------------
def _switches() -> tuple[bool, bool]:
    return torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32


def _recorder(seen: list[tuple[bool, bool]]):
    def run(batch):
        seen.append(_switches())
        return batch

    return run


@pytest.fixture
def torch_defaults():
    """libtorch's defaults: cuBLAS products without TF32, cuDNN convolutions with it; restored after."""
    before = _switches()
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = False, True
    yield (False, True)
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


def test_torchscript_classifier_variants_run_in_libtorchs_mode(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, torch_defaults: tuple[bool, bool]
) -> None:
    seen: list[tuple[bool, bool]] = []
    monkeypatch.setattr(image_variants, "torchscript_runner", lambda path, device: _recorder(seen))
    monkeypatch.setattr(image_variants, "torchscript_file", lambda *args, **kwargs: _recorder(seen))
    monkeypatch.setattr(image_variants.efficientnet_lite, "fold_batch_norms", lambda model: model)
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = True, False  # not libtorch's
    variants = image_variants.torchscript_classifier_variants(torch.nn.Identity(), PIXELS, fp32=_fp32)
    cuda = [v for v in variants if v.device == "cuda"]
    assert [v.name for v in cuda] == [
        "torchscript-fp32-cuda",
        "torchscript-bf16-cuda",
        "torchscript-fp16-cuda",
    ]
    for variant in cuda:
        variant.build(tmp_path / f"{variant.name}.pt")(np.zeros(1))
        assert variant.runtime == {**LIBTORCH.as_dict(), "cuda_options": None}
    assert seen == [(False, True)] * 3
    assert _switches() == (True, False)  # restored after every call


def test_torchscript_encoder_variants_run_in_libtorchs_mode(
    tmp_path: Path, torch_defaults: tuple[bool, bool]
) -> None:
    seen: list[tuple[bool, bool]] = []
    built: list[tuple[str, str]] = []

    def reduced(path: Path, dtype: str, device: str):
        built.append((dtype, device))
        return _recorder(seen)

    variants = text_variants.torchscript_encoder_variants(fp32=_fp32, reduced_torchscript=reduced)
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = False, False
    for variant in variants:
        if variant.device == "cuda":
            variant.build(tmp_path / f"{variant.name}.pt")(np.zeros(1))
    assert built == [("float32", "cuda"), ("bfloat16", "cuda"), ("float16", "cuda")]
    assert seen == [(False, True)] * 3
    assert _switches() == (False, False)


def test_tf32_mode_restores_the_switches_when_the_call_raises(torch_defaults: tuple[bool, bool]) -> None:
    with pytest.raises(RuntimeError, match="CUDA error"), tf32_mode(TF32):
        assert _switches() == (True, True)
        raise RuntimeError("CUDA error")
    assert _switches() == torch_defaults
