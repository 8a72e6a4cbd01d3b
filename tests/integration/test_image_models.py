"""The image pipeline's models in a real tritonserver: preprocessing, postprocessing and the ensembles.

Served by the session's server (the whole repository derived from model_repository/, exported models
included: `make test` exports first). The test of a bad request inside a batch serves image_preprocess on a
server of its own that holds the batcher until the whole batch is queued (the held_batch_server fixture).
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from PIL import Image
from tritonclient.utils import InferenceServerException

from export.efficientnet_lite import kind as image
from tritonlocal import LocalTritonServer
from tritonrepo.served_code import load_preprocess_module, preprocess_settings

ROOT = Path(__file__).resolve().parents[2]
DEPLOYABLE = ROOT / "model_repository"
ENSEMBLES = {
    "image_classifier": "efficientnet_lite0_onnx",
    "image_classifier_torchscript": "efficientnet_lite0_torchscript",
}
CAT_CLASSES = {281, 282, 283, 284, 285}
COFFEE_CLASSES = {967, 968, 504}


@pytest.fixture(scope="module")
def image_server(triton_server: LocalTritonServer) -> LocalTritonServer:
    """The session's server: the whole derived repository, exported models included."""
    return triton_server


@pytest.fixture(scope="module")
def real_images() -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in image.sample_image_paths()}


def _bytes_input(items: list[bytes]) -> httpclient.InferInput:
    tensor = httpclient.InferInput("IMAGE_BYTES", [len(items), 1], "BYTES")
    tensor.set_data_from_numpy(np.array(items, dtype=np.object_).reshape(-1, 1))
    return tensor


def test_preprocess_returns_normalised_pixels_for_a_batch(image_server, real_images) -> None:
    client = httpclient.InferenceServerClient(image_server.http_url)
    names = ["chelsea.png", "coffee.png", "rocket.jpg"]
    result = client.infer("image_preprocess", [_bytes_input([real_images[n] for n in names])])
    pixels = result.as_numpy("PIXELS")
    assert pixels.dtype == np.float32 and pixels.shape == (3, 3, 224, 224)
    assert pixels.min() >= -1.0 and pixels.max() <= 1.0 and pixels.std() > 0.1
    module = load_preprocess_module(DEPLOYABLE)
    expected = module.preprocess([real_images[n] for n in names], preprocess_settings(DEPLOYABLE, module))
    np.testing.assert_array_equal(pixels, expected)


def test_preprocess_rejects_a_corrupt_image_without_failing_concurrent_requests(
    held_batch_server, real_images, send_concurrently
) -> None:
    good = [real_images[name] for name in ("chelsea.png", "coffee.png", "astronaut.png", "rocket.jpg")]
    payloads = [[good[i % len(good)]] for i in range(31)]
    corrupt = 17
    payloads.insert(corrupt, [b"\x89PNG\r\n\x1a\n this is not really a PNG"])
    server = held_batch_server("image_preprocess", len(payloads))  # all 32 in one execution
    inputs = [{"IMAGE_BYTES": np.array(items, dtype=np.object_).reshape(-1, 1)} for items in payloads]
    run = send_concurrently(server, "image_preprocess", inputs, "PIXELS")
    assert run.batch_sizes == {len(payloads): 1}, run.describe()  # the corrupt one among them
    assert run.failures == [corrupt], run.describe()
    assert "IMAGE_BYTES: cannot decode image" in str(run.outcomes[corrupt])
    assert all(run.outcomes[i] == (1, 3, 224, 224) for i in range(len(payloads)) if i != corrupt), (
        run.describe()
    )


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "IMAGE_BYTES: cannot decode image: empty input (0 bytes)"),
        ("truncated", "IMAGE_BYTES: cannot decode image: image file is truncated"),
    ],
)
def test_preprocess_names_the_problem_with_empty_and_truncated_images(
    image_server, real_images, data, message: str
) -> None:
    if data == "truncated":
        data = real_images["rocket.jpg"][:20000]
    client = httpclient.InferenceServerClient(image_server.http_url)
    with pytest.raises(InferenceServerException, match=message.replace("(", r"\(").replace(")", r"\)")):
        client.infer("image_preprocess", [_bytes_input([data])])


def test_preprocess_refuses_a_decompression_bomb_from_its_header(image_server) -> None:
    buffer = io.BytesIO()
    Image.new("1", (10000, 6000)).save(buffer, format="PNG")  # 60 MP in ~8 kB of PNG
    client = httpclient.InferenceServerClient(image_server.http_url)
    with pytest.raises(InferenceServerException, match=r"IMAGE_BYTES: image too large: 10000x6000"):
        client.infer("image_preprocess", [_bytes_input([buffer.getvalue()])])


def test_postprocess_returns_the_top_5_of_known_logits(image_server) -> None:
    logits = np.zeros((2, 1000), dtype=np.float32)
    logits[0, [967, 504, 968, 10, 20]] = [9.0, 8.0, 7.0, 6.0, 5.0]
    logits[1, [285, 281, 282, 283, 284]] = [5.0, 4.0, 3.0, 2.0, 1.0]
    tensor = httpclient.InferInput("LOGITS", list(logits.shape), "FP32")
    tensor.set_data_from_numpy(logits)
    result = httpclient.InferenceServerClient(image_server.http_url).infer("image_postprocess", [tensor])
    assert result.as_numpy("CLASS_IDS").tolist() == [[967, 504, 968, 10, 20], [285, 281, 282, 283, 284]]
    assert result.as_numpy("LABELS")[0, 0] == b"espresso"
    assert result.as_numpy("LABELS")[1, :2].tolist() == [b"Egyptian cat", b"tabby, tabby cat"]
    scores = result.as_numpy("SCORES")
    expected = np.exp(logits[0]) / np.exp(logits[0]).sum()
    np.testing.assert_allclose(scores[0], expected[[967, 504, 968, 10, 20]], rtol=1e-5)
    assert np.all(np.diff(scores, axis=1) <= 0)


@pytest.mark.parametrize("ensemble", list(ENSEMBLES))
def test_ensemble_classifies_real_photographs(image_server, real_images, ensemble: str) -> None:
    client = httpclient.InferenceServerClient(image_server.http_url)
    result = client.infer(ensemble, [_bytes_input([real_images["chelsea.png"], real_images["coffee.png"]])])
    cat, coffee = result.as_numpy("CLASS_IDS").tolist()
    assert cat[0] in CAT_CLASSES and COFFEE_CLASSES & set(coffee)
    assert result.as_numpy("LABELS")[1, 0] == b"espresso"
    assert result.as_numpy("SCORES")[1, 0] > 0.5


def test_both_ensembles_agree_under_concurrent_load(image_server, real_images) -> None:
    client = httpclient.InferenceServerClient(image_server.http_url, concurrency=16)
    pictures = list(real_images.values())
    answers = {}
    for ensemble in ENSEMBLES:
        pending = [client.async_infer(ensemble, [_bytes_input([p])]) for p in pictures * 2]
        answers[ensemble] = [r.get_result().as_numpy("CLASS_IDS")[0].tolist() for r in pending]
    onnx_ids, torchscript_ids = answers.values()
    assert onnx_ids == torchscript_ids
