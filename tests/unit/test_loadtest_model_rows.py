"""perf_analyzer's input data for a model of any tensors: the real rows its description names, else random
values within its config's datatypes and dims and the ranges the export recorded (no server)."""

from __future__ import annotations

import base64
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import yaml

from description.model import load_description
from description.module_code import load_callable
from loadtest.load import model_rows
from loadtest.load.perf_inputs import write_input_data
from tritonrepo.configs import parse_config
from tritonrepo.paths import DESCRIPTIONS, REPOSITORY

TABULAR = "diabetes_classifier_onnx"


def _decoded(entry: dict, dtype: type) -> np.ndarray:
    return np.frombuffer(base64.b64decode(entry["b64"]), dtype=dtype).reshape(entry["shape"])


@pytest.fixture
def python_model(tmp_path: Path, write_config: Callable[..., Path]) -> Callable[..., Path]:
    """``make(name, *inputs, bounds=None)``: a Python model of ``inputs`` under ``tmp_path``, with a manifest
    recording ``bounds``; returns ``tmp_path``."""

    def make(name: str, *inputs: tuple[str, str, list[int]], bounds: dict | None = None) -> Path:
        write_config(tmp_path, name, *inputs, backend="python")
        if bounds is not None:
            (tmp_path / name / "1" / ".export.json").write_text(json.dumps({"input_bounds": bounds}))
        return tmp_path

    return make


def test_the_tabular_model_is_sent_every_real_row_its_description_names(tmp_path: Path) -> None:
    data = write_input_data(TABULAR, REPOSITORY, tmp_path / "rows.json", entries=16)
    entries = json.loads(data.path.read_text())["data"]
    description = load_description(DESCRIPTIONS / "diabetes_classifier.yaml")
    assert description.module is not None
    check = load_callable(description.module.check_inputs, description.folder, where="test")()
    patients = {(*f.tolist(), int(s[0])) for f, s in zip(check["FEATURES"], check["SEX"], strict=True)}
    sent = [
        (*_decoded(e["FEATURES"], np.float32).tolist(), int(_decoded(e["SEX"], np.int64)[0])) for e in entries
    ]
    assert data.kind == "described rows" and data.shape_args == []
    assert len(sent) == data.entries and len(sent) >= len(patients) and len(sent) % 2 == 1
    assert set(sent) == patients  # every patient's row, nothing invented
    assert sent[: len(patients)] != sorted(sent[: len(patients)])  # shuffled, not in the data set's order
    assert all(e["FEATURES"]["shape"] == [9] and e["SEX"]["shape"] == [1] for e in entries)


def test_rows_the_served_config_does_not_declare_are_refused_naming_the_fix(
    tmp_path: Path, python_model: Callable[..., Path]
) -> None:
    (tmp_path / "code.py").write_text(
        "import numpy as np\n\ndef rows():\n    return {'X': np.zeros((3, 4), dtype=np.float32)}\n"
    )
    description = {
        "name": "toy",
        "kind": "torch_module",
        "weights": {"path": "toy.pt", "sha256": "0" * 64},
        "module": {
            "model": "code.py:rows",
            "check_inputs": "code.py:rows",
            "inputs": [{"name": "X", "dtype": "FP32", "dims": [4]}],
            "outputs": [
                {"name": "OUT", "dtype": "FP32", "dims": [1], "metric": "max_abs_diff", "tolerance": 1}
            ],
            "max_batch_size": 8,
            "dynamic_batching": {"max_queue_delay_us": 0, "preferred_batch_sizes": [8]},
            "instance_groups": [{"kind": "KIND_CPU", "count": 1}],
        },
        "served": [{"model": "toy_onnx", "format": "onnx"}],
    }
    (tmp_path / "toy.yaml").write_text(yaml.safe_dump(description))
    python_model("toy_onnx", ("X", "FP32", [5]))
    config = parse_config(tmp_path / "toy_onnx" / "config.pbtxt")
    with pytest.raises(ValueError, match=r"X rows of float32 \[4\]; the served config declares FP32 \[5\].*"):
        model_rows.described_rows("toy_onnx", config, tmp_path)
    assert model_rows.described_rows("not_described", config, tmp_path) is None


def test_an_undescribed_model_gets_random_values_of_its_dtypes_dims_and_recorded_ranges(
    tmp_path: Path, python_model: Callable[..., Path]
) -> None:
    tensors = (("X", "FP32", [2, 3]), ("ID", "INT64", [4]), ("COUNT", "INT32", [1]), ("MASK", "BOOL", [2]))
    root = python_model("rows", *tensors, bounds={"ID": [3, 5]})
    data = write_input_data("rows", root, tmp_path / "rows.json", entries=40)
    entries = json.loads(data.path.read_text())["data"]
    assert data.kind == "random rows" and len(entries) == 41  # an odd count of at least the entries asked
    features = np.stack([_decoded(e["X"], np.float32) for e in entries])
    ids = np.stack([_decoded(e["ID"], np.int64) for e in entries])
    counts = np.stack([_decoded(e["COUNT"], np.int32) for e in entries])
    masks = np.stack([_decoded(e["MASK"], np.bool_) for e in entries])
    assert features.shape == (41, 2, 3) and np.isfinite(features).all() and features.std() > 0.5
    assert ids.shape == (41, 4) and set(np.unique(ids)) == {3, 4, 5}  # the whole range, nothing outside
    assert not counts.any()  # no range recorded: zeros, the value every warm-up sends
    assert masks.shape == (41, 2) and masks.any() and not masks.all()


def test_a_derived_configs_input_bounds_parameter_gives_the_range(
    tmp_path: Path, python_model: Callable[..., Path]
) -> None:
    root = python_model("ids", ("ID", "INT64", [1]))
    with open(root / "ids" / "config.pbtxt", "a") as config:  # as tritonrepo/derive.py writes it
        config.write('parameters { key: "input_bounds" value: { string_value: \'{"ID": [7, 8]}\' } }\n')
    data = write_input_data("ids", root, tmp_path / "ids.json", entries=20)
    ids = {int(_decoded(e["ID"], np.int64)[0]) for e in json.loads(data.path.read_text())["data"]}
    assert ids == {7, 8}


@pytest.mark.parametrize(
    ("tensor", "refusal"),
    [
        (("NAME", "STRING", [1]), "no real data is known for its STRING input 'NAME'"),
        (("X", "FP32", [2, -1]), r"'X' has variable dims \[2, -1\]"),
    ],
)
def test_inputs_random_values_cannot_fill_are_refused_naming_check_inputs(
    tmp_path: Path, python_model: Callable[..., Path], tensor: tuple[str, str, list[int]], refusal: str
) -> None:
    root = python_model("odd", tensor)
    with pytest.raises(ValueError, match=refusal + ".*module.check_inputs"):
        write_input_data("odd", root, tmp_path / "odd.json")


def test_a_copy_of_the_tabular_config_in_another_repository_keeps_its_described_rows(tmp_path: Path) -> None:
    """The bench and the tuning write input data from derived repositories: the description is found by
    the served model's name, wherever its config lives."""
    shutil.copytree(REPOSITORY / TABULAR, tmp_path / TABULAR, ignore=shutil.ignore_patterns("[0-9]*"))
    data = write_input_data(TABULAR, tmp_path, tmp_path / "rows.json", entries=4)
    first = json.loads(data.path.read_text())["data"][0]
    assert data.kind == "described rows" and int(_decoded(first["SEX"], np.int64)[0]) in (0, 1)
