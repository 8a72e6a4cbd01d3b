"""The typed reader of a model's config parameters (model_repository/pybackend_parameters.py) that every
Python-side model uses: one error, naming the model, the parameter and what was expected."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest

from tritonrepo.served_code import load_served_module

READER = Path(__file__).resolve().parents[2] / "model_repository" / "pybackend_parameters.py"


@pytest.fixture
def reader() -> types.ModuleType:
    name = "_test_pybackend_parameters"
    yield load_served_module(READER, name=name)
    sys.modules.pop(name, None)


def _parameters(reader: types.ModuleType, **values: str):
    config = {"name": "scaler", "parameters": {k: {"string_value": v} for k, v in values.items()}}
    return reader.ModelParameters(config)


def test_each_type_is_read_from_its_string_value(reader) -> None:
    parameters = _parameters(
        reader, k="5", scale="0.5", mean="0.4,0.5,0.6", lengths="16,64", on="TRUE", bounds='{"X": [0, 9]}'
    )
    assert parameters.integer("k") == 5
    assert parameters.number("scale") == 0.5
    assert parameters.numbers("mean") == (0.4, 0.5, 0.6)
    assert parameters.integers("lengths") == (16, 64)
    assert parameters.flag("on") is True
    assert parameters.json("bounds") == {"X": [0, 9]}
    assert parameters.text("k") == "5"


def test_a_missing_parameter_takes_its_default_or_names_itself(reader) -> None:
    parameters = _parameters(reader)
    assert parameters.integers("lengths", default=()) == ()
    assert parameters.flag("on", default=False) is False
    with pytest.raises(
        reader.ParameterError, match=r"^scaler: config parameter 'k' is missing; expected an integer"
    ):
        parameters.integer("k")


@pytest.mark.parametrize(
    ("read", "value", "expected"),
    [
        ("integer", "five", "an integer"),
        ("number", "", "a number"),
        ("numbers", "0.5,x", "comma-separated numbers"),
        ("flag", "yes", "true or false"),
        ("json", "{", "JSON"),
    ],
)
def test_a_malformed_parameter_names_its_value_and_what_was_expected(reader, read, value, expected) -> None:
    with pytest.raises(
        reader.ParameterError, match=rf"^scaler: config parameter 'p' is {value!r}; expected {expected}"
    ):
        getattr(_parameters(reader, p=value), read)("p")


def test_an_integer_below_its_minimum_is_malformed(reader) -> None:
    with pytest.raises(reader.ParameterError, match="expected an integer of at least 1"):
        _parameters(reader, k="0").integer("k", minimum=1)


def test_an_empty_value_left_out_of_the_json_reads_as_empty(reader) -> None:
    config = json.loads('{"name": "m", "parameters": {"length_buckets": {}}}')
    assert reader.ModelParameters(config).integers("length_buckets") == ()


@pytest.mark.parametrize(
    ("model_name", "parameter"),
    [("image_postprocess", "top_k"), ("image_preprocess", "mean_rgb"), ("text_tokenizer", "max_length")],
)
def test_a_model_with_a_missing_parameter_fails_to_load_with_the_readers_error(
    triton_python_model, model_config_json, model_name: str, parameter: str
) -> None:
    config = json.loads(model_config_json(model_name))
    del config["parameters"][parameter]
    with pytest.raises(ValueError, match=f"^{model_name}: config parameter '{parameter}' is missing"):
        triton_python_model(model_name, config=json.dumps(config))
