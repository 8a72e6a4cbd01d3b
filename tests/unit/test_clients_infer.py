"""`python -m clients infer`'s input files, read without a server: .npy arrays, .json nested lists, one
JSON request; each mistake is a usage error (exit code 2) naming the file or the argument."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from clients.cli import main
from clients.infer import InputFileError, read_inputs


def test_inputs_come_from_npy_and_json_files_and_one_json_request(tmp_path: Path) -> None:
    features = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.save(tmp_path / "features.npy", features)
    (tmp_path / "ids.json").write_text("[[1], [0]]")
    (tmp_path / "request.json").write_text(json.dumps({"MASK": [[True], [False]]}))
    arrays = read_inputs(
        [f"FEATURES={tmp_path / 'features.npy'}", f"IDS={tmp_path / 'ids.json'}"], tmp_path / "request.json"
    )
    assert sorted(arrays) == ["FEATURES", "IDS", "MASK"]
    assert arrays["FEATURES"].dtype == np.float32 and np.array_equal(arrays["FEATURES"], features)
    assert arrays["IDS"].tolist() == [[1], [0]] and arrays["MASK"].dtype == np.bool_


@pytest.mark.parametrize(
    ("pairs", "request_json", "expected"),
    [
        (["FEATURES"], None, "--input must be NAME=FILE, got 'FEATURES'"),
        (["X=rows.csv"], None, "an input file is .npy or .json, got .csv"),
        (["X=absent.npy"], None, "cannot read absent.npy as a .npy array"),
        (["X=broken.json"], None, "broken.json is not valid JSON"),
        (["X=list.json", "X=list.json"], None, "input X is given twice"),
        ([], "list.json", "expected a JSON object {input name: nested list}"),
        ([], None, "give the inputs: --input NAME=FILE"),
    ],
)
def test_a_wrong_input_argument_or_file_is_refused_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pairs: list[str], request_json: str | None, expected: str
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "broken.json").write_text("[[1, 2")
    (tmp_path / "list.json").write_text("[[1, 2]]")
    with pytest.raises(InputFileError) as raised:
        read_inputs(pairs, Path(request_json) if request_json else None)
    assert expected in str(raised.value)


def test_a_missing_input_file_exits_2_before_any_call(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Port 9 (discard) on loopback: nothing answers there, and nothing is asked.
    code = main(
        ["--url", "http://127.0.0.1:9", "infer", "any_model", "--input", f"X={tmp_path / 'absent.npy'}"]
    )
    assert code == 2
    assert "absent.npy" in capsys.readouterr().err
