"""`python -m clients infer`'s inputs and outputs, without a server: .npy arrays, .json nested lists (NaN
and infinities spelled as JSON can), one JSON request and a file's bytes for a BYTES input, made tensors
of the model's datatypes; each mistake is a usage error (exit code 2) naming the file or the argument.
And the exit codes of the failures a server answers: an overloaded or restarting model is not an
unreachable server."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import skimage
from tritonclient.utils import InferenceServerException

from clients import cli
from clients.errors import wrap_error
from clients.infer import _plain
from clients.infer_inputs import InputFileError, read_inputs, tensors
from clients.model_info import ModelSignature
from tritonrepo.tensors import TensorSpec

PHOTO = Path(skimage.__file__).parent / "data" / "chelsea.png"
TABULAR = ModelSignature(
    name="tabular",
    platform="python",
    inputs=(
        TensorSpec(name="FEATURES", datatype="FP32", dims=(3,)),
        TensorSpec(name="IDS", datatype="INT64", dims=(1,)),
        TensorSpec(name="MASK", datatype="BOOL", dims=(1,)),
    ),
    outputs=(TensorSpec(name="LOGITS", datatype="FP32", dims=(2,)),),
    max_batch_size=8,
)
CLASSIFIER = ModelSignature(
    name="image_classifier",
    platform="ensemble",
    inputs=(TensorSpec(name="IMAGE_BYTES", datatype="BYTES", dims=(1,)),),
    outputs=(TensorSpec(name="LABELS", datatype="BYTES", dims=(5,)),),
    max_batch_size=64,
)


def test_inputs_come_from_npy_and_json_files_and_one_json_request(tmp_path: Path) -> None:
    features = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.save(tmp_path / "features.npy", features)
    (tmp_path / "ids.json").write_text("[[1], [0]]")
    (tmp_path / "request.json").write_text(json.dumps({"MASK": [[True], [False]]}))
    given = read_inputs(
        [f"FEATURES={tmp_path / 'features.npy'}", f"IDS={tmp_path / 'ids.json'}"], tmp_path / "request.json"
    )
    arrays = tensors(TABULAR, given)
    assert sorted(arrays) == ["FEATURES", "IDS", "MASK"]
    assert arrays["FEATURES"].dtype == np.float32 and np.array_equal(arrays["FEATURES"], features)
    assert arrays["IDS"].tolist() == [[1], [0]] and arrays["MASK"].dtype == np.bool_


def test_a_photographs_bytes_go_to_a_bytes_input_one_row_per_file(tmp_path: Path) -> None:
    given = read_inputs([f"IMAGE_BYTES=@{PHOTO}", f"IMAGE_BYTES=@{PHOTO}"], None)
    (array,) = tensors(CLASSIFIER, given).values()
    assert array.shape == (2, 1) and array.dtype == np.object_
    assert array[1, 0] == PHOTO.read_bytes() and array[1, 0][:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("signature", "pair", "expected"),
    [
        (TABULAR, "FEATURES=@{photo}", "FEATURES is FP32, and @FILE sends a file's bytes to a BYTES input"),
        (
            ModelSignature(
                name="m",
                platform="python",
                inputs=(TensorSpec(name="PAIR", datatype="BYTES", dims=(2,)),),
                outputs=(),
                max_batch_size=4,
            ),
            "PAIR=@{photo}",
            "PAIR takes [batch, 2], and @FILE gives one value per file",
        ),
    ],
)
def test_a_files_bytes_for_an_input_that_cannot_hold_them_is_refused(
    signature: ModelSignature, pair: str, expected: str
) -> None:
    with pytest.raises(InputFileError) as raised:
        tensors(signature, read_inputs([pair.format(photo=PHOTO)], None))
    assert expected in str(raised.value)


def test_json_spells_nan_as_null_or_a_string_and_the_infinities_as_strings(tmp_path: Path) -> None:
    (tmp_path / "features.json").write_text('[[null, "NaN", 1.5], ["Infinity", "-Infinity", NaN]]')
    features = tensors(TABULAR, read_inputs([f"FEATURES={tmp_path / 'features.json'}"], None))["FEATURES"]
    assert np.isnan(features[0, :2]).all() and features[0, 2] == 1.5 and np.isnan(features[1, 2])
    assert features[1, :2].tolist() == [math.inf, -math.inf]


@pytest.mark.parametrize(
    ("name", "content", "expected"),
    [
        (
            "IDS",
            "[[1], [null]]",
            "IDS[1][0] is null; IDS is INT64 and takes INT64 values (NaN and infinities",
        ),
        ("IDS", '[["NaN"]]', 'IDS[0][0] is "NaN"; IDS is INT64'),
        (
            "FEATURES",
            '[[1, "nan", 2]]',
            'FEATURES[0][1] is "nan"; FEATURES is FP32 and takes numbers, null or',
        ),
        ("FEATURES", "[[1, 2, 3], [4]]", "FEATURES is not a rectangular nested list"),
    ],
)
def test_json_that_the_inputs_datatype_cannot_hold_is_refused_naming_where(
    tmp_path: Path, name: str, content: str, expected: str
) -> None:
    (tmp_path / "input.json").write_text(content)
    with pytest.raises(InputFileError) as raised:
        tensors(TABULAR, read_inputs([f"{name}={tmp_path / 'input.json'}"], None))
    assert str(raised.value).startswith(f"{tmp_path / 'input.json'}: ")
    assert expected in str(raised.value)


def test_json_output_spells_nan_and_the_infinities_as_the_inputs_read_them() -> None:
    printed = _plain(np.array([[math.nan, math.inf], [-math.inf, 0.5]], dtype=np.float32))
    assert printed == [["NaN", "Infinity"], ["-Infinity", 0.5]]
    assert json.loads(json.dumps(printed)) == printed  # valid JSON: no bare NaN token


@pytest.mark.parametrize(
    ("pairs", "request_json", "expected"),
    [
        (["FEATURES"], None, "--input must be NAME=FILE or NAME=@FILE, got 'FEATURES'"),
        (["X=@"], None, "--input must be NAME=FILE or NAME=@FILE, got 'X=@'"),
        (["X=rows.csv"], None, "an input file is .npy or .json, got .csv; to send the file's bytes, write"),
        (["X=absent.npy"], None, "cannot read absent.npy as a .npy array"),
        (["X=@absent.jpg"], None, "cannot read absent.jpg: No such file or directory"),
        (["X=broken.json"], None, "broken.json is not valid JSON"),
        (["X=list.json", "X=list.json"], None, "input X is given twice"),
        (["X=list.json", "X=@list.json"], None, "input X is given twice"),
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
    code = cli.main(
        ["--url", "http://127.0.0.1:9", "infer", "any_model", "--input", f"X=@{tmp_path / 'absent.jpg'}"]
    )
    assert code == 2
    assert "absent.jpg" in capsys.readouterr().err


# Answers as tritonserver 2.51 gives them (docs/failure-modes.md), and the exit code of each.
ANSWERS = [
    ("[request id: <id_unknown>] Exceeds maximum queue size", "503", cli.EXIT_BUSY),
    ("Request timeout expired", "StatusCode.UNAVAILABLE", cli.EXIT_BUSY),
    ("Stub process 'image_preprocess_0_0' is not healthy.", "500", cli.EXIT_BUSY),
    ("Request for unknown model: 'text_embedder' has no available versions", "400", cli.EXIT_BUSY),
    ("failed to connect to all addresses", "StatusCode.UNAVAILABLE", cli.EXIT_UNREACHABLE),
    ("IMAGE_BYTES: cannot decode image", "400", cli.EXIT_FAILED),
]


@pytest.mark.parametrize(("message", "status", "code"), ANSWERS)
def test_an_overloaded_or_restarting_model_has_its_own_exit_code_and_the_servers_words(
    message: str, status: str, code: int, capsys: pytest.CaptureFixture[str]
) -> None:
    error = wrap_error(InferenceServerException(msg=message, status=status), model="image_classifier")
    assert error is not None
    error.attempts = 3
    assert cli.report_failure(error, "http://127.0.0.1:8000") == code
    printed = capsys.readouterr().err
    assert message in printed
    busy = "error: the model cannot take the request now, retry later (3 attempt(s)); the server said: "
    assert printed.startswith(busy) is (code == cli.EXIT_BUSY)
    assert ("unreachable after 3 attempt(s)" in printed) is (code == cli.EXIT_UNREACHABLE)


def test_of_several_inputs_unreachable_wins_then_busy_then_failed() -> None:
    def error(message: str, status: str) -> object:
        return wrap_error(InferenceServerException(msg=message, status=status))

    busy, failed = error(*ANSWERS[0][:2]), error(*ANSWERS[-1][:2])
    unreachable = error(*ANSWERS[-2][:2])
    assert cli._status(["ok", failed, busy]) == cli.EXIT_BUSY
    assert cli._status([busy, unreachable, failed]) == cli.EXIT_UNREACHABLE
    assert cli._status(["ok", failed]) == cli.EXIT_FAILED and cli._status(["ok"]) == cli.EXIT_OK
