"""Scaffold a Python-backend model (``python -m export.scaffold python_model NAME``), for the user to fill.

It writes, and never overwrites:

- ``model_descriptions/NAME.yaml``: a ``python_model`` description whose ``configs.python_models`` entry
  states the model's tensors (``--input`` / ``--output NAME:DTYPE:DIMS``), batching and instances;
- ``model_repository/NAME/config.pbtxt``, generated from it by the generator of every shipped config;
- ``model_repository/NAME/1/model.py``: a TritonPythonModel batching through RequestBatcher, with the
  links to the helpers every Python model has. As scaffolded it rejects a request holding a NaN or an
  infinite float (that request alone, HTTP 400) and passes input i through to output i, so the outputs
  must pair with the inputs (same count and dims); the user's code replaces ``_run``;
- ``TESTS/test_NAME_model.py``: a pytest file that serves the model on a real local tritonserver, sends
  concurrent requests and checks each gets its own rows back, and that a bad request fails alone.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path
from string import Template
from typing import Any

from description.generated_configs import config_path, generate, refresh_command, write_configs
from description.model import PYTHON_KIND, parse_description
from export.common import ExportError, shown
from export.scaffold.files import (
    BATCHING,
    lay_out,
    parse_tensor,
    print_written,
    refuse_existing,
    write_description,
)
from tritonrepo.commands import EXIT_OK
from tritonrepo.served_code import BATCHING_HELPER, PARAMETERS_HELPER
from tritonrepo.tensors import TensorSpec

TEMPLATES = Path(__file__).resolve().parent / "templates"
FLOATS = ("FP16", "FP32", "FP64")
HEADER = (
    "# Scaffolded by `python -m export.scaffold python_model`; yours to edit. Its code is\n"
    "# model_repository/{name}/1/model.py; its config.pbtxt is generated from this file by\n"
    "# `{command}`.\n"
)


def _entry(tensor: TensorSpec) -> dict[str, Any]:
    return {"name": tensor.name, "dtype": tensor.datatype, "dims": list(tensor.dims)}


@dataclass(frozen=True, kw_only=True)
class PythonRequest:
    name: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    repository: Path
    models_dir: Path
    tests_dir: Path
    max_batch_size: int = 64

    def __post_init__(self) -> None:
        if not self.inputs or self.inputs[0].datatype not in FLOATS:
            raise ExportError(
                f"inputs {[t.name for t in self.inputs]}: the first must be one of {list(FLOATS)} (the "
                "scaffolded check rejects a non-finite value in it); add e.g. --input FEATURES:FP32:4 first"
            )
        paired = [t.dims for t in self.inputs] == [t.dims for t in self.outputs]
        if not paired:
            raise ExportError(
                f"outputs {[_entry(t) for t in self.outputs]} do not pair with inputs "
                f"{[_entry(t) for t in self.inputs]}: the scaffolded model passes input i through to "
                "output i, so give one output of the same dims per input; change them in the description "
                "when you change _run"
            )


def scaffold_python(request: PythonRequest) -> list[Path]:
    """Write the model's files; returns them. Raises ExportError before writing if any exists."""
    name = request.name
    data = _description_data(request)
    source = request.models_dir / f"{name}.yaml"
    description = parse_description(data, source=source)  # fails early when invalid
    version = request.repository / name / "1"
    test = request.tests_dir / f"test_{name}_model.py"
    made = generate(description, request.repository)
    configs = [config_path(request.repository, model) for model in made]
    targets = [source, *configs, version / "model.py", test]
    refuse_existing(targets)
    missing = [h for h in (BATCHING_HELPER, PARAMETERS_HELPER) if not (request.repository / h).is_file()]
    if missing:
        raise ExportError(
            f"{request.repository} has no {missing}, which model.py links to; scaffold into a model "
            "repository holding them (the project's model_repository does)"
        )
    write_description(source, HEADER.format(name=name, command=refresh_command(description)), data)
    write_configs(description, request.repository, made)  # the generator of every shipped config
    lay_out(description, request.repository, {})  # its version folder, with the helpers linked
    (version / "model.py").write_text(_filled("model.py.template", name=name), encoding="utf-8")
    request.tests_dir.mkdir(parents=True, exist_ok=True)
    relative = os.path.relpath(request.repository.resolve(), request.tests_dir.resolve())
    test.write_text(
        _filled("test_model.py.template", name=name, repository=Path(relative).as_posix()), encoding="utf-8"
    )
    return targets


def _description_data(request: PythonRequest) -> dict[str, Any]:
    entry = {
        "model": request.name,
        "about": f"Scaffolded Python-backend model {request.name}; say here what it computes",
        "inputs": [_entry(t) for t in request.inputs],
        "outputs": [_entry(t) for t in request.outputs],
        "max_batch_size": request.max_batch_size,
        "dynamic_batching": BATCHING,
        "instance_groups": [{"kind": "KIND_CPU", "count": 2}],
    }
    return {"name": request.name, "kind": PYTHON_KIND, "configs": {"python_models": [entry]}}


def _filled(template: str, **values: str) -> str:
    return Template((TEMPLATES / template).read_text(encoding="utf-8")).substitute(values)


def python_main(args: argparse.Namespace) -> int:
    """``python -m export.scaffold python_model NAME ...``: write the files, print them and what is next."""
    written = scaffold_python(
        PythonRequest(
            name=args.name,
            inputs=tuple(parse_tensor(t) for t in args.input or ["INPUT:FP32:4"]),
            outputs=tuple(parse_tensor(t) for t in args.output or ["OUTPUT:FP32:4"]),
            repository=args.repository,
            models_dir=args.models,
            tests_dir=args.tests,
        )
    )
    print_written(written)
    model, test = written[-2:]
    print(f"next: fill _run in {shown(model)}, then python -m pytest {shown(test)}")
    return EXIT_OK
