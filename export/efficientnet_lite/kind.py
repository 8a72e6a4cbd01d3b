"""The image-classifier kind of the export pipeline: EfficientNet-Lite models, checked before they land.

Writes each served file (a repository model's ``model.onnx`` or ``model.pt``) with the tensor names, dims
and max_batch_size of that model's config.pbtxt, from the weights and architecture its description
names
(model_descriptions/*.yaml). Each fp32 file is loaded back with its own runtime (onnxruntime, torch.jit) and
compared with eager PyTorch on real photographs (skimage's sample images), preprocessed by the very
functions the description's preprocessing model (``image_preprocess/1/model.py``) serves with, at
several batch sizes: logits within the description's tolerance and identical top-5. Beside each fp32
file, reduced-precision variants (export/efficientnet_lite/variants.py) are gated on a few hundred real
images; the pipeline (export/pipeline.py) times them and serves the fastest that passes.
"""

from __future__ import annotations

import functools
import itertools
import logging
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import torch

from description.generated_configs import generate, refresh_command, step_config
from description.model import ModelDescription, description_serving
from export.common import ExportError, ModelConfig, single_io
from export.efficientnet_lite import network as efficientnet_lite
from export.efficientnet_lite import variants as image_variants
from export.kinds import Made, Parity, Plan, Target
from export.precision import cuda_runtime, onnx_graph
from export.precision.gates import GateResult, image_gate
from samples import SampleError, photograph_paths
from tritonrepo.configs import load_model_config
from tritonrepo.served_code import load_preprocess_module, preprocess_settings
from tritonrepo.tensors import TensorSpec

logger = logging.getLogger(__name__)

ONNX_OPSET = 17  # opset 17 is read by the onnxruntime in Triton 2.51 (it reads up to 21)
TOP_K = 5
# Eager PyTorch runs these networks on a CPU fastest in chunks of 2 images: on two cores about 1.9x the
# images/s of chunks of 8 and 3x that of 32 (docs/measurements.md, "The image kind's check inputs").
EAGER_CHUNK = 2
ARCHITECTURES = ("efficientnet_lite",)
Runner = Callable[[np.ndarray], np.ndarray]


@dataclass(kw_only=True)
class CheckData:
    """Real images through the served preprocessing, and eager logits for each check batch.

    ``gate_*``: the photographs and their augmentations (export/efficientnet_lite/variants.py), with eager
    fp32 logits, on which every reduced-precision variant is gated; ``noise_floor``: that gate applied to
    eager fp32 itself on slightly noisy gate inputs (:func:`export.efficientnet_lite.variants.noise_floor`).
    """

    image_names: list[str]
    pixels: np.ndarray
    gate_names: list[str]
    gate_pixels: np.ndarray
    gate_logits: np.ndarray
    noise_floor: GateResult
    batches: dict[int, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)  # size -> (input, logits)


def check_data(repository: Path, model: torch.nn.Module, preprocess_model: str) -> CheckData:
    """The sample photographs, and the gate set of them and their augmentations with eager logits."""
    module = load_preprocess_module(repository, preprocess_model)
    settings = preprocess_settings(repository, module, preprocess_model)
    paths = sample_image_paths()
    gate_names, encoded = image_variants.augmented_images(paths)
    gate_pixels = module.preprocess(encoded, settings)

    eager = functools.partial(eager_logits, model)
    gate_logits = eager(gate_pixels)
    return CheckData(
        image_names=[p.name for p in paths],
        pixels=module.preprocess([p.read_bytes() for p in paths], settings),
        gate_names=gate_names,
        gate_pixels=gate_pixels,
        gate_logits=gate_logits,
        noise_floor=image_variants.noise_floor(eager, gate_pixels, gate_logits, std_rgb=settings.std_rgb),
    )


def sample_image_paths() -> list[Path]:
    """The real photographs of the check set (:func:`samples.photograph_paths`), from skimage/data."""
    try:
        paths = photograph_paths(check_set=True)
    except SampleError as e:
        raise ExportError(f"the check images come from scikit-image (skimage/data): {e}") from e
    if len(paths) < 2:
        raise ExportError(
            f"expected the check set of samples.PHOTOGRAPHS in skimage/data, found {len(paths)}"
        )
    return paths


@dataclass(kw_only=True)
class Prepared:
    """A described classifier in eval mode, its check data and its fp32 tolerance."""

    model: torch.nn.Module
    check: CheckData
    tolerance: float
    gates: dict[str, float]


def load_model(
    description: ModelDescription, repository: Path, made: Made | None = None
) -> efficientnet_lite.EfficientNetLite:
    """The described classifier with its weights, at the input size its preprocessing model produces
    (``made``: the description's configs, generated once by the export; generated here when not given)."""
    architecture = dict(description.architecture)
    family = architecture.pop("family", None)
    if family not in ARCHITECTURES or set(architecture) - {"width", "depth"}:
        raise ExportError(
            f"model {description.name!r}: architecture {description.architecture} is not supported; "
            f"family must be one of {ARCHITECTURES}, with width and depth multipliers"
        )
    made = generate(description, repository) if made is None else made
    size = _preprocessed_dims(repository, description, made)[-1]
    state = _state_dict(description.weights_path())
    return efficientnet_lite.load_model(state, **architecture, image_size_px=size)


def _state_dict(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path, map_location="cpu", weights_only=True)


def weights_class_count(path: Path) -> int:
    """The classes of the EfficientNet-Lite weights at ``path``: its classifier head's rows."""
    return efficientnet_lite.class_count(_state_dict(path))


def check_class_count(description: ModelDescription, repository: Path, made: Made, classes: int) -> None:
    """Every served file's logits, and the step each ensemble feeds them to, have the weights' ``classes``;
    ExportError naming both counts and the fix if not."""
    served = {s.model for s in description.served}
    for model in sorted(served):
        dims = list(made[model].config.output[0].dims)
        if dims != [classes]:
            raise ExportError(
                f"{model}: its output has dims {dims}, but the weights' classifier head has {classes} "
                f"classes; set configs.native.outputs' dims to [{classes}] in the description "
                f"{description.name} and run `{refresh_command(description)}`"
            )
    ensembles = description.configs.ensembles if description.configs is not None else ()
    for ensemble in ensembles:
        for step, after in itertools.pairwise(ensemble.steps):
            dims = list(step_config(after, repository, made).input[0].dims) if step in served else [classes]
            if dims != [classes]:
                fix = (
                    f"set its input's dims to [{classes}] in configs.python_models, with as many labels"
                    if after in made
                    else "give the model its own post-processing and labels: python -m export.scaffold "
                    "efficientnet_lite NAME --labels LABELS.txt (docs/your-model.md)"
                )
                raise ExportError(
                    f"ensemble {ensemble.model}: its step {after} takes logits of dims {dims} from {step}, "
                    f"but the weights' classifier head has {classes} classes; {fix}"
                )


def _preprocess_model(description: ModelDescription) -> str:
    if "model" not in description.preprocessing:
        raise ExportError(f"model {description.name!r}: preprocessing needs 'model' (its Python model)")
    return description.preprocessing["model"]


def _preprocessed_dims(repository: Path, description: ModelDescription, made: Made) -> tuple[int, ...]:
    return tuple(step_config(_preprocess_model(description), repository, made).output[0].dims)


class ImageClassifierKind:
    """EfficientNet-Lite classifiers behind a Python preprocessing model (export/kinds.py)."""

    def check_config(
        self, description: ModelDescription, repository: Path, config: ModelConfig, made: Made
    ) -> None:
        pixels, _ = single_io(config)
        produced = _preprocessed_dims(repository, description, made)
        if pixels.dims != produced:
            raise ExportError(
                f"{config.name}: input {pixels.name} has dims {list(pixels.dims)}, but "
                f"{_preprocess_model(description)} produces {list(produced)}; make the two configs agree"
            )

    def fingerprint_files(self, description: ModelDescription) -> list[Path]:
        modules = (efficientnet_lite, image_variants, onnx_graph, cuda_runtime)
        return [description.weights_path(), Path(__file__), *(Path(m.__file__ or "") for m in modules)]

    def prepare(self, description: ModelDescription, repository: Path, made: Made) -> Prepared:
        model = load_model(description, repository, made)
        check_class_count(description, repository, made, model.num_classes)
        check = check_data(repository, model, _preprocess_model(description))
        return Prepared(model=model, check=check, tolerance=description.tolerance, gates=description.gates)

    def plan(self, prepared: Prepared, target: Target) -> Plan:
        config = target.config
        model, check = prepared.model, prepared.check
        pixels_spec, logits_spec = single_io(config)
        batch_sizes = sorted({1, len(check.image_names), config.max_batch_size})

        def export_and_verify(path: Path) -> Runner:
            runner = _EXPORTERS[target.file_format](model, path, pixels_spec, logits_spec)
            what = f"{config.name} ({path.name})"
            plan.parity.append(verify(runner, prepared, batch_sizes, what=what))
            return runner

        def gate(runner: Runner) -> GateResult:
            logits = image_variants.run_in_batches(runner, check.gate_pixels)
            return image_gate(check.gate_logits, logits, minimums=prepared.gates)

        @functools.cache
        def fp32_onnx_file() -> Path:  # the float32 graph int8 and fp16 are rewritten from
            path = target.scratch / "model.onnx"
            export_onnx(model, path, pixels_spec, logits_spec)
            return path

        if target.file_format == "onnx":
            variants = image_variants.onnx_classifier_variants(
                pixels_spec,
                logits_spec,
                fp32=export_and_verify,
                fp32_onnx_file=fp32_onnx_file,
                calibration=lambda: check.gate_pixels[image_variants.calibration_mask(check.gate_names)],
                capabilities=target.capabilities,
                cuda_options=cuda_runtime.provider_options(config),
            )
        else:
            variants = image_variants.torchscript_classifier_variants(
                model, pixels_spec, fp32=export_and_verify
            )
        plan = Plan(
            variants=variants,
            gate=gate,
            workload=image_variants.timing_workload(
                check.pixels, check.gate_pixels, max_batch=min(32, config.max_batch_size)
            ),
            reference=check.noise_floor,
        )
        return plan

    def support_files(self, description: ModelDescription, repository: Path, made: Made) -> dict[Path, Path]:
        return {}


KIND = ImageClassifierKind()


def export_onnx(
    model: torch.nn.Module, path: Path, pixels: TensorSpec, logits: TensorSpec, *, fold_pads: bool = True
) -> Runner:
    """Write ONNX (opset 17, dynamic batch axis) and return an onnxruntime runner for it.

    ``fold_pads=False`` keeps the exporter's ``Pad`` nodes (the file as served before the fold, which the
    benchmark serves in its unoptimised arm: :func:`export_unfolded_onnx`)."""
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
    model = load_model(description_serving(model_dir.name), model_dir.parent)
    destination.parent.mkdir(parents=True, exist_ok=True)
    return export_onnx(model, destination, pixels, logits, fold_pads=False)


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


def verify(runner: Runner, prepared: Prepared, batch_sizes: list[int], *, what: str) -> Parity:
    """Compare ``runner`` with eager PyTorch on the check images; raise ExportError on any mismatch."""
    worst, tolerance = 0.0, prepared.tolerance
    k = min(TOP_K, prepared.check.gate_logits.shape[1])  # a classifier of fewer classes ranks them all
    for size in batch_sizes:
        batch, expected = eager_batch(prepared.model, prepared.check, size)
        actual = runner(batch)
        if actual.shape != expected.shape:
            raise ExportError(
                f"{what}: batch {size} gave logits of shape {actual.shape}, expected {expected.shape}"
            )
        diff = float(np.max(np.abs(actual - expected)))
        worst = max(worst, diff)
        if not diff <= tolerance:
            raise ExportError(f"{what}: batch {size}: max |logit diff| {diff:.3g} exceeds {tolerance:g}")
        if not np.array_equal(top_k_ids(actual), top_k_ids(expected)):
            raise ExportError(f"{what}: batch {size}: top-{k} classes differ from eager PyTorch")
    detail = f", top-{k} identical, batch sizes {list(batch_sizes)}"
    return Parity(metric="max |logit diff|", value=worst, tolerance=tolerance, detail=detail)


def eager_logits(model: torch.nn.Module, pixels: np.ndarray) -> np.ndarray:
    """Eager PyTorch's logits for ``pixels``, run in chunks of :data:`EAGER_CHUNK` images (each image's
    logits are its own at any batch size)."""
    with torch.no_grad():
        chunks = (pixels[i : i + EAGER_CHUNK] for i in range(0, len(pixels), EAGER_CHUNK))
        return np.concatenate([model(torch.from_numpy(chunk)).numpy() for chunk in chunks])


def eager_batch(model: torch.nn.Module, check: CheckData, size: int) -> tuple[np.ndarray, np.ndarray]:
    """A batch of ``size`` check images (cycled) and eager PyTorch's logits for it (cached)."""
    if size not in check.batches:
        indices = np.arange(size) % len(check.pixels)
        batch = np.ascontiguousarray(check.pixels[indices])
        check.batches[size] = (batch, eager_logits(model, batch))
    return check.batches[size]


def top_k_ids(logits: np.ndarray, k: int = TOP_K) -> np.ndarray:
    return np.argsort(-logits, axis=1, kind="stable")[:, :k]
