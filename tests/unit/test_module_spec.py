"""A torch_module description read (description/module_spec.py): each mistake is refused naming the model, the
field and the fix. Weights a committed script produces run it: tests/checks/test_produced_weights.py."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from description.errors import DescriptionError
from description.model import parse_description

ROOT = Path(__file__).resolve().parents[2]
TABULAR = ROOT / "model_descriptions" / "diabetes_classifier.yaml"


def _data() -> dict:
    return yaml.safe_load(TABULAR.read_text())


def _refused(data: dict, tmp_path: Path) -> str:
    with pytest.raises(DescriptionError) as raised:
        parse_description(data, source=tmp_path / "model.yaml")
    return str(raised.value)


def _with(change: dict, *path: str | int) -> dict:
    """The tabular description with the mapping at ``path`` under ``module`` updated by ``change``."""
    data = _data()
    target = data["module"]
    for key in path:
        target = target[key]
    target.update(change)
    return data


def test_the_shipped_tabular_description_reads_with_every_field_typed() -> None:
    description = parse_description(_data(), source=TABULAR)
    spec = description.module
    assert spec is not None and description.kind == "torch_module"
    assert [(d.name, d.datatype, d.dims) for d in spec.inputs] == [
        ("FEATURES", "FP32", (9,)),
        ("SEX", "INT64", (1,)),
    ]
    assert spec.inputs[1].value_range == (0, 1)
    assert (spec.outputs[0].metric, spec.outputs[0].tolerance, spec.outputs[0].variant_tolerance) == (
        "max_abs_diff",
        1e-4,
        0.05,
    )
    assert spec.dynamic_batching.preferred_batch_sizes == (16, 64) and spec.max_batch_size == 64


@pytest.mark.parametrize(
    ("change", "path", "expected"),
    [
        ({"dtype": "FLOAT"}, ("inputs", 0), "module.inputs[0].dtype: 'FLOAT' is not a datatype; use one of"),
        ({"dims": [9, 0]}, ("inputs", 0), "module.inputs[0].dims: [9, 0] is not a list of sizes"),
        (
            {"range": [0, 1]},
            ("inputs", 0),
            "module.inputs[0].range: FEATURES is FP32; bound integer inputs only",
        ),
        ({"range": [1, 2]}, ("inputs", 1), "containing 0 (the warm-up sends zeros)"),
        ({"name": "SEX"}, ("inputs", 0), "tensor names ['SEX'] repeat"),
        ({"name": "FEATURES__1"}, ("inputs", 0), "call it NAME__0 or drop the suffix"),
        (
            {"metric": "rmse"},
            ("outputs", 0),
            "module.outputs[0].metric: 'rmse' is not a metric; choose one of",
        ),
        ({"variant_tolerance": 1e-6}, ("outputs", 0), "variant_tolerance: 1e-06 is stricter than tolerance"),
        ({"metric": "cosine", "tolerance": 2.0}, ("outputs", 0), "cosine is a share from 0 to 1"),
        ({"preferred_batch_sizes": [16, 128]}, ("dynamic_batching",), "[128] exceed max_batch_size 64"),
        ({"max_queue_delay_ms": 1}, ("dynamic_batching",), "unknown keys ['max_queue_delay_ms']"),
        ({"kind": "KIND_TPU"}, ("instance_groups", 0), "module.instance_groups[0].kind: 'KIND_TPU'"),
        (
            {"model": "examples/tabular/diabetes.py"},
            (),
            "module.model: 'examples/tabular/diabetes.py' is not a",
        ),
        ({"scripted": True}, (), "module: unknown keys ['scripted']"),
    ],
)
def test_a_mistake_in_the_module_section_is_refused_naming_model_field_and_fix(
    tmp_path: Path, change: dict, path: tuple, expected: str
) -> None:
    message = _refused(_with(change, *path), tmp_path)
    assert message.startswith("model 'diabetes_classifier': module"), message
    assert expected in message, message


def test_an_integer_output_can_only_be_compared_by_its_largest_difference(tmp_path: Path) -> None:
    data = _with({"dtype": "INT64", "metric": "top1_agreement", "tolerance": 1.0}, "outputs", 0)
    assert "top1_agreement compares floating-point outputs; use max_abs_diff" in _refused(data, tmp_path)


def test_a_torch_module_states_its_tolerance_per_output_and_other_kinds_have_no_module(
    tmp_path: Path,
) -> None:
    assert "states a tolerance per output" in _refused(_data() | {"tolerance": 1e-3}, tmp_path)
    image = yaml.safe_load((ROOT / "model_descriptions" / "efficientnet_lite0.yaml").read_text())
    assert "has a module section and no other kind" in _refused(
        image | {"module": _data()["module"]}, tmp_path
    )
    without = copy.deepcopy(_data())
    del without["module"]
    assert "has a module section and no other kind" in _refused(without, tmp_path)


def test_produced_weights_name_their_script_and_no_sha256(tmp_path: Path) -> None:
    data = _data()
    data["weights"]["sha256"] = "0" * 64
    assert "needs the path it writes and no sha256" in _refused(data, tmp_path)
