"""MobileNetV2 as a user's own module (examples/mobilenet_v2): torchvision's ImageNet weights load into it
strictly, its check inputs are the photographs as the served preprocessing makes them (ImageNet's mean and
std, 224 px from 256 px), it names what is in them, and no product code names it."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from description.model import load_description
from description.module_code import load_callable
from export.torch_module.kind import load_model, preprocessing_model
from samples import photograph_paths

ROOT = Path(__file__).resolve().parents[2]
DESCRIPTION = load_description(ROOT / "model_descriptions" / "mobilenet_v2.yaml")
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
CAT_CLASSES = {281, 282, 283, 284, 285}  # tabby, tiger cat, Persian, Siamese, Egyptian cat
ESPRESSO = 967
PRODUCT = [
    *(
        p
        for package in ("export", "clients", "loadtest", "tritonrepo")
        for p in (ROOT / package).rglob("*.py")
    ),
    *(ROOT / "model_repository").glob("*/[0-9]*/*.py"),
    *(ROOT / "model_repository").glob("*.py"),
]


@pytest.fixture(scope="module")
def pixels() -> np.ndarray:
    assert DESCRIPTION.module is not None
    check_inputs = load_callable(DESCRIPTION.module.check_inputs, DESCRIPTION.folder, where="test")
    folder = preprocessing_model(DESCRIPTION, ROOT / "model_repository")
    return check_inputs(folder)["PIXELS"]


def test_torchvisions_state_dict_loads_by_name_into_the_example_module_in_eval_mode() -> None:
    model = load_model(DESCRIPTION)  # load_state_dict(strict=True): a missing or extra tensor would raise
    weights = torch.load(DESCRIPTION.weights_path() / "mobilenet_v2-b0353104.pth", weights_only=True)
    assert not model.training
    assert list(model.state_dict()) == list(weights) and len(weights) == 314
    assert all(torch.equal(model.state_dict()[name], tensor) for name, tensor in weights.items())


def _textbook(data: bytes) -> np.ndarray:
    """torchvision's ImageNet evaluation written independently: shorter side 256 (bilinear), centre 224,
    (x / 255 - mean) / std."""
    picture = Image.open(io.BytesIO(data)).convert("RGB")
    scale = 256 / min(picture.size)
    picture = picture.resize((round(picture.width * scale), round(picture.height * scale)), Image.BILINEAR)
    left, top = (picture.width - 224) // 2, (picture.height - 224) // 2
    crop = np.asarray(picture.crop((left, top, left + 224, top + 224)), dtype=np.float32) / 255.0
    return ((crop - IMAGENET_MEAN) / IMAGENET_STD).transpose(2, 0, 1)


def test_the_check_inputs_are_the_photographs_with_imagenets_mean_and_std(pixels: np.ndarray) -> None:
    paths = photograph_paths()
    assert pixels.dtype == np.float32 and pixels.shape == (len(paths), 3, 224, 224)
    # A JPEG at least twice the size it is resized to is decoded at a half (or smaller) scale by the
    # served preprocessing (Pillow's draft mode, a faster decode): the textbook's full decode differs there.
    full_size = [
        i for i, path in enumerate(paths) if path.suffix != ".jpg" or min(Image.open(path).size) < 512
    ]
    assert len(full_size) >= 7
    expected = np.stack([_textbook(paths[i].read_bytes()) for i in full_size])
    # The served resize samples only the crop's source box: now and then a pixel one intensity level off.
    one_level = 1 / 255 / min(IMAGENET_STD)
    np.testing.assert_allclose(pixels[full_size], expected, rtol=0, atol=one_level + 1e-5)
    assert np.mean(np.abs(pixels[full_size] - expected)) < 0.05 * one_level


def test_the_module_finds_the_cat_and_the_espresso_in_the_photographs(pixels: np.ndarray) -> None:
    names = [path.name for path in photograph_paths()]
    with torch.no_grad():
        top1 = load_model(DESCRIPTION)(torch.from_numpy(pixels)).argmax(dim=1).tolist()
    assert top1[names.index("chelsea.png")] in CAT_CLASSES
    assert top1[names.index("coffee.png")] == ESPRESSO


@pytest.mark.parametrize("path", PRODUCT, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_product_code_names_the_mobilenet_example(path: Path) -> None:
    text = path.read_text(encoding="utf-8").lower()
    assert "mobilenet" not in text, f"{path.relative_to(ROOT)} names the example"
