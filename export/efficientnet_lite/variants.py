"""Precision variants of the EfficientNet-Lite0 classifier files, and the real images that gate them.

The gate set is the real photographs (skimage's sample images,
:func:`export.efficientnet_lite.kind.sample_image_paths`) and deterministic augmentations of each (flip,
crops, brightness, contrast, saturation, rotation, blur, downscaling, JPEG recompression), each encoded and
run through the served preprocessing: a few hundred inputs a reduced-precision variant must classify as eager
fp32 does. Static int8 calibrates its activation ranges on the unaugmented photographs and their mirror images
only.

The gate's noise floor (:func:`noise_floor`): the same gate applied to eager fp32 itself, fed the gate
inputs with uniform noise of an eighth of one 8-bit pixel level added. Many augmented inputs are
ambiguous (fp32's top two classes within a few hundredths of a logit), so even that invisible change
flips some of their top classes; a reduced precision, whose rounding moves the logits far more, cannot
agree with fp32 more often than fp32 agrees with itself there. The export records it beside the
variants' gate numbers; it is a reference, never a threshold.

Variants, each gated on the device that serves it (export/precision/device.py): for a CPU, ONNX fp32 and int8
(static QDQ, per-channel weights), TorchScript fp32 and bf16 channels-last (with bf16 instructions); for
a GPU, ONNX and TorchScript float32 and fp16, and from compute capability 8.0 TorchScript bf16, each run
as its backend serves it (export/precision/cuda_runtime.py: the ONNX file with its config's use_tf32, TF32 or
strict; the TorchScript files with libtorch's TF32 convolutions and strict products). A
reduced-precision TorchScript file folds the batch norms into the convolutions in float32 before the
cast, casts its float32 input to its own dtype and its logits back to float32, so the served tensor
types stay as the config declares them.
"""

from __future__ import annotations

import copy
import dataclasses
import io
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageEnhance, ImageFilter, ImageOps
from torch import nn

from export.efficientnet_lite import network as efficientnet_lite
from export.precision import onnx_graph
from export.precision.gates import GateResult, image_gate
from export.precision.onnx_variants import onnx_file_variants, quantize_int8_static
from export.precision.selection import Capabilities, Runner, Variant
from export.precision.torchscript_variants import torchscript_file_variants
from tritonrepo.tensors import TensorSpec

GATE_BATCH = 32
NOISE_FLOOR_LEVELS = 0.125  # the noise floor's amplitude, in 8-bit pixel levels (uniform in +-this)
_CROPS = ((0.0, 0.0), (0.25, 0.0), (0.0, 0.25), (0.25, 0.25), (0.125, 0.125))  # (left, top) of a 75% window

_Augment = Callable[[Image.Image], Image.Image]


def _crop(left: float, top: float, share: float = 0.75) -> _Augment:
    def apply(image: Image.Image) -> Image.Image:
        w, h = image.size
        x, y = round(left * w), round(top * h)
        return image.crop((x, y, x + round(share * w), y + round(share * h)))

    return apply


def _downscale(image: Image.Image) -> Image.Image:
    small = image.resize((max(1, image.width // 3), max(1, image.height // 3)), Image.Resampling.BILINEAR)
    return small.resize(image.size, Image.Resampling.BILINEAR)


def _jpeg(image: Image.Image) -> Image.Image:
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=30)
    return Image.open(io.BytesIO(buffer.getvalue())).convert("RGB")


def _enhance(kind: type, factor: float) -> _Augment:
    return lambda image: kind(image).enhance(factor)


def _rotate(degrees: int) -> _Augment:
    return lambda image: image.rotate(degrees, resample=Image.Resampling.BILINEAR)


AUGMENTATIONS: dict[str, _Augment] = {
    "original": lambda image: image,
    **{f"crop{i}": _crop(left, top) for i, (left, top) in enumerate(_CROPS)},
    "crop_centre_60": _crop(0.2, 0.2, share=0.6),
    **{f"brightness{f}": _enhance(ImageEnhance.Brightness, f) for f in (0.6, 0.8, 1.2, 1.4)},
    **{f"contrast{f}": _enhance(ImageEnhance.Contrast, f) for f in (0.7, 1.3)},
    **{f"saturation{f}": _enhance(ImageEnhance.Color, f) for f in (0.5, 1.5)},
    **{f"rotate{d}": _rotate(d) for d in (-10, -5, 5, 10)},
    "blur": lambda image: image.filter(ImageFilter.GaussianBlur(radius=1.5)),
    "downscale3": _downscale,
    "jpeg30": _jpeg,
}


def augmented_images(paths: list[Path]) -> tuple[list[str], list[bytes]]:
    """Each photograph under every augmentation, mirrored and not: (names, PNG bytes).

    The PNGs are stored uncompressed: they decode to the same pixels at any level, and compressing the
    264 of them took about 17 s of each image export on two cores, against 3 s stored."""
    names, encoded = [], []
    for path in paths:
        photo = Image.open(path).convert("RGB")
        for mirrored in (False, True):
            base = ImageOps.mirror(photo) if mirrored else photo
            for name, augment in AUGMENTATIONS.items():
                buffer = io.BytesIO()
                augment(base).save(buffer, format="PNG", compress_level=0)
                names.append(f"{path.name}:{'mirror:' if mirrored else ''}{name}")
                encoded.append(buffer.getvalue())
    return names, encoded


def calibration_mask(names: list[str]) -> np.ndarray:
    """The gate-set rows static int8 calibrates on: the photographs and their mirror images."""
    return np.array([name.endswith(":original") for name in names])


def timing_workload(
    photos: np.ndarray, gate_pixels: np.ndarray, *, max_batch: int
) -> dict[int, list[tuple[np.ndarray, int]]]:
    """Batch 1: each photograph alone; batch ``max_batch``: consecutive slices of the gate set."""
    singles = [(photos[i : i + 1], 1) for i in range(len(photos))]
    full = [
        (np.ascontiguousarray(gate_pixels[i : i + max_batch]), max_batch)
        for i in range(0, len(gate_pixels) - max_batch + 1, max_batch)
    ]
    return {1: singles, max_batch: full}


def run_in_batches(runner: Runner, pixels: np.ndarray, batch: int = GATE_BATCH) -> np.ndarray:
    return np.concatenate([runner(pixels[i : i + batch]) for i in range(0, len(pixels), batch)])


def noise_floor(
    runner: Runner,
    pixels: np.ndarray,
    reference: np.ndarray,
    *,
    std_rgb: tuple[float, float, float],
    levels: float = NOISE_FLOOR_LEVELS,
    seed: int = 0,
) -> GateResult:
    """The image gate applied to ``runner`` (the fp32 reference) on ``pixels`` [N, 3, H, W] plus uniform
    noise of +-``levels`` 8-bit pixel levels, against ``reference``, its logits on the clean pixels.

    One pixel level is 1 / (255 * std) in the normalised input of each channel."""
    if levels <= 0:
        raise ValueError(f"levels must be positive, got {levels}")
    step = np.float32(levels / 255.0) / np.asarray(std_rgb, dtype=np.float32)
    noise = np.random.default_rng(seed).uniform(-1.0, 1.0, pixels.shape).astype(np.float32)
    noisy = pixels + noise * step[None, :, None, None]
    result = image_gate(reference, run_in_batches(runner, noisy))
    return dataclasses.replace(
        result, gate=f"image, fp32 itself with +-{levels:g} pixel level of input noise"
    )


class _Cast(nn.Module):
    """Runs ``model`` in ``dtype`` (optionally channels-last); float32 in, float32 out."""

    def __init__(self, model: nn.Module, dtype: torch.dtype, channels_last: bool) -> None:
        super().__init__()
        self.model, self.dtype, self.channels_last = model, dtype, channels_last

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        x = pixels.to(self.dtype)
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        return self.model(x).float()


def torchscript_file(
    model: nn.Module, path: Path, pixels: TensorSpec, *, dtype: torch.dtype, device: str, channels_last: bool
) -> Runner:
    """Trace and freeze ``model`` in ``dtype`` on ``device``, save it; a runner on the saved file."""
    converted = copy.deepcopy(model).eval().to(device=device, dtype=dtype)
    if channels_last:
        converted = converted.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
    example = torch.zeros((1, *pixels.dims), dtype=torch.float32, device=device)
    with torch.no_grad():
        traced = torch.jit.freeze(torch.jit.trace(_Cast(converted, dtype, channels_last).eval(), example))
    torch.jit.save(traced, str(path))
    return torchscript_runner(path, device)


def torchscript_runner(path: Path, device: str) -> Runner:
    """A runner on a saved classifier file, loaded onto ``device`` as the libtorch backend loads it."""
    loaded = torch.jit.load(str(path), map_location=device).eval()

    def run(batch: np.ndarray) -> np.ndarray:
        # As served: the config sets DISABLE_OPTIMIZED_EXECUTION, which the libtorch backend honours.
        with torch.no_grad(), torch.jit.optimized_execution(False):
            return loaded(torch.from_numpy(batch).to(device)).cpu().numpy()

    return run


def onnx_session_runner(
    path: Path,
    pixels: TensorSpec,
    logits: TensorSpec,
    *,
    device: str,
    cuda_options: Mapping[str, str] | None = None,
) -> Runner:
    session = onnx_graph.session(path, device, cuda_options)
    return lambda batch: session.run([logits.name], {pixels.name: batch})[0]


def torchscript_classifier_variants(
    model: nn.Module, pixels: TensorSpec, *, fp32: Callable[[Path], Runner]
) -> list[Variant]:
    """The TorchScript classifier's variants; ``fp32`` writes and verifies the float32 file."""

    def reduced(path: Path, dtype: str, device: str) -> Runner:
        # Batch norms folded in float32 first, so each weight is rounded to ``dtype`` once.
        folded = efficientnet_lite.fold_batch_norms(model)
        return torchscript_file(
            folded, path, pixels, dtype=getattr(torch, dtype), device=device, channels_last=True
        )

    def float32_on_cuda(path: Path) -> Runner:
        # Traced on the CPU and verified against eager; the libtorch backend maps it to the GPU.
        fp32(path)
        return torchscript_runner(path, "cuda")

    fp32_cpu, bf16_cpu, *cuda = torchscript_file_variants(
        fp32=fp32, fp32_cuda=float32_on_cuda, write=reduced, bf16_cpu_name="torchscript-bf16-channels-last"
    )
    # The classifier lists its CUDA float32 file second, as its precision records and reports do.
    return [fp32_cpu, cuda[0], bf16_cpu, *cuda[1:]]


def onnx_classifier_variants(
    pixels: TensorSpec,
    logits: TensorSpec,
    *,
    fp32: Callable[[Path], Runner],
    fp32_onnx_file: Callable[[], Path],
    calibration: Callable[[], np.ndarray],
    capabilities: Capabilities,
    cuda_options: Mapping[str, str],
) -> list[Variant]:
    """The ONNX classifier's variants (:func:`export.precision.onnx_variants.onnx_file_variants`), int8 static
    QDQ calibrated on the rows of ``calibration()``. ``cuda_options``: the CUDA provider options the model's
    config serves."""

    def int8(source: Path, destination: Path, *, reduce_range: bool) -> None:
        feeds = ({pixels.name: row[None]} for row in calibration())
        quantize_int8_static(source, destination, calibration=feeds, reduce_range=reduce_range)

    def run(path: Path, device: str, options: Mapping[str, str] | None) -> Runner:
        return onnx_session_runner(path, pixels, logits, device=device, cuda_options=options)

    def feed(batch: np.ndarray) -> dict[str, np.ndarray]:
        return {pixels.name: batch}

    return onnx_file_variants(
        fp32=fp32,
        fp32_onnx_file=fp32_onnx_file,
        int8=("onnx-int8-static-qdq", int8),
        run=run,
        feed=feed,
        placement_feed=lambda: feed(calibration()[:1]),
        capabilities=capabilities,
        cuda_options=cuda_options,
    )
