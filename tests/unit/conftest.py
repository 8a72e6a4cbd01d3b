"""A stand-in for ``triton_python_backend_utils``, so that each Python model's execute() runs here on fake
requests exactly as Triton calls it: a request is a dict of input name -> array, a response keeps its
outputs as a dict and its error (message and code)."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess  # only to refuse it (_no_process)
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


# What libraries run once when first imported, to read the machine (numpy.testing: lscpu; torch's CUDA
# library finder: ldconfig -p): probes, not a test's own command, so the refusal lets them through.
IMPORT_PROBES = frozenset({"lscpu", "ldconfig"})


@pytest.fixture(autouse=True)
def _no_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """The unit tier starts no process, through the code under test included (tests/unit/test_no_process.py
    reads the tests' own sources): a test that needs one belongs in tests/checks."""
    popen_init = subprocess.Popen.__init__

    def refuse(*args: object, **kwargs: object) -> None:
        what = next((a for a in args if not isinstance(a, subprocess.Popen)), kwargs)
        raise AssertionError(f"a unit test started a process ({what!r}); move the test to tests/checks")

    def popen(self: subprocess.Popen, args: object, *rest: object, **kwargs: object) -> None:
        command = [args] if isinstance(args, (str, bytes, os.PathLike)) else list(args)  # type: ignore[call-overload]
        if command and Path(os.fsdecode(command[0])).name in IMPORT_PROBES:
            return popen_init(self, args, *rest, **kwargs)  # type: ignore[arg-type]
        refuse(args)

    monkeypatch.setattr(subprocess.Popen, "__init__", popen)
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system", "execv", "execve"):
        monkeypatch.setattr(os, name, refuse)
