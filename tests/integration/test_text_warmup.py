"""The text encoders' warm-ups as Triton runs them: a real server loads both encoders with every warm-up
sample of their deployable configs (the local CPU copies keep only the batch-1 one), reads the token ids
from warmup/, hands each sample's requests to the model together, and the model answers them all."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import pytest

from tritonlocal import LocalTritonServer, ServerConfig
from tritonrepo.configs import load_repository
from tritonrepo.derive import derive_local_config
from tritonrepo.writer import LINK, DerivedModel, write_model

ROOT = Path(__file__).resolve().parents[2]
ENCODERS = ("minilm_onnx", "minilm_torchscript")


def _repository(target: Path, *, truncate: str | None = None) -> Path:
    """The encoders as the local server serves them, with every warm-up sample of config.pbtxt kept;
    ``truncate``: the one encoder served, its warm-up files replaced by copies one token short."""
    models = load_repository(ROOT / "model_repository")
    target.mkdir()
    for name in ENCODERS if truncate is None else (truncate,):
        entry = models[name]
        config = derive_local_config(entry, gpu_available=False, intra_op_threads=1)
        del config.model_warmup[:]
        config.model_warmup.extend(entry.config.model_warmup)
        write_model(DerivedModel(entry=entry, config=config), target / name, placement=LINK, made_by="a test")
        if name == truncate:
            warmup = target / name / "warmup"
            warmup.unlink()  # the link to model_repository/<name>/warmup
            warmup.mkdir()
            for source in (entry.path / "warmup").iterdir():
                (warmup / source.name).write_bytes(source.read_bytes()[:-8])
    return target


def test_both_encoders_run_one_sentence_and_64_texts_of_256_tokens_before_they_are_ready(
    tmp_path: Path,
) -> None:
    log = tmp_path / "server.log"
    config = ServerConfig(
        model_repository=_repository(tmp_path / "repository"), log_path=log, log_verbose=1, exit_timeout_s=5
    )
    with LocalTritonServer(config) as server:
        for name in ENCODERS:
            with urllib.request.urlopen(
                f"http://{server.http_url}/v2/models/{name}/ready", timeout=5
            ) as reply:
                assert reply.status == 200
    text = log.read_text(errors="replace")
    for name in ENCODERS:
        for sample in ("one_sentence", "largest_batch_longest_text"):
            assert f"model '{name}' instance {name}_0_0 is running warmup sample '{sample}'" in text
    assert "warmup error" not in text


def test_a_warmup_file_shorter_than_its_dims_stops_the_model_from_loading(tmp_path: Path) -> None:
    from tritonlocal.errors import ModelLoadError

    config = ServerConfig(
        model_repository=_repository(tmp_path / "repository", truncate="minilm_onnx"),
        log_path=tmp_path / "server.log",
        exit_timeout_s=5,
    )
    with pytest.raises(ModelLoadError, match="minilm_onnx") as failure:
        with LocalTritonServer(config):
            pass
    assert "warmup setting expects 128 bytes" in str(failure.value)
