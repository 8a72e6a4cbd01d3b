"""text_embedder_grouped (BLS: tokenise per request, group by length, one encoder call per length)
answers what the ensemble text_embedder answers, and a bad request fails alone.

The module serves a repository holding both, derived by loadtest.experiments.variant_repository from
model_repository.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from clients import samples
from loadtest.experiments.variant_repository import Variant, build_repository
from tritonlocal import LocalTritonServer, ServerConfig

ROOT = Path(__file__).resolve().parents[2]
GROUPED, ENSEMBLE = "text_embedder_grouped", "text_embedder"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalTritonServer]:
    if not (ROOT / "model_repository" / "minilm_onnx" / "1" / "model.onnx").is_file():
        pytest.skip("minilm_onnx/1/model.onnx is written by `python -m export`")
    folder = tmp_path_factory.mktemp("grouped")
    variants = [Variant(model=ENSEMBLE), Variant(model=GROUPED)]
    build_repository(ROOT / "model_repository", folder / "repo", variants, total_threads=2)
    config = ServerConfig(
        model_repository=folder / "repo", log_path=folder / "tritonserver.log", exit_timeout_s=3
    )
    with LocalTritonServer(config) as started:
        yield started


def _embed(url: str, model: str, texts: list[bytes]) -> np.ndarray:
    with httpclient.InferenceServerClient(url) as client:
        tensor = httpclient.InferInput("TEXT", [len(texts), 1], "BYTES")
        tensor.set_data_from_numpy(np.array(texts, dtype=object).reshape(-1, 1))
        return client.infer(model, [tensor]).as_numpy("EMBEDDING")


def _concurrently(url: str, model: str, requests: list[list[bytes]]) -> list:
    def one(texts: list[bytes]) -> object:
        try:
            return _embed(url, model, texts)
        except InferenceServerException as e:
            return e

    with ThreadPoolExecutor(max_workers=len(requests)) as pool:
        return list(pool.map(one, requests))


def test_grouped_embeddings_equal_the_ensembles_for_mixed_length_concurrent_requests(
    server: LocalTritonServer,
) -> None:
    texts = [t.encode() for t in samples.shuffled_sentences(24, seed=5)]
    requests = [[t] for t in texts[:20]] + [texts[20:24]]  # single texts and one request of four
    grouped = _concurrently(server.http_url, GROUPED, requests)
    ensemble = _concurrently(server.http_url, ENSEMBLE, requests)
    lengths = {len(t.split()) for t in texts}
    assert len(lengths) > 5, "the texts must mix lengths"
    for mine, reference in zip(grouped, ensemble, strict=True):
        assert isinstance(mine, np.ndarray), mine
        assert mine.shape == reference.shape and mine.dtype == np.float32
        cosine = (mine * reference).sum(axis=1) / (
            np.linalg.norm(mine, axis=1) * np.linalg.norm(reference, axis=1)
        )
        assert cosine.min() >= 0.9999


def test_a_bad_utf8_request_fails_alone(server: LocalTritonServer) -> None:
    good = [[t.encode()] for t in samples.shuffled_sentences(7, seed=6)]
    requests = [*good[:3], [b"caf\xc3"], *good[3:]]
    results = _concurrently(server.http_url, GROUPED, requests)
    error, [reference] = results[3], _concurrently(server.http_url, ENSEMBLE, [[b"caf\xc3"]])
    assert isinstance(error, InferenceServerException) and "not valid UTF-8" in str(error)
    assert isinstance(reference, InferenceServerException) and error.status() == reference.status()
    assert all(isinstance(r, np.ndarray) and r.shape == (1, 384) for i, r in enumerate(results) if i != 3)


def test_a_request_of_more_texts_than_an_encoder_batch_is_chunked(server: LocalTritonServer) -> None:
    texts = [t.encode() for t in samples.shuffled_sentences(64, seed=7)]
    embeddings = _embed(server.http_url, GROUPED, texts)
    assert embeddings.shape == (64, 384)
    np.testing.assert_allclose(np.linalg.norm(embeddings, axis=1), 1.0, atol=1e-5)
