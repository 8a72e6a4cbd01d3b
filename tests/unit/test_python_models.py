"""Every Python model's execute() through the shared batching helper (model_repository/pybackend_batching.py),
run on fake requests with the stand-in for triton_python_backend_utils of tests/unit/conftest.py."""

from __future__ import annotations

import io
import json
import sys
import types
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tritonrepo.configs import load_repository
from tritonrepo.container_cpu import write_cpu_copy
from tritonrepo.derive import derive_repository
from tritonrepo.served_code import load_served_module
from tritonrepo.writer import NATIVE_RUNNER

DEPLOYABLE = Path(__file__).resolve().parents[2] / "model_repository"
HELPER = DEPLOYABLE / "pybackend_batching.py"
# Models whose execute() is the helper's, exercised on fake requests below.
CONVERTED = ("image_preprocess", "image_postprocess", "l2_normalize")
# Every Python-backend model of the repository, read from its config: a model added later (a described
# model's preprocessing, a scaffolded one) ships both helpers too, or the links test names it.
SHIPPING_THE_HELPER = tuple(
    sorted(name for name, entry in load_repository(DEPLOYABLE).items() if entry.config.backend == "python")
)
HELPERS = ("pybackend_batching.py", "pybackend_parameters.py")


def _png(size: tuple[int, int] = (300, 200)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, (200, 30, 60)).save(buffer, format="PNG")
    return buffer.getvalue()


def _good_request(model: str, rows: int) -> dict[str, np.ndarray]:
    if model == "l2_normalize":
        return {"VECTOR": np.arange(1, 16 * rows + 1, dtype=np.float32).reshape(rows, 16)}
    if model == "image_postprocess":
        return {"LOGITS": np.random.default_rng(rows).normal(size=(rows, 1000)).astype(np.float32)}
    return {"IMAGE_BYTES": np.array([[_png()]] * rows, dtype=np.object_)}


@pytest.fixture
def helper(fake_pb_utils) -> types.ModuleType:
    name = "_test_pybackend_batching"
    yield load_served_module(HELPER, name=name)
    sys.modules.pop(name, None)


def _config(inputs: dict[str, str], outputs: dict[str, str]) -> dict:
    """A model config as Triton hands it over, with only what the helper reads."""
    return {
        "input": [{"name": name, "data_type": dtype} for name, dtype in inputs.items()],
        "output": [{"name": name, "data_type": dtype} for name, dtype in outputs.items()],
    }


# -- the models ----------------------------------------------------------------------------------------
def test_l2_normalize_answers_each_request_with_its_own_rows(triton_python_model) -> None:
    model = triton_python_model("l2_normalize")
    vectors = [np.full((1, 16), 2.0, np.float32), np.eye(16, dtype=np.float32)[:3] * 5, -np.ones((2, 16))]
    responses = model.execute([{"VECTOR": v} for v in vectors])
    assert [r.error for r in responses] == [None, None, None]
    assert [r.outputs["NORMALIZED"].shape for r in responses] == [(1, 16), (3, 16), (2, 16)]
    np.testing.assert_allclose(responses[0].outputs["NORM"], [[8.0]])
    np.testing.assert_allclose(responses[1].outputs["NORMALIZED"], np.eye(16)[:3])
    np.testing.assert_allclose(responses[2].outputs["NORMALIZED"], -np.ones((2, 16)) / 4)
    assert responses[2].outputs["NORM"].dtype == np.float32  # the config's type, whatever came in


@pytest.mark.parametrize(
    ("row", "problem"),
    [
        (np.full(16, np.nan), "every value must be finite"),
        (np.zeros(16), "a row of all zeros has no direction"),
    ],
)
def test_l2_normalize_fails_a_bad_request_alone_as_invalid_input(
    triton_python_model, row: np.ndarray, problem: str
) -> None:
    model = triton_python_model("l2_normalize")
    bad = np.stack([np.ones(16), row]).astype(np.float32)
    good = _good_request("l2_normalize", 2)
    first, broken, last = model.execute([good, {"VECTOR": bad}, good])
    assert broken.error.message().startswith(f"VECTOR: {problem}")
    assert broken.error.code == "INVALID_ARG"  # HTTP 400 / gRPC INVALID_ARGUMENT, not 500
    assert first.error is None and last.error is None
    np.testing.assert_allclose(np.linalg.norm(last.outputs["NORMALIZED"], axis=1), [1.0, 1.0], rtol=1e-6)


@pytest.mark.parametrize("model_name", CONVERTED)
def test_a_result_with_the_wrong_row_count_fails_the_batch_before_the_split(
    triton_python_model, fake_pb_utils, model_name: str
) -> None:
    model = triton_python_model(model_name)
    run = model.batcher.run

    def drops_a_row(*columns):
        results = run(*columns)
        results = results if isinstance(results, tuple) else (results,)
        return tuple(result[:-1] for result in results)

    model.batcher.run = drops_a_row
    requests = [_good_request(model_name, 2), _good_request(model_name, 1)]
    with pytest.raises(fake_pb_utils.TritonModelException, match="has 2 rows for 3 input rows"):
        model.execute(requests)


@pytest.mark.parametrize("model_name", CONVERTED)
def test_each_model_answers_a_batch_of_good_requests_in_order(triton_python_model, model_name: str) -> None:
    model = triton_python_model(model_name)
    responses = model.execute([_good_request(model_name, rows) for rows in (2, 1, 3)])
    assert [r.error for r in responses] == [None, None, None]
    for response, rows in zip(responses, (2, 1, 3), strict=True):
        assert {len(value) for value in response.outputs.values()} == {rows}


# -- shipping ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("helper_name", HELPERS)
@pytest.mark.parametrize("model_name", SHIPPING_THE_HELPER)
def test_each_python_model_links_the_one_helper_from_its_version_folder(
    model_name: str, helper_name: str
) -> None:
    link = DEPLOYABLE / model_name / "1" / helper_name
    assert link.is_symlink(), f"{link} must be a link to ../../{helper_name}, not a copy"
    assert link.readlink() == Path("../..", helper_name)  # relative: resolves inside a mount
    assert link.resolve() == (DEPLOYABLE / helper_name).resolve()


# A model whose model.py links another model's (image_preprocess_lite2) is checked through that one.
PYTHON_MODELS = [
    DEPLOYABLE / model_py
    for model_py in sorted(
        {
            f"{name}/1/model.py"
            for name in SHIPPING_THE_HELPER
            if not (DEPLOYABLE / name / "1" / "model.py").is_symlink()
        }
    )
] + [NATIVE_RUNNER]


each_python_model = pytest.mark.parametrize(
    "model_py",
    PYTHON_MODELS,
    ids=lambda path: path.parent.parent.name if path.name == "model.py" else path.stem,
)


@each_python_model
def test_every_python_model_batches_through_the_one_helper(model_py: Path) -> None:
    source = model_py.read_text()
    assert "RequestBatcher(" in source and "return self.batcher.execute(requests)" in source
    assert "InferenceResponse" not in source and "np.split" not in source, "answer through RequestBatcher"


@each_python_model
def test_every_python_model_reads_its_parameters_with_the_one_reader(model_py: Path) -> None:
    source = model_py.read_text()
    assert '"parameters"' not in source and '"string_value"' not in source, "read them with ModelParameters"


def test_the_helper_file_is_not_a_model_and_the_derived_repository_keeps_the_link(tmp_path: Path) -> None:
    assert "pybackend_batching" not in load_repository(DEPLOYABLE)
    derive_repository(DEPLOYABLE, tmp_path / "local")
    for model_name in SHIPPING_THE_HELPER:
        assert (tmp_path / "local" / model_name / "1" / "pybackend_batching.py").resolve() == HELPER.resolve()


def test_the_container_variant_copies_the_helper_into_each_model_as_a_plain_file(tmp_path: Path) -> None:
    source = tmp_path / "source"
    (source / "scaler" / "1").mkdir(parents=True)
    (source / "scaler" / "config.pbtxt").write_text('name: "scaler"\nbackend: "python"\n')
    (source / "pybackend_batching.py").write_text("# the helper\n")
    (source / "scaler" / "1" / "pybackend_batching.py").symlink_to("../../pybackend_batching.py")
    write_cpu_copy(source, tmp_path / "cpu")  # mounted on its own: a link back would dangle
    copied = tmp_path / "cpu" / "scaler" / "1" / "pybackend_batching.py"
    assert not copied.is_symlink() and copied.read_text() == "# the helper\n"


def test_loading_a_model_outside_triton_leaves_no_bare_helper_module_behind(triton_python_model) -> None:
    triton_python_model("image_postprocess")
    assert "pybackend_batching" not in sys.modules


# -- the helper on its own -----------------------------------------------------------------------------
def test_per_request_work_after_the_one_call_gets_each_requests_slice(helper, fake_pb_utils) -> None:
    calls = []

    def run(texts: list[str]) -> list[list[int]]:
        calls.append(list(texts))
        return [[len(word) for word in text.split()] for text in texts]

    def pad(lengths: list[list[int]]) -> np.ndarray:  # each request padded to its own longest row
        width = max(len(row) for row in lengths)
        return np.array([row + [0] * (width - len(row)) for row in lengths])

    batcher = helper.RequestBatcher(
        _config({"TEXT": "TYPE_STRING"}, {"LENGTHS": "TYPE_INT64"}),
        prepare=lambda texts: [bytes(t).decode() for t in texts.reshape(-1)],
        run=run,
        finish=pad,
    )
    requests = [{"TEXT": np.array([[b"a bb"], [b"ccc"]], np.object_)}, {"TEXT": np.array([[b"d e f g"]])}]
    first, second = batcher.execute(requests)
    assert calls == [["a bb", "ccc", "d e f g"]]  # one call for the whole batch
    assert first.outputs["LENGTHS"].tolist() == [[1, 2], [3, 0]]
    assert second.outputs["LENGTHS"].tolist() == [[1, 1, 1, 1]]
    assert first.outputs["LENGTHS"].dtype == np.int64


def test_inputs_of_one_request_with_different_row_counts_fail_that_request_alone(helper) -> None:
    batcher = helper.RequestBatcher(
        _config({"A": "TYPE_FP32", "B": "TYPE_FP32"}, {"SUM": "TYPE_FP32"}), run=lambda a, b: a + b
    )
    good = {"A": np.ones((2, 3)), "B": np.ones((2, 3))}
    uneven = {"A": np.ones((2, 3)), "B": np.ones((1, 3))}
    first, broken = batcher.execute([good, uneven])
    assert broken.error.message() == "every input needs the same number of rows, got [2, 1]"
    assert first.outputs["SUM"].tolist() == [[2.0] * 3] * 2


def test_no_call_is_made_when_every_request_is_rejected(helper) -> None:
    def reject(values: np.ndarray):
        raise helper.InvalidInput(f"X: {values.shape[0]} rows refused")

    def never(*_):
        raise AssertionError("run must not be called without accepted requests")

    batcher = helper.RequestBatcher(
        _config({"X": "TYPE_FP32"}, {"Y": "TYPE_FP32"}), prepare=reject, run=never
    )
    responses = batcher.execute([{"X": np.ones((1, 2))}, {"X": np.ones((3, 2))}])
    assert [r.error.message() for r in responses] == ["X: 1 rows refused", "X: 3 rows refused"]


def test_a_failing_call_fails_each_accepted_request_and_keeps_the_rejections(helper) -> None:
    def reject_negative(values: np.ndarray) -> np.ndarray:
        if (values < 0).any():
            raise helper.InvalidInput("X: negative")
        return values

    def broken(_values: np.ndarray) -> np.ndarray:
        raise RuntimeError("out of memory")

    batcher = helper.RequestBatcher(
        _config({"X": "TYPE_FP32"}, {"Y": "TYPE_FP32"}), prepare=reject_negative, run=broken
    )
    good, bad, other = batcher.execute(
        [{"X": np.ones((1, 2))}, {"X": -np.ones((1, 2))}, {"X": np.ones((2, 2))}]
    )
    assert (bad.error.message(), bad.error.code) == ("X: negative", "INVALID_ARG")
    for response in (good, other):
        assert (response.error.message(), response.error.code) == ("inference failed: out of memory", None)


def test_a_model_can_ask_for_each_requests_row_count(helper) -> None:
    seen = []

    def run(values: np.ndarray, *, rows: list[int]) -> np.ndarray:
        seen.append(rows)
        return values

    batcher = helper.RequestBatcher(_config({"X": "TYPE_FP32"}, {"Y": "TYPE_FP32"}), run=run, with_rows=True)
    batcher.execute([{"X": np.ones((2, 1))}, {"X": np.ones((3, 1))}])
    assert seen == [[2, 3]]


def test_requests_whose_shapes_cannot_be_batched_fail_with_their_shapes(helper, fake_pb_utils) -> None:
    batcher = helper.RequestBatcher(_config({"X": "TYPE_FP32"}, {"Y": "TYPE_FP32"}), run=lambda x: x)
    with pytest.raises(fake_pb_utils.TritonModelException, match=r"shapes \[\[1, 2\], \[1, 3\]\]"):
        batcher.execute([{"X": np.ones((1, 2))}, {"X": np.ones((1, 3))}])


def test_a_model_answering_fewer_outputs_than_its_config_declares_is_caught(helper, fake_pb_utils) -> None:
    batcher = helper.RequestBatcher(
        _config({"X": "TYPE_FP32"}, {"Y": "TYPE_FP32", "Z": "TYPE_FP32"}), run=lambda x: x
    )
    with pytest.raises(fake_pb_utils.TritonModelException, match=r"1 outputs, its config declares 2"):
        batcher.execute([{"X": np.ones((1, 2))}])


def _texts(*texts: bytes) -> dict:
    return {"TEXT": np.array([[t] for t in texts], dtype=np.object_)}


def test_tokenizer_answers_each_request_at_its_own_length_and_pads_a_multi_text_request(
    triton_python_model,
) -> None:
    model = triton_python_model("text_tokenizer")
    short, pair = model.execute([_texts(b"A man is eating food."), _texts(b"Hi.", b"word " * 40)])
    assert short.error is None and short.outputs["INPUT_IDS"].shape == (1, 8)
    ids = pair.outputs["INPUT_IDS"]
    assert ids.shape == (2, 42) and ids.dtype == np.int64 and not ids[0, 4:].any()  # [PAD] is 0


def test_tokenizer_refuses_invalid_utf8_alone_and_answers_its_neighbours(triton_python_model) -> None:
    model = triton_python_model("text_tokenizer")
    good, bad, other = model.execute([_texts(b"one"), _texts(b"caf\xc3\xa9 \xff"), _texts(b"two words")])
    assert bad.error.code == "INVALID_ARG" and bad.error.message() == "TEXT: not valid UTF-8 at byte 6"
    assert good.outputs["INPUT_IDS"].shape == (1, 3) and other.outputs["INPUT_IDS"].shape == (1, 4)


def test_tokenizer_with_length_buckets_pads_a_request_to_its_bucket(
    triton_python_model, model_config_json
) -> None:
    config = json.loads(model_config_json("text_tokenizer"))
    config["parameters"]["length_buckets"]["string_value"] = "8,16,256"
    model = triton_python_model("text_tokenizer", config=json.dumps(config))
    (response,) = model.execute([_texts(b"word " * 10)])  # 12 tokens -> bucket 16
    assert response.outputs["INPUT_IDS"].shape == (1, 16)


def test_tokenizer_catches_a_tokenizer_that_loses_a_text(triton_python_model, fake_pb_utils) -> None:
    model = triton_python_model("text_tokenizer")
    model.batcher.run = lambda texts: model.tokenizer.encode_batch(texts[:-1])
    with pytest.raises(fake_pb_utils.TritonModelException, match="1 rows for 2 input rows"):
        model.execute([_texts(b"one"), _texts(b"two")])
