"""The scale-out design on one machine: real tritonserver replicas behind a real nginx (HTTP and gRPC).

Load goes to 127.0.0.1 only and is bounded in count and time. nginx comes from Debian's nginx package
(the Makefile's bootstrap installs it); when it is missing these tests fail with that instruction.
"""

from __future__ import annotations

import contextlib
import http.client
import re
import shutil
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from clients import RetryPolicy, TritonClient
from tritonlocal import LocalTritonServer
from tritonlocal.replicas import LocalReplicaSet, ReplicaSetConfig, find_nginx

ROOT = Path(__file__).resolve().parents[2]
MODEL = "l2_normalize"
REPLICAS = 2
PROTOCOLS = ["http", "grpc"]


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("replicas") / "repository"
    shutil.copytree(
        ROOT / "model_repository" / MODEL, repo / MODEL, ignore=shutil.ignore_patterns("__pycache__")
    )
    return repo


@contextlib.contextmanager
def _running(repository: Path) -> Iterator[LocalReplicaSet]:
    find_nginx()  # fails with the bootstrap instruction when the package is missing
    with LocalReplicaSet(
        ReplicaSetConfig(model_repository=repository, replicas=REPLICAS, exit_timeout_s=2)
    ) as running:
        yield running


@pytest.fixture(scope="module")
def replicas(repository: Path) -> Iterator[LocalReplicaSet]:
    """One replica set for the tests that leave both replicas running (each counts what it adds)."""
    with _running(repository) as running:
        yield running


@pytest.fixture()
def replica_set(repository: Path) -> Iterator[LocalReplicaSet]:
    """A replica set of its own for a test that takes one of the replicas away."""
    with _running(repository) as running:
        yield running


def _vector(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(1, 16)).astype(np.float32)


def _client_for(protocol: str, url: str, attempts: int = 4) -> Callable[[int], bool]:
    """A function sending request ``seed`` through ``url``; True when the answer is correct.

    It uses the project's client, which by default retries what was never accepted (a refused or closed
    connection, 503) as a real client would; ``attempts=1`` retries nothing.
    """
    local = threading.local()

    def send(seed: int) -> bool:
        if not hasattr(local, "client"):  # one connection per thread, as a real client pool would
            local.client = TritonClient(f"{protocol}://{url}", retry=RetryPolicy(max_attempts=attempts))
        vector = _vector(seed)
        result = local.client.infer(MODEL, {"VECTOR": vector})
        expected = vector / np.linalg.norm(vector, axis=1, keepdims=True)
        return bool(np.allclose(result["NORMALIZED"], expected, rtol=1e-5, atol=1e-6))

    return send


def _inference_counts(servers: list[LocalTritonServer], until: int = 0, wait_s: float = 10.0) -> list[int]:
    """Each server's inference count, read until they add up to ``until`` (or ``wait_s`` is over): a
    server counts an execution just after it has sent the answers."""
    deadline = time.monotonic() + wait_s
    while True:
        counts = [
            int(
                httpclient.InferenceServerClient(s.http_url).get_inference_statistics(MODEL)["model_stats"][
                    0
                ]["inference_count"]
            )
            for s in servers
        ]
        if sum(counts) >= until or time.monotonic() > deadline:
            return counts
        time.sleep(0.02)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_load_through_nginx_reaches_every_replica(replicas: LocalReplicaSet, protocol: str) -> None:
    before = _inference_counts(replicas.servers)
    send = _client_for(protocol, replicas.http_url if protocol == "http" else replicas.grpc_url)
    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(send, range(200)))
    after = _inference_counts(replicas.servers, until=sum(before) + 200)
    per_replica = [count - earlier for count, earlier in zip(after, before, strict=True)]
    print(f"\n{protocol}: 200 requests through nginx, per replica {per_replica}")
    assert all(answers)
    assert sum(per_replica) == 200
    assert all(count > 0 for count in per_replica), f"a replica got no request: {per_replica}"


@pytest.mark.parametrize("mode", ["drain", "kill"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_losing_a_replica_mid_load_loses_no_acknowledged_request(
    replica_set: LocalReplicaSet, protocol: str, mode: str
) -> None:
    """drain: taken out of nginx's rotation, then SIGTERM (a rolling update); kill: SIGKILL (a crash)."""
    # Paced, so that requests are in flight while replica 0 goes; replica 0 goes once a quarter of them
    # have been answered, and the last quarter waits until it is gone: the load outlives it by design.
    total, threads, pause_s = 300, 6, 0.15
    # The client retries nothing: every request the lost replica had or would have had is moved by nginx.
    send = _client_for(
        protocol, replica_set.http_url if protocol == "http" else replica_set.grpc_url, attempts=1
    )
    outcomes: Counter[str] = Counter()
    errors: list[str] = []
    quarter_answered, stopper_done = threading.Event(), threading.Event()

    def paced(seed: int) -> None:
        time.sleep(pause_s)
        if seed >= total * 3 // 4:
            stopper_done.wait(timeout=120)
        try:
            outcomes["correct" if send(seed) else "wrong"] += 1
        except Exception as e:  # noqa: BLE001 - every failure the client is told about is counted
            outcomes["failed"] += 1
            errors.append(f"{type(e).__name__}: {e}")
        if sum(outcomes.values()) >= total // 4:
            quarter_answered.set()

    events: dict[str, float] = {}

    def lose_first_replica() -> None:
        try:
            if not quarter_answered.wait(timeout=120):
                return  # "gone" stays unset: the assertion below reports it
            events["stopping"] = time.monotonic()
            if mode == "drain":
                replica_set.stop_replica(0, drain=True)
            else:
                replica_set.kill_replica(0)
            events["gone"] = time.monotonic()
        finally:
            stopper_done.set()

    stopper = threading.Thread(target=lose_first_replica)
    began = time.monotonic()
    stopper.start()
    with ThreadPoolExecutor(max_workers=threads) as pool:
        list(pool.map(paced, range(total)))
    ended = time.monotonic()
    stopper.join(timeout=60)
    (survivor,) = _inference_counts(replica_set.servers[1:])
    print(
        f"\n{protocol}/{mode}: sent {total}, correct {outcomes['correct']}, wrong {outcomes['wrong']}, "
        f"failed {outcomes['failed']}; load {ended - began:.1f} s; replica 0 stopping at "
        f"{events.get('stopping', began) - began:.1f} s, gone at {events.get('gone', began) - began:.1f} s; "
        f"replica 1 served {survivor}"
    )
    assert "gone" in events and events["gone"] < ended, "replica 0 must be gone while the load still runs"
    assert sum(outcomes.values()) == total, "every request ends as exactly one outcome"
    assert outcomes["wrong"] == 0, "a success with a wrong answer"
    # nginx retries refused connections, resets and 502/503 on the other replica (non_idempotent:
    # inference has no side effects), and a drained replica gets no new request: no failure reaches
    # the client. (Without the drain step, gRPC calls that reach a replica during its shutdown get
    # NOT_FOUND "has no available versions" inside a 200 response, which no proxy can retry.) A crash
    # can still fail a request that was in flight on the killed replica: once a fresh clone's run saw
    # one gRPC 502 of 300. Such a failure is an error the client is told about, never a wrong answer,
    # and at most one per request in flight.
    allowed = 0 if mode == "drain" else threads
    assert outcomes["failed"] <= allowed, errors[:5]


def _body_limit_bytes() -> int:
    """client_max_body_size from deploy/nginx/limits.conf (the limit both proxies include)."""
    text = (ROOT / "deploy" / "nginx" / "limits.conf").read_text()
    match = re.search(r"^client_max_body_size (\d+)m;$", text, re.M)
    assert match, "deploy/nginx/limits.conf sets no client_max_body_size in megabytes"
    return int(match.group(1)) * 1024 * 1024


def test_a_body_over_the_limit_is_refused_by_the_proxy_with_413(replicas: LocalReplicaSet) -> None:
    limit = _body_limit_bytes()
    served_before = sum(_inference_counts(replicas.servers))
    host, port = replicas.http_url.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    # Declared size over the limit: nginx answers from the headers, before reading the body.
    connection.putrequest("POST", f"/v2/models/{MODEL}/infer")
    connection.putheader("Content-Type", "application/octet-stream")
    connection.putheader("Content-Length", str(limit + 1))
    connection.endheaders()
    response = connection.getresponse()
    assert response.status == 413, response.read()[:200]
    connection.close()
    assert sum(_inference_counts(replicas.servers)) == served_before
    # A body at the limit passes the proxy and reaches the server, which judges its content (Triton
    # answers an empty JSON object with its own parse error).
    at_limit = http.client.HTTPConnection(host, int(port), timeout=60)
    at_limit.request("POST", f"/v2/models/{MODEL}/infer", body=b"{" + b" " * (limit - 2) + b"}")
    answer = at_limit.getresponse()
    assert answer.status != 413 and b"Unable to parse 'inputs'" in answer.read(), "the server answered"
    at_limit.close()
