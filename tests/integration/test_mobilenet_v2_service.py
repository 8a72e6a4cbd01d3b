"""MobileNetV2, a user's own module (examples/mobilenet_v2) described as a torch_module, classifying real
photographs through its served ensemble beside EfficientNet-Lite0, in the full local repository: the same
top-1 as the eager module on every photograph, and the TorchScript twin the same as the ONNX file."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from clients import Classification, TritonClient
from description.model import load_description
from export.torch_module.kind import check_batches, load_model
from samples import photograph_paths
from tritonlocal import LocalTritonServer

ROOT = Path(__file__).resolve().parents[2]
ENSEMBLE = "image_classifier_mobilenet_v2"
CAT_CLASSES = {281, 282, 283, 284, 285}  # tabby, tiger cat, Persian, Siamese, Egyptian cat
ESPRESSO = 967
DESCRIPTION = load_description(ROOT / "model_descriptions" / "mobilenet_v2.yaml")


@pytest.fixture(scope="module")
def client(triton_server: LocalTritonServer) -> Iterator[TritonClient]:
    with TritonClient(f"grpc://{triton_server.grpc_url}", max_in_flight=16) as client:
        yield client


@pytest.fixture(scope="module")
def eager() -> dict[str, np.ndarray]:
    """The photographs as the served preprocessing makes them (the export's check rows), and the eager
    module's logits for them."""
    pixels = np.concatenate([batch[0] for batch in check_batches(DESCRIPTION, ROOT / "model_repository")])
    with torch.no_grad():
        logits = load_model(DESCRIPTION)(torch.from_numpy(pixels)).numpy()
    return {"PIXELS": pixels, "LOGITS": logits}


def test_every_photograph_gets_the_eager_modules_top_1_through_the_ensemble_beside_lite0(
    client: TritonClient, eager: dict[str, np.ndarray]
) -> None:
    paths = photograph_paths()
    photos = [path.read_bytes() for path in paths]
    assert len(eager["LOGITS"]) == len(photos) >= 10
    served = client.classify(photos, model=ENSEMBLE)
    beside = client.classify(photos, model="image_classifier")
    print(_table(paths, served, beside))
    probabilities = torch.softmax(torch.from_numpy(eager["LOGITS"]), dim=1).numpy()
    for path, result, expected in zip(paths, served, probabilities, strict=True):
        assert result.class_ids[0] == int(expected.argmax()), f"{path.name}: {result.labels}"
        top = np.argsort(-expected, kind="stable")[: len(result.class_ids)]
        np.testing.assert_allclose(result.scores, expected[top], atol=1e-4, err_msg=path.name)
    named = {path.name: (a, b) for path, a, b in zip(paths, served, beside, strict=True)}
    assert {result.class_ids[0] for result in named["chelsea.png"]} <= CAT_CLASSES  # both models
    assert [result.class_ids[0] for result in named["coffee.png"]] == [ESPRESSO, ESPRESSO]


def test_the_torchscript_twin_gives_the_onnx_files_top_1_on_the_same_pixels(
    client: TritonClient, eager: dict[str, np.ndarray]
) -> None:
    assert DESCRIPTION.module is not None
    size = DESCRIPTION.module.max_batch_size  # the served models' largest batch
    batches = [{"PIXELS": eager["PIXELS"][i : i + size]} for i in range(0, len(eager["PIXELS"]), size)]
    onnx = np.concatenate([client.infer("mobilenet_v2_onnx", batch)["LOGITS"] for batch in batches])
    torchscript = np.concatenate(
        [client.infer("mobilenet_v2_torchscript", batch)["LOGITS"] for batch in batches]
    )
    expected = eager["LOGITS"].argmax(axis=1).tolist()
    assert onnx.argmax(axis=1).tolist() == expected == torchscript.argmax(axis=1).tolist()
    np.testing.assert_allclose(torchscript, eager["LOGITS"], atol=1e-3)


def _table(paths: list[Path], served: list[Classification], beside: list[Classification]) -> str:
    rows = [f"{'photograph':<22} {'MobileNetV2 top-1':<34} {'EfficientNet-Lite0 top-1':<34}"]
    for path, a, b in zip(paths, served, beside, strict=True):
        rows.append(f"{path.name:<22} {_top(a):<34} {_top(b):<34}")
    return "\n".join(rows)


def _top(result: Classification) -> str:
    return f"{result.labels[0][:26]} {result.scores[0]:.3f}"
