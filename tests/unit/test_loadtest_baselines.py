"""The baselines Triton is compared against run the exported files through the local server's own runtime
code (tritonrepo/exported_runtime.py), so an in-process figure and a served one measure the same code."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import json_format

from loadtest.baselines.pipelines import ExportedEncoder, TextPipeline, served_file
from loadtest.load.preprocessing import PipelineError, TextTokenizer
from tritonrepo import exported_runtime
from tritonrepo.configs import load_model_config
from tritonrepo.derive import derive_repository
from tritonrepo.served_code import load_served_module

DEPLOYABLE = Path(__file__).resolve().parents[2] / "model_repository"
TEXTS = ["A man is eating food.", "Short.", "A longer sentence about batching requests of many lengths."]


@pytest.fixture
def served_encoder(fake_pb_utils, tmp_path: Path):
    """minilm_onnx as the local server runs it: the derived model.py, initialised from its derived config."""
    derive_repository(DEPLOYABLE, tmp_path / "local")
    folder = tmp_path / "local" / "minilm_onnx"
    module = load_served_module(folder / "1" / "model.py", name="_test_baseline_native_runner")
    model = module.TritonPythonModel()
    config = json_format.MessageToDict(load_model_config(folder), preserving_proto_field_name=True)
    model.initialize(
        {"model_config": json.dumps(config), "model_repository": str(folder), "model_version": "1"}
    )
    yield model
    sys.modules.pop("_test_baseline_native_runner", None)


def test_the_in_process_text_pipeline_embeds_as_the_local_servers_runner(served_encoder) -> None:
    tokens = TextTokenizer(DEPLOYABLE)
    requests = [{"INPUT_IDS__0": tokens([text]).input_ids[np.newaxis, :]} for text in TEXTS]
    served = np.concatenate([r.outputs["EMBEDDING__0"] for r in served_encoder.execute(requests)])
    pipeline = TextPipeline(DEPLOYABLE, encoder_model="minilm_onnx", runtime="onnxruntime", threads=1)
    in_process = pipeline(TEXTS)
    assert type(pipeline.encoder.runner) is exported_runtime.OnnxRunner  # the server's runtime code
    np.testing.assert_allclose(in_process, served, atol=1e-5)


def test_a_baseline_finds_the_exported_file_where_the_config_says_and_names_the_export_when_absent(
    tmp_path: Path,
) -> None:
    assert (
        served_file(DEPLOYABLE, "minilm_torchscript") == DEPLOYABLE / "minilm_torchscript" / "1" / "model.pt"
    )
    (tmp_path / "minilm_onnx").mkdir()
    (tmp_path / "minilm_onnx" / "config.pbtxt").write_text(
        (DEPLOYABLE / "minilm_onnx" / "config.pbtxt").read_text()
    )
    with pytest.raises(
        PipelineError, match=r"minilm_onnx/1/model.onnx is missing; run `python -m export` first"
    ):
        served_file(tmp_path, "minilm_onnx")


def test_an_exported_encoder_refuses_a_runtime_it_does_not_know(tmp_path: Path) -> None:
    with pytest.raises(
        ValueError, match=r"runtime must be one of \('onnxruntime', 'torchscript'\), got 'tvm'"
    ):
        ExportedEncoder(tmp_path / "model.onnx", runtime="tvm", threads=1)
