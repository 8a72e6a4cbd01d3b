"""An image classifier of classes other than ImageNet's, end to end: real weights of ten classes (Lite0's
ImageNet weights with only those rows of its head, as a fine-tuned head has its own) and their labels go
through the scaffold (``--labels``), the export (fp32), the derived local repository and a real server,
and classify real photographs as eager PyTorch does. docs/your-model-own-classes.md walks through them.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from clients import TritonClient
from description.model import load_description
from export.efficientnet_lite import kind as image
from export.scaffold import cli as scaffold
from tritonlocal import LocalTritonServer, ServerConfig
from tritonrepo.paths import DESCRIPTIONS, REPOSITORY
from tritonrepo.served_code import (
    BATCHING_HELPER,
    PARAMETERS_HELPER,
    load_preprocess_module,
    preprocess_settings,
)

CATS = {"tabby", "tiger cat", "Egyptian cat"}  # chelsea.png's classes among own_classes' (tests/conftest.py)


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory, own_classes: Callable[..., tuple[Path, Path]]) -> Path:
    """The scaffold's starting point for an image classifier (the kind's Python models and the helpers
    they link, no exported file; Lite0's description) and ``own/``: the weights and their labels."""
    root = tmp_path_factory.mktemp("project")
    repository, descriptions = root / "model_repository", root / "model_descriptions"
    repository.mkdir()
    for helper in (BATCHING_HELPER, PARAMETERS_HELPER):
        shutil.copyfile(REPOSITORY / helper, repository / helper)
    for name in ("image_preprocess", "image_postprocess"):
        shutil.copytree(REPOSITORY / name, repository / name, symlinks=True)
    descriptions.mkdir()
    shutil.copyfile(DESCRIPTIONS / "efficientnet_lite0.yaml", descriptions / "efficientnet_lite0.yaml")
    own_classes(root / "own")
    return root


def _scaffold(project: Path, labels: Path) -> int:
    folders = [
        "--repository",
        str(project / "model_repository"),
        "--models",
        str(project / "model_descriptions"),
    ]
    argv = ["efficientnet_lite", "pets", "--weights-path", str(project / "own" / "weights.pt")]
    return scaffold.main([*argv, "--labels", str(labels), *folders])


def test_a_labels_file_of_another_count_than_the_weights_classes_is_refused_naming_both(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    short = project / "short_labels.txt"
    short.write_text("".join((project / "own" / "labels.txt").read_text().splitlines(keepends=True)[:-1]))
    assert _scaffold(project, short) == 1
    err = capsys.readouterr().err
    assert "has 9 labels, but the weights' classifier head (_fc.weight) has 10 classes" in err, err
    assert not (project / "model_descriptions" / "pets.yaml").exists()


def test_a_classifier_of_its_own_classes_serves_eager_pytorchs_top_1_with_its_labels(
    project: Path, export_and_derive: Callable[..., tuple[list, Path]]
) -> None:
    repository, models = project / "model_repository", project / "model_descriptions"
    labels = (project / "own" / "labels.txt").read_text().splitlines()
    assert _scaffold(project, project / "own" / "labels.txt") == 0
    description = load_description(models / "pets.yaml")
    results, local = export_and_derive(description, project)
    exported = [r for r in results if r.path.name == "model.onnx"]
    assert [r.written for r in exported] == [True], [str(r) for r in results]
    assert exported[0].selection is not None and exported[0].selection.served == "onnx-fp32"
    kept = sorted(path.name for path in local.iterdir() if path.is_dir())
    assert kept == ["pets_classifier", "pets_onnx", "pets_postprocess", "pets_preprocess"]

    paths = image.sample_image_paths()
    module = load_preprocess_module(repository, "pets_preprocess")
    pixels = module.preprocess(
        [p.read_bytes() for p in paths], preprocess_settings(repository, module, "pets_preprocess")
    )
    with torch.no_grad():
        eager = image.load_model(description, repository)(torch.from_numpy(pixels)).numpy()
    assert eager.shape == (len(paths), len(labels))
    with LocalTritonServer(ServerConfig(model_repository=local, exit_timeout_s=2)) as server:
        with TritonClient(f"grpc://{server.grpc_url}", max_in_flight=8) as client:
            served = client.classify([p.read_bytes() for p in paths], model="pets_classifier")
    top = {path.name: result.labels[0] for path, result in zip(paths, served, strict=True)}
    for path, result, logits in zip(paths, served, eager, strict=True):
        expected = int(logits.argmax())
        assert result.class_ids[0] == expected, (
            f"{path.name}: served {result.labels}, eager {labels[expected]}"
        )
        assert result.labels[0] == labels[expected] and set(result.labels) <= set(labels)
        assert len(result.labels) == 5
    assert top["chelsea.png"] in CATS and top["coffee.png"] == "espresso", top
    print(f"served top-1 of each photograph: {top}")
