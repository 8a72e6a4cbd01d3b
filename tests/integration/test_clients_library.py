"""The client library against the real server, on every path: HTTP and gRPC, blocking and asyncio,
with and without system shared memory. Each path must give the same answers."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import skimage
import tritonclient.http as httpclient

from clients import (
    AsyncTritonClient,
    Classification,
    ClientTimeoutError,
    InvalidInputError,
    ModelNotFoundError,
    ModelStatistics,
    RestrictedApiError,
    RetryPolicy,
    ServerUnavailableError,
    TritonClient,
)
from tritonlocal import LocalTritonServer, ServerConfig

ROOT = Path(__file__).resolve().parents[2]
IMAGES = Path(skimage.__file__).parent / "data"
KINDS = ["http", "grpc", "http-aio", "grpc-aio", "http-shm", "grpc-aio-shm"]
CAT_WORDS = ("cat", "tabby", "lynx")
TEXTS = ["A cat sits on the mat.", "A kitten is sleeping on a rug.", "The stock market fell sharply today."]
SettledStatistics = Callable[[TritonClient, str], ModelStatistics]  # conftest.py's fixture


@dataclass(frozen=True)
class Address:
    http_url: str
    grpc_url: str


def _url(server: LocalTritonServer | Address, protocol: str) -> str:
    return f"http://{server.http_url}" if protocol == "http" else f"grpc://{server.grpc_url}"


def run(
    server: LocalTritonServer | Address,
    kind: str,
    method: str,
    *args: Any,
    client: dict | None = None,
    **kwargs: Any,
):
    """Call ``method`` on the client that ``kind`` names ("grpc-aio-shm": asyncio gRPC with shared memory)."""
    protocol = kind.split("-")[0]
    options = {"use_shared_memory": kind.endswith("-shm"), **(client or {})}
    if "-aio" in kind:

        async def call() -> Any:
            async with AsyncTritonClient(_url(server, protocol), **options) as c:
                return await getattr(c, method)(*args, **kwargs)

        return asyncio.run(call())
    with TritonClient(_url(server, protocol), **options) as c:
        return getattr(c, method)(*args, **kwargs)


@pytest.fixture(scope="module")
def broken_image(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("images") / "broken.jpg"
    path.write_bytes(b"\xff\xd8\xff\xe0 this is not really a JPEG")
    return path


@pytest.fixture(scope="module")
def reference(triton_server: LocalTritonServer) -> dict[str, Any]:
    """Answers from the plainest path (blocking HTTP, no shared memory) that every other path must match."""
    with TritonClient(_url(triton_server, "http")) as client:
        return {
            "classify": client.classify([IMAGES / "chelsea.png", IMAGES / "coffee.png"]),
            "embed": client.embed(TEXTS),
        }


@pytest.mark.parametrize("kind", KINDS)
def test_l2_normalize_gives_the_same_result_on_every_client_path(
    triton_server: LocalTritonServer, kind: str
) -> None:
    vectors = np.random.default_rng(3).normal(size=(5, 16)).astype(np.float32)
    outputs = run(triton_server, kind, "infer", "l2_normalize", {"VECTOR": vectors})
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    np.testing.assert_allclose(outputs["NORM"], norms, rtol=1e-5)
    np.testing.assert_allclose(outputs["NORMALIZED"], vectors / norms, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", KINDS)
def test_chelsea_is_a_cat_and_coffee_is_espresso_on_every_client_path(
    triton_server: LocalTritonServer, reference: dict[str, Any], kind: str
) -> None:
    cat, coffee = run(
        triton_server, kind, "classify", [IMAGES / "chelsea.png", (IMAGES / "coffee.png").read_bytes()]
    )
    assert isinstance(cat, Classification) and len(cat.labels) == 5
    assert any(word in label.lower() for label in cat.labels for word in CAT_WORDS), cat.labels
    assert coffee.labels[0] == "espresso"
    for got, expected in zip((cat, coffee), reference["classify"], strict=True):
        assert got.class_ids == expected.class_ids
        np.testing.assert_allclose(got.scores, expected.scores, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("kind", KINDS)
def test_text_embeddings_are_the_same_on_every_client_path(
    triton_server: LocalTritonServer, reference: dict[str, Any], kind: str
) -> None:
    embeddings = run(triton_server, kind, "embed", TEXTS)
    assert embeddings.shape == (3, 384) and embeddings.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(embeddings, axis=1), 1.0, rtol=1e-4)
    np.testing.assert_allclose(embeddings, reference["embed"], atol=1e-5)
    similarity = embeddings @ embeddings.T
    assert similarity[0, 1] > similarity[0, 2]  # the two sentences about cats are closer


def test_batched_requests_give_the_same_answers_as_one_request_per_item(
    triton_server: LocalTritonServer, reference: dict[str, Any]
) -> None:
    with TritonClient(_url(triton_server, "grpc"), per_request=False) as client:
        batched = client.classify([IMAGES / "chelsea.png", IMAGES / "coffee.png"], top_k=3)
        embeddings = client.embed(TEXTS)
    assert [c.class_ids for c in batched] == [c.class_ids[:3] for c in reference["classify"]]
    np.testing.assert_allclose(embeddings, reference["embed"], atol=1e-5)


@pytest.mark.parametrize("per_request", [True, False], ids=["per-request", "batched"])
@pytest.mark.parametrize("kind", ["http", "grpc-aio"])
def test_a_corrupt_image_fails_alone_naming_its_index_and_file_without_retries(
    triton_server: LocalTritonServer, broken_image: Path, kind: str, per_request: bool
) -> None:
    images = [IMAGES / "chelsea.png", IMAGES / "coffee.png", broken_image, IMAGES / "rocket.jpg"]
    with pytest.raises(InvalidInputError) as raised:
        run(triton_server, kind, "classify", images, per_request=per_request)
    error = raised.value
    assert error.index == 2 and error.attempts == 1
    assert str(error).startswith("image 2 (broken.jpg): ")
    assert "IMAGE_BYTES: cannot decode image" in str(error)
    assert error.model == "image_classifier"
    results = error.results  # type: ignore[attr-defined]
    assert [type(r).__name__ for r in results] == [
        "Classification",
        "Classification",
        "InvalidInputError",
        "Classification",
    ]
    assert results[1].labels[0] == "espresso"
    returned = run(triton_server, kind, "classify", images, per_request=per_request, errors="return")
    assert isinstance(returned[2], InvalidInputError) and returned[3].class_ids == results[3].class_ids


def test_a_rejected_image_is_sent_once(
    triton_server: LocalTritonServer, broken_image: Path, settled_statistics: SettledStatistics
) -> None:
    with TritonClient(_url(triton_server, "http")) as client:
        before = settled_statistics(client, "image_preprocess")  # the earlier tests' requests counted
        client.classify([broken_image], errors="return")
        delta = client.statistics_since(before, requests=1)
    assert delta.requests == 1  # a model's per-request error still counts as one request


def test_a_missing_image_file_is_reported_by_index_without_a_request(
    triton_server: LocalTritonServer,
) -> None:
    with pytest.raises(InvalidInputError, match=r"image 1 \(missing.png\): cannot read image file"):
        run(triton_server, "http", "classify", [IMAGES / "chelsea.png", IMAGES / "missing.png"])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("kind", ["http", "grpc", "http-aio", "grpc-aio"])
def test_a_client_pointed_at_a_port_with_no_server_retries_then_gives_up(
    kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    port = _free_port()
    nowhere = Address(http_url=f"127.0.0.1:{port}", grpc_url=f"127.0.0.1:{port}")
    policy = RetryPolicy(max_attempts=3, base_delay_s=0.01, max_delay_s=0.02)
    with (
        caplog.at_level(logging.INFO, logger="clients.retry"),
        pytest.raises(ServerUnavailableError) as raised,
    ):
        run(nowhere, kind, "models", client={"retry": policy})
    retries = [r for r in caplog.records if "retrying in" in r.getMessage()]
    assert raised.value.attempts == 3 and len(retries) == 2


def test_an_unknown_model_is_not_found_and_not_retried(triton_server: LocalTritonServer) -> None:
    for kind in ("http", "grpc-aio"):
        with pytest.raises(ModelNotFoundError, match="unknown model") as raised:
            run(triton_server, kind, "classify", [IMAGES / "chelsea.png"], model="no_such_model")
        assert raised.value.attempts == 1


@pytest.mark.parametrize("kind", ["http", "grpc", "http-aio"])
def test_a_call_that_outlives_its_timeout_raises_a_timeout_and_is_not_retried(
    triton_server: LocalTritonServer, kind: str
) -> None:
    images = [IMAGES / "astronaut.png"] * 16
    with pytest.raises(ClientTimeoutError) as raised:
        run(triton_server, kind, "classify", images, per_request=False, timeout_s=0.002)
    assert raised.value.attempts == 1


def test_one_request_per_image_lets_the_dynamic_batcher_form_batches(
    triton_server: LocalTritonServer,
) -> None:
    with TritonClient(_url(triton_server, "grpc"), max_in_flight=16) as client:
        before = client.statistics("image_preprocess")
        results = client.classify([IMAGES / "coffee.png"] * 32)
        delta = client.statistics_since(before, requests=32)
    assert all(r.labels[0] == "espresso" for r in results)
    # At least our 32 (a request an earlier test abandoned on a client timeout may still finish here).
    assert delta.inferences >= 32 and delta.requests >= 32
    assert delta.executions < delta.inferences, f"no batch formed: {delta.batch_executions}"
    assert sum(size * n for size, n in delta.batch_executions.items()) == delta.inferences


def test_health_models_and_statistics_describe_the_server(
    triton_server: LocalTritonServer, settled_statistics: SettledStatistics
) -> None:
    with TritonClient(_url(triton_server, "grpc")) as client:
        assert client.health().ready
        states = {m.name: m for m in client.models()}
        before = settled_statistics(client, "l2_normalize")  # the earlier tests' requests counted
        client.infer("l2_normalize", {"VECTOR": np.ones((4, 16), np.float32)})
        delta = client.statistics_since(before, requests=1)
        signature = client.signature("image_classifier")
    assert states["l2_normalize"].ready and states["image_classifier"].ready
    assert (delta.requests, delta.inferences, delta.executions) == (1, 4, 1)
    assert delta.batch_executions == {4: 1} and delta.compute_infer_us > 0
    assert [s.name for s in signature.inputs] == ["IMAGE_BYTES"] and signature.max_batch_size > 0


def _client_regions() -> list[str]:
    return [name for name in os.listdir("/dev/shm") if name.startswith(f"clients_{os.getpid()}_")]


@pytest.mark.parametrize("kind", ["http-shm", "grpc-aio-shm"])
def test_shared_memory_regions_are_released_after_success_and_after_failure(
    triton_server: LocalTritonServer, broken_image: Path, kind: str
) -> None:
    run(triton_server, kind, "classify", [IMAGES / "chelsea.png", broken_image], errors="return")
    with pytest.raises(InvalidInputError):
        run(triton_server, kind, "infer", "l2_normalize", {"VECTOR": np.full((1, 16), np.nan, np.float32)})
    registered = httpclient.InferenceServerClient(triton_server.http_url).get_system_shared_memory_status()
    assert [r["name"] for r in registered if r["name"].startswith("clients_")] == []
    assert _client_regions() == []


# -- a server with the restricted APIs behind a key ------------------------------------------------
ADMIN_KEY = "clients-test-key"


@pytest.fixture(scope="module")
def restricted_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalTritonServer]:
    repository = tmp_path_factory.mktemp("restricted") / "repository"
    shutil.copytree(
        ROOT / "model_repository" / "l2_normalize",
        repository / "l2_normalize",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    config = ServerConfig(model_repository=repository, admin_key=ADMIN_KEY, exit_timeout_s=2)
    with LocalTritonServer(config) as server:
        yield server


@pytest.mark.parametrize("kind", ["http-shm", "grpc-shm", "http-aio-shm", "grpc-aio-shm"])
def test_shared_memory_on_a_restricted_server_needs_the_key_header_and_is_not_retried(
    restricted_server: LocalTritonServer, kind: str
) -> None:
    vectors = np.random.default_rng(5).normal(size=(3, 16)).astype(np.float32)
    with pytest.raises(RestrictedApiError, match="restricted") as raised:
        run(restricted_server, kind, "infer", "l2_normalize", {"VECTOR": vectors})
    assert raised.value.attempts == 1
    keyed = {"headers": {"triton-admin-key": ADMIN_KEY}}
    outputs = run(restricted_server, kind, "infer", "l2_normalize", {"VECTOR": vectors}, client=keyed)
    np.testing.assert_allclose(outputs["NORM"], np.linalg.norm(vectors, axis=1, keepdims=True), rtol=1e-5)


def test_without_the_key_the_client_reads_batching_from_metadata(
    restricted_server: LocalTritonServer,
) -> None:
    with TritonClient(_url(restricted_server, "grpc")) as client:
        signature = client.signature("l2_normalize")  # the model-config API is refused; metadata is not
        outputs = client.infer("l2_normalize", {"VECTOR": np.ones((2, 16), np.float32)})
    assert signature.batches and signature.max_batch_size == -1
    np.testing.assert_allclose(outputs["NORM"], 4.0)
