"""A stand-in for ``triton_python_backend_utils``, so that each Python model's execute() runs here on fake
requests exactly as Triton calls it: a request is a dict of input name -> array, a response keeps its
outputs as a dict and its error (message and code)."""

from __future__ import annotations

import ast
import json
import shutil
import sys
import types
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import json_format

from tritonrepo.configs import load_model_config
from tritonrepo.files import EXPORT_OUTPUTS
from tritonrepo.served_code import load_served_module

DEPLOYABLE = Path(__file__).resolve().parents[2] / "model_repository"
TRITON_DTYPES = {
    "TYPE_FP32": np.float32,
    "TYPE_INT32": np.int32,
    "TYPE_INT64": np.int64,
    "TYPE_STRING": np.object_,
}


class FakeTensor:
    def __init__(self, name: str, array: np.ndarray) -> None:
        self.name, self.array = name, array

    def as_numpy(self) -> np.ndarray:
        return self.array


class FakeResponse:
    def __init__(self, output_tensors: list[FakeTensor] | None = None, error: object = None) -> None:
        self.outputs = {tensor.name: tensor.array for tensor in output_tensors or []}
        self.error = error


class FakeError:
    INVALID_ARG = "INVALID_ARG"

    def __init__(self, message: str, code: str | None = None) -> None:
        self._message, self.code = message, code

    def message(self) -> str:
        return self._message


class FakeModelException(Exception):
    """What TritonModelException is to Triton: the whole execute() failed."""


def config_json(model_name: str) -> str:
    """The model config as Triton hands it to a Python model (JSON of the parsed config.pbtxt)."""
    config = load_model_config(DEPLOYABLE / model_name)
    return json.dumps(json_format.MessageToDict(config, preserving_proto_field_name=True))


@pytest.fixture
def fake_pb_utils(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    stub = types.ModuleType("triton_python_backend_utils")
    stub.Tensor = FakeTensor
    stub.InferenceResponse = FakeResponse
    stub.TritonError = FakeError
    stub.TritonModelException = FakeModelException
    stub.get_input_tensor_by_name = lambda request, name: FakeTensor(name, request[name])
    stub.triton_string_to_numpy = TRITON_DTYPES.__getitem__
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", stub)
    return stub


@pytest.fixture
def model_config_json() -> Callable[[str], str]:
    return config_json


@pytest.fixture
def triton_python_model(fake_pb_utils) -> Iterator[Callable]:
    """load(model_name, config=...) -> an initialised TritonPythonModel from <name>/1/model.py, given
    its config as JSON (default: its config.pbtxt's)."""
    loaded: list[str] = []

    def load(model_name: str, *, config: str | None = None):
        name = f"_test_{model_name}_model"
        module = load_served_module(DEPLOYABLE / model_name / "1" / "model.py", name=name)
        loaded.append(name)
        instance = module.TritonPythonModel()
        instance.initialize(
            {
                "model_config": config or config_json(model_name),
                "model_repository": str(DEPLOYABLE / model_name),
                "model_version": "1",
            }
        )
        return instance

    yield load
    for name in loaded:
        sys.modules.pop(name, None)


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


PROJECT_PACKAGES = frozenset(
    {"clients", "demo", "description", "export", "loadtest", "samples", "tritonrepo", "tritonlocal"}
)


@pytest.fixture(scope="session")
def import_closure() -> Callable[[str], tuple[set[str], set[str]]]:
    """``module`` -> (the project's top-level packages it reaches through its imports, every other
    top-level module those import): what an image that runs ``module`` must carry or install."""
    root = Path(__file__).resolve().parents[2]

    def closure(module: str) -> tuple[set[str], set[str]]:
        seen: set[str] = set()
        packages: set[str] = set()
        others: set[str] = set()
        pending = [module]
        while pending:
            name = pending.pop()
            path = root / (name.replace(".", "/") + ".py")
            path = path if path.is_file() else root / name.replace(".", "/") / "__init__.py"
            if name in seen or not path.is_file():
                continue
            seen.add(name)
            packages.add(name.split(".")[0])
            pending += [".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)]
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
                elif isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                else:
                    continue
                for imported in names:
                    top = imported.split(".")[0]
                    (pending.append(imported) if top in PROJECT_PACKAGES else others.add(top))
        return packages, others

    return closure


@pytest.fixture
def scaffold_project(tmp_path: Path) -> Path:
    """A copy of the shipped configs (no exported file) and descriptions, the scaffold's starting point."""
    shutil.copytree(
        DEPLOYABLE,
        tmp_path / "model_repository",
        symlinks=True,
        ignore=shutil.ignore_patterns(*EXPORT_OUTPUTS),
    )
    shutil.copytree(DEPLOYABLE.parent / "model_descriptions", tmp_path / "model_descriptions")
    return tmp_path


@pytest.fixture
def folders(scaffold_project: Path) -> list[str]:
    """The options that point a command (the scaffold's, the export's) at scaffold_project's folders."""
    return [
        "--repository",
        str(scaffold_project / "model_repository"),
        "--models",
        str(scaffold_project / "model_descriptions"),
    ]
