"""The image classifier as users call it: the full local repository, the project's client, HTTP and gRPC."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import skimage
import torch

from clients import Classification, InvalidInputError, TritonClient
from description.model import load_description
from export.efficientnet_lite import kind as image
from tritonlocal import LocalTritonServer
from tritonrepo.served_code import load_preprocess_module, preprocess_settings

ROOT = Path(__file__).resolve().parents[2]
PHOTOS = Path(skimage.__file__).parent / "data"
NAMES = ("chelsea.png", "coffee.png", "astronaut.png", "rocket.jpg", "motorcycle_left.png", "horse.png")
CAT_CLASSES = {281, 282, 283, 284, 285}  # tabby, tiger cat, Persian, Siamese, Egyptian cat
COFFEE_CLASSES = {967, 968, 504}  # espresso, cup, coffee mug


@pytest.fixture(scope="module", params=["http", "grpc"])
def client(request: pytest.FixtureRequest, triton_server: LocalTritonServer) -> Iterator[TritonClient]:
    url = (
        f"http://{triton_server.http_url}" if request.param == "http" else f"grpc://{triton_server.grpc_url}"
    )
    with TritonClient(url, max_in_flight=32) as client:
        yield client


@pytest.fixture(scope="module")
def photos() -> dict[str, bytes]:
    return {name: (PHOTOS / name).read_bytes() for name in NAMES}


def test_the_cat_photo_has_a_cat_class_and_the_coffee_photo_a_cup_class_in_top_5(
    client: TritonClient, photos: dict[str, bytes]
) -> None:
    cat, coffee = client.classify([photos["chelsea.png"], photos["coffee.png"]])
    assert CAT_CLASSES & set(cat.class_ids), cat
    assert COFFEE_CLASSES & set(coffee.class_ids), coffee
    assert "espresso" in coffee.labels[0]


def test_onnx_and_torchscript_routes_agree_on_the_top_1_of_every_photo(
    client: TritonClient, photos: dict[str, bytes]
) -> None:
    onnx = client.classify(list(photos.values()), model="image_classifier")
    torchscript = client.classify(list(photos.values()), model="image_classifier_torchscript")
    for name, a, b in zip(photos, onnx, torchscript, strict=True):
        assert a.class_ids[0] == b.class_ids[0], f"{name}: {a.labels[0]} vs {b.labels[0]}"
        np.testing.assert_allclose(a.scores, b.scores, atol=1e-3, err_msg=name)


def test_a_photos_result_is_the_same_alone_and_inside_32_concurrent_requests(
    client: TritonClient, photos: dict[str, bytes], triton_server: LocalTritonServer
) -> None:
    start = client.statistics("efficientnet_lite0_onnx")
    alone = client.classify([photos["chelsea.png"]])[0]
    crowd = [photos[name] for name in NAMES] * 5 + [photos["chelsea.png"], photos["coffee.png"]]
    # The encoder counts a request just after answering it: the snapshot is taken once `alone` is counted,
    # or the crowd's figures would include it (test_statistics_race.py).
    client.statistics_since(start, requests=1)
    before = client.statistics("efficientnet_lite0_onnx")
    together = client.classify(crowd)  # 32 requests, all in flight at once
    batched = client.statistics_since(before, requests=len(crowd))
    for position, result in enumerate(together):
        if crowd[position] == photos["chelsea.png"]:
            _assert_same(alone, result)
    print(f"32 concurrent photos: {batched.requests} requests in {batched.executions} executions")
    assert batched.executions < batched.requests, "no batch was formed"


def test_one_corrupt_image_among_31_good_concurrent_ones_fails_alone_with_a_clear_message(
    client: TritonClient, photos: dict[str, bytes]
) -> None:
    good = [photos[name] for name in NAMES] * 6
    crowd = good[:15] + [b"\x89PNG\r\n\x1a\n this is not really a PNG"] + good[15:31]
    results = client.classify(crowd, errors="return")
    failures = [(i, r) for i, r in enumerate(results) if not isinstance(r, Classification)]
    assert [i for i, _ in failures] == [15]
    error = failures[0][1]
    assert isinstance(error, InvalidInputError)
    assert "IMAGE_BYTES" in str(error) and "cannot decode image" in str(error)
    expected = {name: client.classify([photos[name]])[0].class_ids[0] for name in NAMES}
    for payload, result in zip(crowd, results, strict=True):
        if isinstance(result, Classification):
            name = next(n for n, b in photos.items() if b == payload)
            assert result.class_ids[0] == expected[name]


def _assert_same(a: Classification, b: Classification) -> None:
    assert a.class_ids == b.class_ids
    np.testing.assert_allclose(a.scores, b.scores, rtol=1e-4, atol=1e-6)


def test_lite2_from_its_description_classifies_the_photographs_beside_lite0_as_eager_pytorch_does(
    client: TritonClient, photos: dict[str, bytes]
) -> None:
    """EfficientNet-Lite2 is added by model_descriptions/efficientnet_lite2.yaml and its configs only:
    exported, gated,
    derived and served next to Lite0, with the top-5 classes eager PyTorch gives on the same pixels."""
    lite2 = load_description(ROOT / "model_descriptions" / "efficientnet_lite2.yaml")
    preprocess = lite2.preprocessing["model"]
    module = load_preprocess_module(ROOT / "model_repository", preprocess)
    settings = preprocess_settings(ROOT / "model_repository", module, preprocess)
    pixels = torch.from_numpy(module.preprocess(list(photos.values()), settings))
    with torch.no_grad():
        eager = image.load_model(lite2, ROOT / "model_repository")(pixels).numpy()
    served = client.classify(list(photos.values()), model="image_classifier_lite2")
    beside = client.classify(list(photos.values()), model="image_classifier")
    for name, result, expected in zip(photos, served, image.top_k_ids(eager), strict=True):
        assert list(result.class_ids) == expected.tolist(), f"{name}: {result.labels}"
    cat, coffee = served[0], served[1]
    assert CAT_CLASSES & set(cat.class_ids) and "espresso" in coffee.labels[0], (cat, coffee)
    assert beside[1].class_ids[0] == coffee.class_ids[0]  # Lite0 and Lite2 agree on the espresso
