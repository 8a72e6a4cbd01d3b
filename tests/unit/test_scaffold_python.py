"""The python_model scaffold: a description whose config is generated as every shipped one is, a model.py
that batches through RequestBatcher (run here on fake requests), a test beside it for the user, and no file
written over."""

from __future__ import annotations

import ast
import json
import os
import shutil
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import yaml
from google.protobuf import json_format

from description.errors import DescriptionError
from description.generated_configs import config_text, generate
from description.model import PYTHON_KIND, load_description, parse_description
from export import __main__ as export_cli
from export.common import ExportError
from export.pipeline import Options, export_model
from export.precision.selection import Capabilities
from export.scaffold import cli as scaffold
from export.scaffold.files import parse_tensor
from export.scaffold.python import PythonRequest, scaffold_python
from tritonrepo.configs import load_model_config
from tritonrepo.served_code import BATCHING_HELPER, PARAMETERS_HELPER, load_served_module

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """An empty model repository holding the helpers every Python model links to."""
    (tmp_path / "model_repository").mkdir()
    for helper in (BATCHING_HELPER, PARAMETERS_HELPER):
        shutil.copyfile(ROOT / "model_repository" / helper, tmp_path / "model_repository" / helper)
    return tmp_path


def _argv(project: Path, *tensors: str) -> list[str]:
    folders = {"--repository": "model_repository", "--models": "model_descriptions", "--tests": "tests"}
    return [
        "python_model",
        "my_scaler",
        *tensors,
        *(part for option, folder in folders.items() for part in (option, str(project / folder))),
    ]


TENSORS = ("--input", "FEATURES:FP32:4", "--input", "IDS:INT64:-1", "--output", "SCALED:FP32:4")
TENSORS += ("--output", "IDS_OUT:INT64:-1")


def test_a_python_model_gets_a_description_whose_generated_config_is_written(project: Path) -> None:
    assert scaffold.main(_argv(project, *TENSORS)) == 0
    description = load_description(project / "model_descriptions" / "my_scaler.yaml")
    assert description.kind == PYTHON_KIND and description.weights is None and not description.served
    assert description.configs is not None
    (spec,) = description.configs.python_models
    assert [(t.name, t.datatype, t.dims) for t in spec.inputs] == [
        ("FEATURES", "FP32", (4,)),
        ("IDS", "INT64", (-1,)),
    ]
    assert list(generate(description, project / "model_repository")) == ["my_scaler"]
    committed = (project / "model_repository" / "my_scaler" / "config.pbtxt").read_text()
    assert committed == config_text(
        description, generate(description, project / "model_repository")["my_scaler"]
    )
    config = load_model_config(project / "model_repository" / "my_scaler")
    assert (
        config.backend == "python"
        and config.max_batch_size == 64
        and config.dynamic_batching.preferred_batch_size
    )
    assert [o.name for o in config.output] == ["SCALED", "IDS_OUT"]


def test_the_scaffolded_model_and_test_compile_and_link_the_helpers(project: Path) -> None:
    assert scaffold.main(_argv(project)) == 0
    version = project / "model_repository" / "my_scaler" / "1"
    source = (version / "model.py").read_text()
    tree = ast.parse(source)
    assert "RequestBatcher" in source and "class TritonPythonModel" in source and "YOUR CODE" in source
    assert {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)} >= {
        "initialize",
        "execute",
        "_prepare",
        "_run",
        "_finish",
    }
    for helper in (BATCHING_HELPER, PARAMETERS_HELPER):
        assert os.readlink(version / helper) == os.path.join("..", "..", helper)
        assert (version / helper).resolve().is_file()
    test = (project / "tests" / "test_my_scaler_model.py").read_text()
    ast.parse(test)
    assert 'MODEL = "my_scaler"' in test and '/ "../model_repository"' in test and "LocalTritonServer" in test


def test_the_scaffolded_model_splits_a_batch_and_fails_only_the_bad_request(
    project: Path, fake_pb_utils: types.ModuleType
) -> None:
    assert scaffold.main(_argv(project, *TENSORS)) == 0
    folder = project / "model_repository" / "my_scaler"
    config = json_format.MessageToDict(load_model_config(folder), preserving_proto_field_name=True)
    module = load_served_module(folder / "1" / "model.py", name="_test_scaffolded_model")
    try:
        model = module.TritonPythonModel()
        model.initialize(
            {"model_config": json.dumps(config), "model_repository": str(folder), "model_version": "1"}
        )
        good = [
            {"FEATURES": np.full((rows, 4), rows, np.float32), "IDS": np.arange(rows * 3).reshape(rows, 3)}
            for rows in (1, 2, 3)
        ]
        bad = {"FEATURES": np.array([[1, np.inf, 2, 3]], np.float32), "IDS": np.zeros((1, 3), np.int64)}
        responses = model.execute([good[0], bad, good[1], good[2]])
    finally:
        sys.modules.pop("_test_scaffolded_model", None)
    assert responses[1].error.code == "INVALID_ARG"
    assert responses[1].error.message().startswith("FEATURES: 1 value(s) are NaN or infinite")
    for request, response in zip(good, [responses[0], *responses[2:]], strict=True):
        assert response.error is None
        np.testing.assert_array_equal(response.outputs["SCALED"], request["FEATURES"])
        np.testing.assert_array_equal(response.outputs["IDS_OUT"], request["IDS"])


def test_the_python_model_scaffold_never_overwrites_and_refuses_what_it_cannot_serve(project: Path) -> None:
    assert scaffold.main(_argv(project)) == 0
    again = PythonRequest(
        name="my_scaler",
        inputs=(parse_tensor("INPUT:FP32:4"),),
        outputs=(parse_tensor("OUTPUT:FP32:4"),),
        repository=project / "model_repository",
        models_dir=project / "model_descriptions",
        tests_dir=project / "tests",
    )
    with pytest.raises(ExportError, match="not overwriting .*my_scaler.yaml"):
        scaffold_python(again)
    with pytest.raises(ExportError, match="do not pair with inputs"):
        PythonRequest(**{**again.__dict__, "outputs": (parse_tensor("OUTPUT:FP32:8"),)})
    with pytest.raises(ExportError, match="the first must be one of"):
        PythonRequest(**{**again.__dict__, "inputs": (parse_tensor("IDS:INT64:4"),)})
    with pytest.raises(ExportError, match="write NAME:DTYPE:DIMS"):
        parse_tensor("FEATURES:FP32")
    bare = project / "bare"
    bare.mkdir()
    with pytest.raises(ExportError, match="which model.py links to"):
        scaffold_python(PythonRequest(**{**again.__dict__, "name": "other", "repository": bare}))
    assert not (project / "model_descriptions" / "other.yaml").exists()


def test_a_python_model_with_weights_or_a_native_section_is_refused(project: Path) -> None:
    assert scaffold.main(_argv(project)) == 0
    path = project / "model_descriptions" / "my_scaler.yaml"
    text = path.read_text()
    path.write_text(text + "weights: {package: p, loader: 'm:f'}\n")
    with pytest.raises(DescriptionError, match="a python_model has no weights, served or preprocessing"):
        load_description(path)
    data = yaml.safe_load(text)
    data["configs"]["python_models"] = []
    with pytest.raises(DescriptionError, match="a python_model needs configs.python_models"):
        parse_description(data, source=path)


def test_an_edited_python_model_description_regenerates_its_config_and_the_export_writes_only_that(
    project: Path,
) -> None:
    assert scaffold.main(_argv(project)) == 0
    path = project / "model_descriptions" / "my_scaler.yaml"
    path.write_text(path.read_text().replace("max_batch_size: 64", "max_batch_size: 16"))
    folders = [
        "--models",
        str(project / "model_descriptions"),
        "--repository",
        str(project / "model_repository"),
    ]
    assert export_cli.main(["--only", "my_scaler", "--configs-only", *folders]) == 0
    assert load_model_config(project / "model_repository" / "my_scaler").max_batch_size == 16
    path.write_text(path.read_text().replace("max_batch_size: 16", "max_batch_size: 8"))
    options = Options(
        repository=project / "model_repository",
        precision="fp32",
        capabilities=Capabilities.detect(),
        record_dir=project / "precision",
    )
    results = export_model(load_description(path), options)
    assert [(r.model, r.written, r.failure) for r in results] == [("my_scaler", True, "")]
    assert load_model_config(project / "model_repository" / "my_scaler").max_batch_size == 8
