"""Weights that a committed script produces (description/produced_weights.py): produced once, again when the
training code changes, refused when changed afterwards, and a failing script reported; the script runs as a
process."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from description.errors import DescriptionError
from description.model import parse_description
from description.produced_weights import production_inputs, record_path

ROOT = Path(__file__).resolve().parents[2]
TABULAR = ROOT / "model_descriptions" / "diabetes_classifier.yaml"


def _data() -> dict:
    return yaml.safe_load(TABULAR.read_text())


SCRIPT = """
import sys
from pathlib import Path

runs = Path(__file__).with_name("runs.txt")
runs.write_text(runs.read_text() + "run\\n" if runs.exists() else "run\\n")
Path(sys.argv[1]).write_bytes(b"weights of version 1")
"""


def _produced_project(tmp_path: Path, script: str = SCRIPT) -> tuple[Path, Path]:
    (tmp_path / "training").mkdir(exist_ok=True)
    (tmp_path / "training" / "train.py").write_text(script)
    data = _data()
    data["weights"] = {"path": "build/weights.bin", "produced_by": "training/train.py"}
    description = parse_description(data, source=tmp_path / "model.yaml")
    return description.weights_path(), tmp_path / "training" / "runs.txt"


def test_weights_are_produced_once_and_recorded_with_what_produced_them(tmp_path: Path) -> None:
    weights, runs = _produced_project(tmp_path)
    assert weights.read_bytes() == b"weights of version 1"
    record = json.loads(record_path(weights).read_text())
    assert record["inputs"] == production_inputs(tmp_path / "training" / "train.py")
    assert "code:train.py" in record["inputs"] and record["inputs"]["python"] == sys.version.split()[0]
    _produced_project(tmp_path)  # the same code: nothing to produce
    assert runs.read_text() == "run\n"


def test_changed_training_code_produces_the_weights_again(tmp_path: Path) -> None:
    weights, runs = _produced_project(tmp_path)
    _produced_project(tmp_path, SCRIPT.replace("version 1", "version 2"))
    assert weights.read_bytes() == b"weights of version 2" and runs.read_text() == "run\nrun\n"


def test_weights_changed_after_they_were_produced_are_refused(tmp_path: Path) -> None:
    weights, _ = _produced_project(tmp_path)
    weights.write_bytes(b"someone else's weights")
    with pytest.raises(DescriptionError, match="the file changed after it was produced; delete it and"):
        _produced_project(tmp_path)


def test_a_failing_training_script_is_reported_with_its_error_and_leaves_no_file(tmp_path: Path) -> None:
    with pytest.raises(DescriptionError, match=r"(?s)exited 1 without writing WEIGHTS: .*ZeroDivisionError"):
        _produced_project(tmp_path, "1 / 0\n")
    assert not list((tmp_path / "build").iterdir())
