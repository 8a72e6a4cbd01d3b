"""Bringing your own model, end to end: a BERT-family encoder generated here, of another size than MiniLM,
goes through the scaffold, its description, the export (fp32), a ragged ensemble and a real server; and a
scaffolded Python-backend model passes the test the scaffold wrote for it, against a real server.

No code of the project names it: the scaffold writes its files from its kind, and everything after reads
them (docs/your-model-encoder.md walks through the same steps).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from clients import TritonClient
from description.model import load_description
from export.minilm.network import load_encoder, load_tokenizer, reference_embeddings
from export.scaffold import cli as scaffold
from tritonlocal import LocalTritonServer, ServerConfig
from tritonrepo.configs import load_model_config

ROOT = Path(__file__).resolve().parents[2]
SIZE = {"hidden_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 192}
SENTENCES = [
    "A man is eating food.",
    "The quarterly report shows revenue grew by twelve percent.",
    "Ein Mann isst gerade Essen.",
    "",
    "Batching requests of similar length keeps the encoder busy. " * 12,
]


@pytest.fixture(scope="module")
def project(
    tmp_path_factory: pytest.TempPathFactory, encoder_project: Callable[[Path, dict[str, int]], Path]
) -> Path:
    """A copy of the sentence-encoder kind's shipped configs (the scaffold's starting point)."""
    return encoder_project(tmp_path_factory.mktemp("project"), SIZE)


def test_a_generated_encoder_goes_from_scaffold_to_served_embeddings_equal_to_eager_pytorch(
    project: Path, export_and_derive: Callable[..., tuple[list, Path]]
) -> None:
    repository, models = project / "model_repository", project / "model_descriptions"
    argv = ["sentence_encoder", "tiny_bert", "--weights-path", str(project / "weights")]
    assert scaffold.main([*argv, "--repository", str(repository), "--models", str(models)]) == 0
    description = load_description(models / "tiny_bert.yaml")
    assert [served.model for served in description.served] == ["tiny_bert_onnx"]

    results, local = export_and_derive(description, project)
    assert [r.written for r in results] == [True, True], [str(r) for r in results]
    assert results[0].selection is not None and results[0].selection.served == "onnx-fp32"
    kept = sorted(path.name for path in local.iterdir() if path.is_dir())
    assert kept == ["tiny_bert_embedder", "tiny_bert_onnx", "tiny_bert_tokenizer"]

    weights = project / "weights"
    max_length = load_model_config(repository / "tiny_bert_tokenizer").parameters["max_length"].string_value
    tokenizer = load_tokenizer(weights, max_length=int(max_length))
    expected = reference_embeddings(load_encoder(weights), tokenizer, SENTENCES)
    with LocalTritonServer(ServerConfig(model_repository=local, exit_timeout_s=2)) as server:
        with TritonClient(f"grpc://{server.grpc_url}", max_in_flight=8) as client:
            served = np.asarray(client.embed(SENTENCES, model="tiny_bert_embedder"))
    assert served.shape == (len(SENTENCES), SIZE["hidden_size"])
    np.testing.assert_allclose(served, expected, rtol=0, atol=1e-5)


def test_a_scaffolded_python_model_passes_the_test_the_scaffold_wrote_for_it(
    tmp_path: Path, run_python: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    repository = tmp_path / "model_repository"
    repository.mkdir()
    for helper in ("pybackend_batching.py", "pybackend_parameters.py"):
        shutil.copyfile(ROOT / "model_repository" / helper, repository / helper)
    folders = [
        "--repository",
        str(repository),
        "--models",
        str(tmp_path / "models"),
        "--tests",
        str(tmp_path),
    ]
    tensors = ["--input", "FEATURES:FP32:4", "--input", "IDS:INT64:-1"]
    tensors += ["--output", "SCALED:FP32:4", "--output", "IDS_OUT:INT64:-1"]
    assert scaffold.main(["python_model", "my_scaler", *tensors, *folders]) == 0
    test = tmp_path / "test_my_scaler_model.py"
    run = run_python("-m", "pytest", "-q", "-p", "no:cacheprovider", test)
    assert "2 passed" in run.stdout
