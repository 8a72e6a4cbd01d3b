"""The image pipeline without a server: architecture, weights, export, preprocessing and postprocessing.

The Python-backend model.py files run here through the stand-in for ``triton_python_backend_utils`` of
tests/unit/conftest.py, on fake requests exactly as Triton would call execute().
"""

from __future__ import annotations

import copy
import dataclasses
import io
import json
import shutil
import types
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
import torch
from PIL import Image

from description.model import load_description
from export.common import ExportError, fingerprint, is_up_to_date, write_manifest
from export.efficientnet_lite import kind as image
from export.efficientnet_lite import network as efficientnet_lite
from export.efficientnet_lite import variants as image_variants
from export.pipeline import ExportResult, Options, export_model
from export.precision import onnx_graph
from export.precision.gates import image_gate
from export.precision.selection import Capabilities
from tritonrepo.atomic_files import write_atomically
from tritonrepo.served_code import load_preprocess_module, preprocess_settings

ROOT = Path(__file__).resolve().parents[2]
DEPLOYABLE = ROOT / "model_repository"
LITE0 = load_description(ROOT / "model_descriptions" / "efficientnet_lite0.yaml")
CLASSIFIERS = [served.model for served in LITE0.served]
LABELS_FILE = DEPLOYABLE / "image_postprocess" / "1" / "imagenet_labels.txt"
CAT_CLASSES = {281, 282, 283, 284, 285}  # tabby, tiger cat, Persian, Siamese, Egyptian cat
COFFEE_CLASSES = {967, 968, 504}  # espresso, cup, coffee mug


# -- helpers --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    return image.load_model(LITE0, DEPLOYABLE)


@pytest.fixture(scope="module")
def packaged_state() -> dict[str, torch.Tensor]:
    return torch.load(LITE0.weights_path(), map_location="cpu", weights_only=True)


@pytest.fixture(scope="module")
def real_images() -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in image.sample_image_paths()}


@pytest.fixture(scope="module")
def served_preprocess() -> types.ModuleType:
    return load_preprocess_module(DEPLOYABLE)


@pytest.fixture(scope="module")
def settings(served_preprocess: types.ModuleType):
    return preprocess_settings(DEPLOYABLE, served_preprocess)


def _image_bytes(mode: str, size: tuple[int, int] = (300, 200), fmt: str = "PNG") -> bytes:
    buffer = io.BytesIO()
    picture = Image.new("RGB", size, (200, 30, 60)).convert(mode)
    picture.save(buffer, format=fmt)
    return buffer.getvalue()


# -- architecture and weights ---------------------------------------------------------------------------
def test_tensorflow_same_padding_puts_the_odd_pixel_after() -> None:
    assert efficientnet_lite.same_padding(224, 3, 2) == (0, 1)
    assert efficientnet_lite.same_padding(112, 5, 2) == (1, 2)
    assert efficientnet_lite.same_padding(56, 3, 1) == (1, 1)


def test_architecture_matches_every_packaged_tensor_name_and_shape(packaged_state: dict) -> None:
    expected = {key: tuple(value.shape) for key, value in packaged_state.items()}
    actual = {
        key: tuple(value.shape) for key, value in efficientnet_lite.EfficientNetLite().state_dict().items()
    }
    assert len(expected) == 296
    assert actual == expected


def test_strict_loading_rejects_a_state_dict_with_a_missing_key(packaged_state: dict) -> None:
    broken = {key: value for key, value in packaged_state.items() if key != "_blocks.3._bn1.running_var"}
    with pytest.raises(ExportError, match=r"Missing key.*_blocks\.3\._bn1\.running_var"):
        efficientnet_lite.load_model(broken)


def test_strict_loading_rejects_a_state_dict_with_an_unexpected_key(packaged_state: dict) -> None:
    extended = {**packaged_state, "_blocks.0._se_reduce.weight": torch.zeros(8, 32, 1, 1)}
    with pytest.raises(ExportError, match=r"Unexpected key.*_se_reduce"):
        efficientnet_lite.load_model(extended)


def test_eager_model_recognises_the_cat_and_the_coffee(
    model, served_preprocess, settings, real_images
) -> None:
    pixels = served_preprocess.preprocess([real_images["chelsea.png"], real_images["coffee.png"]], settings)
    with torch.no_grad():
        probabilities = model(torch.from_numpy(pixels)).softmax(dim=1).numpy()
    cat, coffee = image.top_k_ids(probabilities)
    assert cat[0] in CAT_CLASSES
    assert probabilities[0, sorted(CAT_CLASSES)].sum() > 0.8
    assert COFFEE_CLASSES & set(coffee.tolist())
    assert probabilities[1, 967] > 0.5  # espresso


def test_weights_of_some_classes_load_as_a_classifier_of_those_with_the_full_heads_logits(
    model, packaged_state, served_preprocess, settings, real_images
) -> None:
    rows = [282, 967, 657]  # tiger cat, espresso, missile
    head = {key: packaged_state[key][rows] for key in ("_fc.weight", "_fc.bias")}
    own = efficientnet_lite.load_model({**packaged_state, **head})
    assert own.num_classes == 3 and own._fc.out_features == 3
    pixels = torch.from_numpy(served_preprocess.preprocess(list(real_images.values()), settings))
    with torch.no_grad():
        torch.testing.assert_close(own(pixels), model(pixels)[:, rows], rtol=0, atol=1e-5)


def test_folding_the_batch_norms_keeps_the_logits_and_leaves_the_model_as_it_was(
    model, served_preprocess, settings, real_images
) -> None:
    pixels = torch.from_numpy(served_preprocess.preprocess(list(real_images.values()), settings))
    folded = efficientnet_lite.fold_batch_norms(model)
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in folded.modules())
    assert sum(isinstance(m, torch.nn.BatchNorm2d) for m in model.modules()) == 49
    with torch.no_grad():
        expected, actual = model(pixels), folded(pixels)
    torch.testing.assert_close(actual, expected, rtol=0, atol=1e-4)


# -- export -----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[ExportResult]]:
    """The real exporter run once into a temporary copy of the image models' configs: the files it
    exported (the configs it generates beside them are checked here and left out)."""
    repository = tmp_path_factory.mktemp("repository")
    shutil.copytree(
        DEPLOYABLE / "image_preprocess",
        repository / "image_preprocess",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    for name in CLASSIFIERS:
        (repository / name).mkdir()
        shutil.copyfile(DEPLOYABLE / name / "config.pbtxt", repository / name / "config.pbtxt")
    results = export_model(LITE0, _options(repository))
    generated = {r.model for r in results if r.path.name == "config.pbtxt"}  # written before the files
    assert {"image_postprocess", "image_classifier", "image_classifier_torchscript"} <= generated
    return repository, [r for r in results if r.path.name != "config.pbtxt"]


def _options(repository: Path) -> Options:
    capabilities = Capabilities.detect()
    return Options(
        repository=repository,
        precision="fp32",
        capabilities=capabilities,
        record_dir=repository / "precision",
        timing_batches=(1,),  # one variant, nothing to choose: its timing is recorded, never checked here
    )


def test_export_writes_both_files_after_verifying_them(exported) -> None:
    repository, results = exported
    assert [r.model for r in results] == CLASSIFIERS
    for result in results:
        assert result.written and result.path.is_file()
        assert result.path.parent == repository / result.model / "1"
        assert result.parity is not None and result.parity.value <= LITE0.tolerance
        assert f"batch sizes {[1, len(image.sample_image_paths()), 64]}" in result.parity.detail
        assert result.selection.served.endswith("-fp32")
        assert result.selection.candidates[0].gate.passed


@pytest.mark.parametrize("batch_size", [1, 5])
def test_exported_onnx_and_torchscript_match_eager_on_real_images(
    exported, model, served_preprocess, settings, real_images, batch_size: int
) -> None:
    repository, _ = exported
    pixels = served_preprocess.preprocess(list(real_images.values())[:batch_size], settings)
    with torch.no_grad():
        expected = model(torch.from_numpy(pixels)).numpy()
    session = onnxruntime.InferenceSession(str(repository / "efficientnet_lite0_onnx/1/model.onnx"))
    from_onnx = session.run(["LOGITS__0"], {"PIXELS__0": pixels})[0]
    scripted = torch.jit.load(str(repository / "efficientnet_lite0_torchscript/1/model.pt"))
    with torch.no_grad():
        from_torchscript = scripted(torch.from_numpy(pixels)).numpy()
    for logits in (from_onnx, from_torchscript):
        assert np.abs(logits - expected).max() < LITE0.tolerance
        assert np.array_equal(image.top_k_ids(logits), image.top_k_ids(expected))


def test_onnx_file_has_the_config_tensor_names_and_a_dynamic_batch_axis(exported) -> None:
    repository, _ = exported
    graph = onnx.load(str(repository / "efficientnet_lite0_onnx/1/model.onnx")).graph
    (pixels,), (logits,) = graph.input, graph.output
    assert (pixels.name, logits.name) == ("PIXELS__0", "LOGITS__0")
    dims = [d.dim_param or d.dim_value for d in pixels.type.tensor_type.shape.dim]
    assert dims == ["batch", 3, 224, 224]


def test_onnx_file_pads_inside_its_convolutions(exported) -> None:
    repository, _ = exported
    graph = onnx.load(str(repository / "efficientnet_lite0_onnx/1/model.onnx")).graph
    assert "Pad" not in {node.op_type for node in graph.node}
    pads = {
        node.name: list(onnx.helper.get_attribute_value(a))
        for node in graph.node
        for a in node.attribute
        if node.op_type == "Conv" and a.name == "pads"
    }
    # TensorFlow's SAME padding: a stride-2 3x3 convolution on 224 pixels pads only the bottom and right.
    assert pads["/_conv_stem/Conv"] == [0, 0, 1, 1]
    assert sum(p[:2] != p[2:] for p in pads.values()) == 5


def _pad_then_conv(mode: str, value: float) -> onnx.ModelProto:
    helper, weight = onnx.helper, np.ones((1, 1, 3, 3), np.float32)
    nodes = [
        helper.make_node("Pad", ["x", "pads", "value"], ["padded"], mode=mode),
        helper.make_node("Conv", ["padded", "w"], ["y"], strides=[2, 2]),
    ]
    initializers = [
        onnx.numpy_helper.from_array(np.array([0, 0, 0, 0, 0, 0, 1, 1], np.int64), "pads"),
        onnx.numpy_helper.from_array(np.array(value, np.float32), "value"),
        onnx.numpy_helper.from_array(weight, "w"),
    ]
    graph = helper.make_graph(
        nodes,
        "pad_conv",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 1, 6, 6])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
        initializers,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize(
    ("mode", "value", "folds"), [("constant", 0.0, 1), ("constant", 5.0, 0), ("reflect", 0.0, 0)]
)
def test_only_a_zero_pad_is_folded_into_the_convolution_and_the_result_is_unchanged(
    mode: str, value: float, folds: int
) -> None:
    model = _pad_then_conv(mode, value)
    x = np.arange(36, dtype=np.float32).reshape(1, 1, 6, 6)
    expected = onnxruntime.InferenceSession(model.SerializeToString()).run(["y"], {"x": x})[0]
    assert onnx_graph.fold_pads_into_convs(model, {"x": x}) == folds
    assert [node.op_type for node in model.graph.node] == (["Conv"] if folds else ["Pad", "Conv"])
    np.testing.assert_array_equal(
        onnxruntime.InferenceSession(model.SerializeToString()).run(["y"], {"x": x})[0], expected
    )


def test_the_gate_set_is_hundreds_of_augmented_real_photographs(exported) -> None:
    repository, results = exported
    gate = results[0].selection.candidates[0].gate
    assert gate.samples == len(image.sample_image_paths()) * 2 * len(image_variants.AUGMENTATIONS) >= 200
    assert gate.metrics["top1_agreement"] == 1.0  # fp32 ONNX against eager fp32
    assert (repository / "precision" / f"{results[0].model}.json").is_file()


def test_the_export_records_the_gates_noise_floor_beside_the_variants(exported) -> None:
    _, results = exported
    for result in results:
        floor = result.selection.reference
        assert floor is not None and floor.gate.startswith("image, fp32 itself with +-0.125 pixel level")
        assert floor.samples == result.selection.candidates[0].gate.samples
        # fp32 against itself: an eighth of a pixel level of noise moves logits, but far less than a
        # reduced precision's rounding; the ambiguous inputs of the gate set still flip a few top classes.
        assert 0.9 < floor.metrics["top1_agreement"] <= 1.0
        assert 0.0 < floor.metrics["max_abs_logit_diff"] < 1.0


def test_the_noise_floor_flips_only_inputs_whose_top_classes_are_closer_than_the_noise() -> None:
    pixels = np.zeros((4, 3, 2, 2), np.float32)
    margins = np.array([1e-5, 1e-5, 1.0, 1.0], np.float32)  # top-class margin of each input

    def runner(batch: np.ndarray) -> np.ndarray:  # class 0 reads one noisy pixel; class 1 is fixed
        count = len(batch)
        return np.stack([batch[:, 0, 0, 0] + margins[:count], np.zeros(count, np.float32)], axis=1)

    reference = runner(pixels)
    floor = image_variants.noise_floor(runner, pixels, reference, std_rgb=(0.5, 0.5, 0.5), levels=1.0, seed=1)
    assert floor.samples == 4 and floor.metrics["max_abs_logit_diff"] <= 2 / 255 + 1e-7
    assert 0.5 <= floor.metrics["top1_agreement"] < 1.0  # a wide margin never flips; a tiny one may
    with pytest.raises(ValueError, match="levels must be positive"):
        image_variants.noise_floor(runner, pixels, reference, std_rgb=(0.5, 0.5, 0.5), levels=0.0)


def test_the_unfolded_onnx_file_keeps_the_exporters_pad_nodes_and_the_same_logits(
    exported, served_preprocess, settings, real_images, tmp_path: Path
) -> None:
    repository, _ = exported
    unfolded = tmp_path / "unfolded.onnx"
    run_unfolded = image.export_unfolded_onnx(repository / "efficientnet_lite0_onnx", unfolded)
    ops = [node.op_type for node in onnx.load(str(unfolded)).graph.node]
    assert ops.count("Pad") == 5
    pixels = served_preprocess.preprocess(list(real_images.values()), settings)
    shipped = onnxruntime.InferenceSession(str(repository / "efficientnet_lite0_onnx/1/model.onnx"))
    np.testing.assert_allclose(
        run_unfolded(pixels), shipped.run(["LOGITS__0"], {"PIXELS__0": pixels})[0], rtol=0, atol=1e-4
    )


def test_a_classifier_with_perturbed_weights_fails_the_gate_on_real_photographs(
    model, served_preprocess, settings, real_images
) -> None:
    # The photographs the export's gate set is made of (image.check_data's), without the augmented copies
    # that make its size: a verdict on these few is what is checked here, not the set.
    pixels = served_preprocess.preprocess(list(real_images.values()), settings)
    broken = copy.deepcopy(model)
    with torch.no_grad():
        for parameter in broken.parameters():
            parameter.mul_(1 + 0.2 * torch.randn(parameter.shape, generator=torch.Generator().manual_seed(0)))
    with torch.no_grad():
        reference = image_variants.run_in_batches(lambda b: model(torch.from_numpy(b)).numpy(), pixels)
        logits = image_variants.run_in_batches(lambda b: broken(torch.from_numpy(b)).numpy(), pixels)
    result = image_gate(reference, logits)
    assert result.samples == len(image.sample_image_paths())
    assert not result.passed and result.metrics["top1_agreement"] < 0.99, result.summary()
    assert image_gate(reference, reference).passed  # the same classifier passes on the same photographs


def test_a_second_export_run_is_a_no_op(exported) -> None:
    repository, first = exported
    before = {r.path: r.path.stat().st_mtime_ns for r in first}
    second = export_model(LITE0, _options(repository))
    assert [r.written for r in second] == [False, False]
    assert {r.path: r.path.stat().st_mtime_ns for r in second} == before
    assert all(not p.name.endswith(".tmp") for p in repository.rglob("*"))


def test_manifest_goes_stale_when_the_file_or_its_inputs_change(tmp_path: Path) -> None:
    artifact = tmp_path / "1" / "model.onnx"
    write_atomically(artifact, lambda path: path.write_bytes(b"exported"))
    write_manifest(artifact, "inputs-v1", {"model": "m"})
    assert is_up_to_date(artifact, "inputs-v1")
    assert artifact.stat().st_mode & 0o777 == 0o644  # readable by a server running as another user
    assert not is_up_to_date(artifact, "inputs-v2")
    artifact.write_bytes(b"edited by hand")
    assert not is_up_to_date(artifact, "inputs-v1")


def test_the_fingerprint_reads_the_files_names_and_contents_not_where_they_lie(tmp_path: Path) -> None:
    code, weights = tmp_path / "code" / "kind.py", tmp_path / "weights" / "model.safetensors"
    configs = [tmp_path / folder / "minilm_onnx" / "config.pbtxt" for folder in ("a", "z")]  # either side
    for path, text in ((code, "code"), (weights, "weights"), *((c, "config") for c in configs)):
        path.parent.mkdir(parents=True)
        path.write_text(text)
    here, there = (fingerprint(files=[code, config, weights], values={"v": "1"}) for config in configs)
    assert here == there  # a copy of the repository finds its exported files up to date
    configs[1].write_text("changed")
    assert fingerprint(files=[code, configs[1], weights], values={"v": "1"}) != here


def test_a_failed_write_leaves_the_existing_file_and_no_temporary(tmp_path: Path) -> None:
    artifact = tmp_path / "model.pt"
    artifact.write_bytes(b"good")

    def fail(path: Path) -> None:
        path.write_bytes(b"half")
        raise ExportError("verification failed")

    with pytest.raises(ExportError):
        write_atomically(artifact, fail)
    assert artifact.read_bytes() == b"good"
    assert [p.name for p in tmp_path.iterdir()] == ["model.pt"]


# -- preprocessing ---------------------------------------------------------------------------------------
def _plain_reference(data: bytes, size_px: int = 224, shorter_px: int = 256) -> np.ndarray:
    """Textbook preprocessing written independently: RGB, shorter side 256, centre 224, (x/255-0.5)/0.5."""
    picture = Image.open(io.BytesIO(data)).convert("RGB")
    scale = shorter_px / min(picture.size)
    picture = picture.resize((round(picture.width * scale), round(picture.height * scale)), Image.BILINEAR)
    left, top = (picture.width - size_px) // 2, (picture.height - size_px) // 2
    crop = np.asarray(picture.crop((left, top, left + size_px, top + size_px)), dtype=np.float32)
    return ((crop / 255.0 - 0.5) / 0.5).transpose(2, 0, 1)


def test_served_preprocessing_equals_a_plain_reference_on_real_images(
    served_preprocess, settings, real_images
) -> None:
    assert settings.mean_rgb == (0.5, 0.5, 0.5) and settings.std_rgb == (0.5, 0.5, 0.5)
    pixels = served_preprocess.preprocess(list(real_images.values()), settings)
    expected = np.stack([_plain_reference(data) for data in real_images.values()])
    assert pixels.dtype == np.float32 and pixels.shape == (len(real_images), 3, 224, 224)
    # The served resize computes only the crop's source box; its sample positions then differ from the
    # whole-image resize in the last float bits, which moves some pixel values by one intensity level.
    one_level = 1 / 255 / 0.5
    np.testing.assert_allclose(pixels, expected, rtol=0, atol=one_level + 1e-6)
    assert np.mean(np.abs(pixels - expected)) < 0.05 * one_level


def test_normalisation_is_the_plain_expression_to_the_bit(served_preprocess, settings) -> None:
    crops = np.random.default_rng(0).integers(0, 256, size=(3, 224, 224, 3), dtype=np.uint8)
    mean, std = np.float32(settings.mean_rgb), np.float32(settings.std_rgb)
    expected = (crops.astype(np.float32) * (np.float32(1 / 255) / std) - mean / std).transpose(0, 3, 1, 2)
    pixels = served_preprocess.normalise(crops, settings)
    assert pixels.flags.c_contiguous
    np.testing.assert_array_equal(pixels, expected)


@pytest.mark.parametrize("size", [(224, 224), (256, 256), (256, 300), (640, 427), (1000, 256)])
def test_resizing_only_the_crop_matches_resizing_the_whole_image(served_preprocess, settings, size) -> None:
    photo = Image.open(image.sample_image_paths()[0]).convert("RGB").resize(size)
    crop = served_preprocess._resize_and_crop(photo, settings)
    shorter = settings.resize_shorter_px / min(size)
    whole = photo.resize(
        (max(256, round(size[0] * shorter)), max(256, round(size[1] * shorter))), Image.BILINEAR
    )
    left, top = (whole.width - 224) // 2, (whole.height - 224) // 2
    expected = np.asarray(whole.crop((left, top, left + 224, top + 224)))
    assert crop.shape == (224, 224, 3) and crop.dtype == np.uint8
    difference = np.abs(crop.astype(int) - expected)
    assert difference.max() <= 1 and difference.mean() < 0.05  # a level now and then, from rounding


def test_python_model_execute_gives_the_exporters_pixels_for_a_batch_of_requests(
    triton_python_model, served_preprocess, settings, real_images
) -> None:
    preprocess = triton_python_model("image_preprocess")
    names = list(real_images)
    requests = [
        {"IMAGE_BYTES": np.array([[real_images[names[0]]], [real_images[names[1]]]], dtype=np.object_)},
        {"IMAGE_BYTES": np.array([[real_images[names[2]]]], dtype=np.object_)},
    ]
    responses = preprocess.execute(requests)
    expected = served_preprocess.preprocess([real_images[n] for n in names[:3]], settings)
    assert [r.error for r in responses] == [None, None]
    np.testing.assert_array_equal(responses[0].outputs["PIXELS"], expected[:2])
    np.testing.assert_array_equal(responses[1].outputs["PIXELS"], expected[2:])


def test_python_model_answers_a_corrupt_request_alone(triton_python_model, real_images) -> None:
    preprocess = triton_python_model("image_preprocess")
    good = real_images["coffee.png"]
    requests = [
        {"IMAGE_BYTES": np.array([[data]], dtype=np.object_)} for data in (good, b"not an image", good)
    ]
    responses = preprocess.execute(requests)
    assert responses[1].error.message().startswith("IMAGE_BYTES: cannot decode image:")
    assert responses[0].error is None and responses[2].error is None
    assert responses[0].outputs["PIXELS"].shape == (1, 3, 224, 224)


@pytest.mark.parametrize("mode", ["RGBA", "L", "P", "LA", "CMYK", "1"])
def test_preprocessing_converts_any_image_mode_to_rgb(served_preprocess, settings, mode: str) -> None:
    fmt = "JPEG" if mode == "CMYK" else "PNG"
    pixels = served_preprocess.preprocess([_image_bytes(mode, fmt=fmt)], settings)
    assert pixels.shape == (1, 3, 224, 224)
    assert -1.0 <= pixels.min() and pixels.max() <= 1.0


def test_preprocessing_composites_transparent_pixels_over_white(served_preprocess, settings) -> None:
    buffer = io.BytesIO()
    Image.new("RGBA", (256, 256), (0, 0, 0, 0)).save(buffer, format="PNG")
    pixels = served_preprocess.preprocess([buffer.getvalue()], settings)
    assert np.allclose(pixels, 1.0)  # white is 1.0 after (x/255 - 0.5) / 0.5


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"", "cannot decode image: empty input"),
        (b"GIF89a but not really", "cannot decode image"),
        ("truncated", "cannot decode image: image file is truncated"),
    ],
)
def test_preprocessing_names_the_problem_with_undecodable_bytes(
    served_preprocess, settings, real_images, data, problem: str
) -> None:
    if data == "truncated":
        data = real_images["rocket.jpg"][: len(real_images["rocket.jpg"]) // 2]
    with pytest.raises(served_preprocess.ImageInputError, match=problem):
        served_preprocess.decode_and_crop(data, settings)


def test_preprocessing_refuses_images_over_the_pixel_limit_before_decoding(
    served_preprocess, settings, real_images
) -> None:
    small_limit = dataclasses.replace(settings, max_image_pixels=300 * 300)
    with pytest.raises(
        served_preprocess.ImageInputError, match=r"image too large: 451x300 .*decompression bombs"
    ):
        served_preprocess.decode_and_crop(real_images["chelsea.png"], small_limit)


# -- labels and postprocessing ------------------------------------------------------------------------------
def test_label_file_has_1000_imagenet_classes_in_the_standard_order() -> None:
    labels = LABELS_FILE.read_text(encoding="utf-8").splitlines()
    assert len(labels) == 1000 and all(label.strip() == label and label for label in labels)
    assert labels[0] == "tench, Tinca tinca"
    assert labels[281] == "tabby, tabby cat"
    assert labels[285] == "Egyptian cat"
    assert labels[504] == "coffee mug"
    assert labels[967] == "espresso"
    assert labels[999] == "toilet tissue, toilet paper, bathroom tissue"


def test_postprocess_returns_softmax_top_k_with_labels_for_each_request(triton_python_model) -> None:
    postprocess = triton_python_model("image_postprocess")
    logits = np.zeros((3, 1000), dtype=np.float32)
    logits[0, [967, 504, 968, 10, 20]] = [9.0, 8.0, 7.0, 6.0, 5.0]
    logits[1, [281, 285, 282, 283, 284]] = [5.0, 4.0, 3.0, 2.0, 1.0]
    logits[2, :] = np.log(np.arange(1, 1001, dtype=np.float32))  # probabilities proportional to id + 1
    responses = postprocess.execute([{"LOGITS": logits[:2]}, {"LOGITS": logits[2:]}])
    first, second = responses
    assert first.outputs["CLASS_IDS"].tolist() == [[967, 504, 968, 10, 20], [281, 285, 282, 283, 284]]
    assert second.outputs["CLASS_IDS"].tolist() == [[999, 998, 997, 996, 995]]
    assert first.outputs["LABELS"][0, 0] == b"espresso" and first.outputs["LABELS"][1, 1] == b"Egyptian cat"
    expected = np.exp(logits[0]) / np.exp(logits[0]).sum()
    np.testing.assert_allclose(first.outputs["SCORES"][0], expected[[967, 504, 968, 10, 20]], rtol=1e-5)
    np.testing.assert_allclose(second.outputs["SCORES"][0], np.arange(1000, 995, -1) / 500500, rtol=1e-4)
    assert first.outputs["SCORES"].dtype == np.float32 and first.outputs["CLASS_IDS"].dtype == np.int64


def test_postprocess_rejects_non_finite_logits_without_failing_the_batch(triton_python_model) -> None:
    postprocess = triton_python_model("image_postprocess")
    bad = np.zeros((1, 1000), dtype=np.float32)
    bad[0, 3] = np.nan
    good, broken = postprocess.execute([{"LOGITS": np.zeros((2, 1000), np.float32)}, {"LOGITS": bad}])
    assert good.error is None and good.outputs["CLASS_IDS"].shape == (2, 5)
    assert broken.error.message() == "LOGITS: every value must be finite (got NaN or infinity)"


def test_postprocess_top_k_parameter_must_agree_with_output_dims(
    triton_python_model, model_config_json
) -> None:
    config = json.loads(model_config_json("image_postprocess"))
    config["parameters"]["top_k"]["string_value"] = "3"
    with pytest.raises(ValueError, match="top_k is 3"):
        triton_python_model("image_postprocess", config=json.dumps(config))
