"""The `minimal` experiment's simplest alternative against the real server: the same answers as the served
text ensemble, a clear error for a malformed request, and the experiment's alternating rounds, with the
alternative's process stopped afterwards."""

from __future__ import annotations

import http.client
import json
import selectors
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import numpy as np
import psutil
import pytest
import tritonclient.http as httpclient

import samples
from export.precision.gates import TEXT_MIN_BATCHED_VS_ALONE_COSINE
from loadtest.baselines.pipelines import served_file
from loadtest.experiments import minimal
from loadtest.experiments.plans import IMAGE_ENCODER, IMAGE_MODEL, TEXT_MODEL, text_encoder_of
from loadtest.load.json_load import RequestBody, text_request
from loadtest.load.preprocessing import tokenizer_file
from tritonlocal import LocalTritonServer

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "model_repository"  # the deployable repository the benchmark reads, as exported


def _start(log_path: Path) -> AbstractContextManager[str]:
    options = minimal.text_options(
        encoder_file=served_file(SOURCE, text_encoder_of(SOURCE)),
        tokenizer_file=tokenizer_file(SOURCE),
        model=TEXT_MODEL,
        threads=1,
    )
    return minimal.running(options=options, log_path=log_path)


@pytest.fixture(scope="module")
def alternative(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with _start(tmp_path_factory.mktemp("minimal") / "minimal_server.log") as url:
        yield url


def _post(url: str, body: bytes) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _embedding(url: str, text: str) -> np.ndarray:
    status, payload = _post(url, text_request(text).data)
    assert status == 200, payload
    (output,) = [o for o in payload["outputs"] if o["name"] == "EMBEDDING"]
    return np.asarray(output["data"], dtype=np.float64)


def _minimal_servers() -> list[psutil.Process]:
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            command = " ".join(child.cmdline())
        except (psutil.NoSuchProcess, psutil.ZombieProcess):  # another child of the session's, just ended
            continue
        if "loadtest.baselines.minimal_server" in command:
            found.append(child)
    return found


def test_the_alternative_answers_as_the_served_ensemble(
    triton_server: LocalTritonServer, alternative: str
) -> None:
    path = f"/v2/models/{TEXT_MODEL}/infer"
    texts = sorted(samples.sentences(), key=len)
    for text in (texts[0], texts[len(texts) // 2], texts[-1]):  # short, middling and long
        served = _embedding(f"http://{triton_server.http_url}{path}", text)
        alone = _embedding(alternative + path, text)
        assert served.shape == alone.shape == (384,)
        cosine = served @ alone / (np.linalg.norm(served) * np.linalg.norm(alone))
        assert cosine >= TEXT_MIN_BATCHED_VS_ALONE_COSINE, text[:40]


@pytest.mark.parametrize(
    "body",
    [b"not json", b'{"inputs": []}', b'{"inputs": [{"name": "TEXT", "data": []}]}'],
    ids=["not-json", "no-input", "no-text"],
)
def test_a_malformed_request_gets_a_400_naming_it_and_the_next_request_is_answered(
    alternative: str, body: bytes
) -> None:
    url = f"{alternative}/v2/models/{TEXT_MODEL}/infer"
    status, payload = _post(url, body)
    assert status == 400
    assert "expected a KServe v2 JSON request with a TEXT input" in payload["error"]
    assert _embedding(url, "The server is still answering.").shape == (384,)


def _listener(port: int) -> psutil.Process:
    """The child process listening on ``port``."""
    for process in _minimal_servers():
        listening = [c for c in process.net_connections("tcp") if c.status == psutil.CONN_LISTEN]
        if any(c.laddr.port == port for c in listening):
            return process
    raise AssertionError(f"no child process listens on port {port}")


def _connect_all(port: int, count: int, within_s: float) -> tuple[list[socket.socket], int]:
    """``count`` connections to ``port`` opened at once, and how many of them the kernel had not completed
    within ``within_s``: while the server accepts none, those past its listen backlog never complete (their
    SYN is dropped, and dropped again when TCP retries it)."""
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    with selectors.DefaultSelector() as selector:
        for sock in sockets:
            sock.setblocking(False)
            sock.connect_ex(("127.0.0.1", port))
            selector.register(sock, selectors.EVENT_WRITE)
        deadline, pending = time.monotonic() + within_s, set(sockets)
        while pending and (left := deadline - time.monotonic()) > 0:
            for key, _ in selector.select(timeout=left):
                selector.unregister(key.fileobj)
                pending.discard(key.fileobj)
    return sockets, len(pending)


def test_the_alternative_accepts_32_connections_opened_while_it_is_busy(alternative: str) -> None:
    # A load generator opens its 32 connections at once, while inference keeps the server from accepting:
    # the kernel completes as many as the listen backlog holds and drops the rest, which TCP retries after
    # 1 s, 3 s... (socketserver's default backlog is 5). The server is stopped to hold it off accepting, so
    # the count does not depend on how busy this machine is.
    port = int(alternative.rsplit(":", 1)[-1])
    server = _listener(port)
    server.suspend()
    try:
        sockets, unconnected = _connect_all(port, 32, within_s=5.0)
    finally:
        server.resume()
    try:
        assert unconnected == 0, f"{unconnected} of 32 connections were not accepted into the backlog"
        body = text_request("Every connection is answered.").data
        request = (
            f"POST /v2/models/{TEXT_MODEL}/infer HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode() + body
        for sock in sockets:
            sock.setblocking(True)
            sock.settimeout(60)
            sock.sendall(request)
        statuses = []
        for sock in sockets:
            response = http.client.HTTPResponse(sock)
            response.begin()
            statuses.append(response.status)
            response.read()
        assert statuses == [200] * 32
    finally:
        for sock in sockets:
            sock.close()


def test_experiment_9_alternates_the_servers_round_by_round_and_stops_the_alternative(
    triton_server: LocalTritonServer, tmp_path: Path
) -> None:
    before = {p.pid for p in _minimal_servers()}  # the module's own alternative may be running
    results = minimal.compare(
        triton_http_url=triton_server.http_url,
        services=minimal.shipped_services(SOURCE, {"text": 12, "image": 6, "tabular": 12}),
        threads=1,
        concurrencies=[1, 4],
        rounds=2,
        log_path=tmp_path / "minimal_server.log",
    )
    order = [(r["service"], r["concurrency"], r["round"], r["label"].startswith("Triton")) for r in results]
    assert order == [
        (s, c, n, triton)
        for s in minimal.SERVICES
        for c in (1, 4)
        for n in (0, 1)
        for triton in (True, False)
    ]
    assert all(r["failures"] == 0 and r["requests_per_s"] > 0 for r in results)
    # the report tells the deployments of the alternative apart by their worker count
    assert {r.get("workers") for r in results if not r["label"].startswith("Triton")} == {1}
    assert {p.pid for p in _minimal_servers()} == before


def test_the_alternative_is_stopped_when_the_body_fails(tmp_path: Path) -> None:
    before = {p.pid for p in _minimal_servers()}
    with pytest.raises(RuntimeError, match="measurement failed"):
        with _start(tmp_path / "minimal_server.log") as url:
            assert {p.pid for p in _minimal_servers()} != before, url
            raise RuntimeError("measurement failed")
    assert {p.pid for p in _minimal_servers()} == before


def test_the_image_alternative_classifies_as_the_served_ensemble(
    triton_server: LocalTritonServer, tmp_path: Path
) -> None:
    options = minimal.image_options(repository=SOURCE, classifier=IMAGE_ENCODER, model=IMAGE_MODEL, threads=1)
    with minimal.running(options=options, log_path=tmp_path / "minimal_server.log", workers=2) as url:
        alternative = httpclient.InferenceServerClient(url.removeprefix("http://"))
        served = httpclient.InferenceServerClient(triton_server.http_url)
        for photograph in samples.photographs()[:3]:
            tensor = httpclient.InferInput("IMAGE_BYTES", [1, 1], "BYTES")
            tensor.set_data_from_numpy(np.array([[photograph]], dtype=object))
            ours, theirs = (c.infer(IMAGE_MODEL, [tensor]) for c in (alternative, served))
            assert ours.as_numpy("CLASS_IDS").tolist() == theirs.as_numpy("CLASS_IDS").tolist()
            # JSON carries the labels as text, Triton's binary data as bytes
            assert ours.as_numpy("LABELS").tolist() == [[b.decode() for b in theirs.as_numpy("LABELS")[0]]]
            np.testing.assert_allclose(ours.as_numpy("SCORES"), theirs.as_numpy("SCORES"), atol=1e-3)
        status, payload = _post(f"{url}/v2/models/{IMAGE_MODEL}/infer", b'{"inputs": []}')
        assert status == 400 and "IMAGE_BYTES input as binary data" in payload["error"]


def _outputs(url: str, body: RequestBody) -> dict[str, list]:
    request = urllib.request.Request(url, data=body.data, headers=dict(body.headers))
    with urllib.request.urlopen(request, timeout=30) as response:
        return {o["name"]: o["data"] for o in json.loads(response.read())["outputs"]}


@pytest.mark.parametrize("key", ["image", "tabular"])
def test_the_prebuilt_requests_get_the_same_json_answers_from_triton_and_the_alternative(
    triton_server: LocalTritonServer, tmp_path: Path, key: str
) -> None:
    (service,) = minimal.shipped_services(SOURCE, {key: 1})
    with minimal.running(options=service.options(1), log_path=tmp_path / "minimal_server.log") as url:
        for body in service.bodies[:3]:
            served = _outputs(f"http://{triton_server.http_url}/v2/models/{service.model}/infer", body)
            alone = _outputs(f"{url}/v2/models/{service.model}/infer", body)
            assert sorted(served) == sorted(alone)
            for name, values in served.items():
                if name in ("CLASS_IDS", "LABELS"):
                    assert values == alone[name], name
                else:
                    np.testing.assert_allclose(values, alone[name], atol=1e-3, err_msg=name)
