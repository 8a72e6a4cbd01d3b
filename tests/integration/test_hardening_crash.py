"""Crashed backends and shutdown under load, on servers of our own (never the session fixture).

- A Python-backend stub killed with SIGKILL: Triton 2.51 neither notices nor restarts it (the server
  and the model stay "ready"; requests fail with "Stub process '<instance>' is not healthy").
  ``LocalTritonServer.check_models()`` finds the dead instance; ``restart()`` repairs it on the same ports;
  the ``supervise()`` thread does both by itself, and the failures it lets through are counted and bounded.
- SIGTERM while requests are in flight: every request sent before the signal completes, then the server
  exits cleanly (exit code 0) well before its exit timeout.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import psutil
import pytest
import skimage

from clients import ClientError, RetryPolicy, ServerUnavailableError, TritonClient
from tritonlocal import LocalTritonServer, ServerConfig
from tritonlocal.health import STUB_EXECUTABLE

ROOT = Path(__file__).resolve().parents[2]
IMAGES = Path(skimage.__file__).parent / "data"
VECTOR = np.arange(1, 17, dtype=np.float32).reshape(1, 16)


def _copy_models(target: Path, *models: str) -> Path:
    for model in models:
        shutil.copytree(
            ROOT / "model_repository" / model, target / model, ignore=shutil.ignore_patterns("__pycache__")
        )
    return target


@pytest.fixture()
def small_server(tmp_path: Path) -> Iterator[LocalTritonServer]:
    repository = _copy_models(tmp_path / "repository", "l2_normalize")
    config = ServerConfig(model_repository=repository, exit_timeout_s=2, stop_timeout_s=10)
    with LocalTritonServer(config) as server:
        yield server


def _kill_stub(server: LocalTritonServer, instance: str) -> int:
    """SIGKILL the Python-backend stub whose command line names ``instance``; returns its pid."""
    assert server.pid is not None
    for child in psutil.Process(server.pid).children(recursive=True):
        argv = child.cmdline()
        if argv and argv[0].endswith(STUB_EXECUTABLE) and instance in argv:
            child.send_signal(signal.SIGKILL)
            return child.pid
    raise AssertionError(f"no stub process for {instance} among the children of {server.pid}")


def _wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what} after {timeout_s} s"
        time.sleep(0.02)


def _wait_until_dead(server: LocalTritonServer, instance: str) -> None:
    _wait_for(lambda: instance in server.check_models().dead_instances, f"{instance} to look dead")


def test_a_killed_stub_is_detected_by_check_models_and_repaired_by_a_restart_on_the_same_ports(
    small_server: LocalTritonServer,
) -> None:
    url = f"http://{small_server.http_url}"
    before = small_server.check_models()
    assert before.healthy and sorted(before.expected) == ["l2_normalize_0_0", "l2_normalize_0_1"], (
        before.describe()
    )

    _kill_stub(small_server, "l2_normalize_0_0")
    _wait_until_dead(small_server, "l2_normalize_0_0")
    report = small_server.check_models()
    print(f"\nafter kill -9: {report.describe()}")
    assert report.dead_models == ["l2_normalize"] and not report.healthy
    assert small_server.is_ready(), "Triton 2.51 keeps reporting ready with a dead stub (why we check stubs)"
    # Requests meanwhile: the live instance answers its share, and those the dead one takes fail.
    failures: list[ClientError] = []
    with TritonClient(url, retry=RetryPolicy(max_attempts=1)) as client:
        for _ in range(40):
            try:
                client.infer("l2_normalize", {"VECTOR": VECTOR})
            except ClientError as e:
                failures.append(e)
    assert failures, "no request reached the dead instance"
    first = failures[0]
    print(f"requests meanwhile: {len(failures)} of 40 failed, e.g. {first.status} {first.server_message}")
    assert all("Stub process 'l2_normalize_0_0' is not healthy" in e.server_message for e in failures)

    ports = (small_server.http_url, small_server.grpc_url)
    started = time.monotonic()
    small_server.restart(graceful=False)
    print(f"restart took {time.monotonic() - started:.1f} s")
    assert (small_server.http_url, small_server.grpc_url) == ports
    assert small_server.check_models().healthy
    with TritonClient(url) as client:
        np.testing.assert_allclose(client.infer("l2_normalize", {"VECTOR": VECTOR})["NORM"], [[38.678]], 1e-4)


def test_the_supervisor_repairs_a_stub_killed_under_load_and_the_client_loses_no_request(
    small_server: LocalTritonServer,
) -> None:
    """The project's client with its default retry policy: a request in flight at the kill, or sent
    while the stub is dead or the server restarts, is retried within the policy's deadline (inference
    is idempotent, clients/retry.py), so every request sent gets its real answer."""
    url = f"grpc://{small_server.grpc_url}"
    rate_per_worker_s, workers, answered = 0.02, 4, 40
    answers: list[tuple[float, float, str]] = []  # (sent at, answered at, "succeeded" or the failure)
    lock = threading.Lock()
    stop = threading.Event()

    def succeeded_since(start: float) -> int:
        with lock:
            return sum(1 for sent_at, _, outcome in answers if sent_at >= start and outcome == "succeeded")

    def repaired_and_answered() -> bool:
        repair = supervisor.repairs[0] if supervisor.repairs else None
        if repair is None or repair.repaired_s is None:
            return False
        return succeeded_since(repair.detected_at + repair.repaired_s) >= answered

    def load(client: TritonClient) -> None:
        while not stop.is_set():
            sent_at = time.monotonic()
            try:
                result = client.infer("l2_normalize", {"VECTOR": VECTOR}, timeout_s=10)
                np.testing.assert_allclose(result["NORM"], [[38.678]], 1e-4)  # a real answer, not noise
                outcome = "succeeded"
            except ClientError as e:
                outcome = f"failed: {type(e).__name__}: {e.server_message[:70]}"
            with lock:
                answers.append((sent_at, time.monotonic(), outcome))
            time.sleep(rate_per_worker_s)

    with small_server.supervise(interval_s=0.25) as supervisor, TritonClient(url) as client:
        assert client.options.retry == RetryPolicy()  # the defaults every client of the project gets
        with ThreadPoolExecutor(workers) as pool:
            futures = [pool.submit(load, client) for _ in range(workers)]
            try:  # the load runs until the stub has answered before the kill and again after the repair
                _wait_for(lambda: succeeded_since(0.0) >= answered, f"{answered} answers before the kill")
                killed_at = time.monotonic()
                _kill_stub(small_server, "l2_normalize_0_0")
                _wait_for(repaired_and_answered, f"the repair and {answered} answers after it")
            finally:
                stop.set()
            for future in futures:
                future.result()
        # After the repair the same client is answered again, request after request.
        for _ in range(20):
            np.testing.assert_allclose(
                client.infer("l2_normalize", {"VECTOR": VECTOR})["NORM"], [[38.678]], 1e-4
            )
    outcomes = Counter(outcome for _, _, outcome in answers)
    repair = supervisor.repairs[0] if supervisor.repairs else None
    print(
        f"\nsent={len(answers)} succeeded={outcomes['succeeded']} lost={len(answers) - outcomes['succeeded']}"
    )
    for outcome, count in sorted(outcomes.items()):
        print(f"  {count:5d} {outcome}")
    print(f"repairs: {[(r.problem, r.repaired_s) for r in supervisor.repairs]}")
    assert outcomes["succeeded"] >= 2 * answered
    assert len(supervisor.repairs) == 1 and repair is not None and repair.repaired_s is not None
    outage_s = repair.detected_at + repair.repaired_s - killed_at
    print(f"outage from kill to ready: {outage_s:.2f} s")
    assert outage_s < 15
    assert outcomes == {"succeeded": len(answers)}, outcomes  # zero lost
    # Every request answered before the kill succeeded, and some were.
    before = [outcome for _, answered_at, outcome in answers if answered_at < killed_at]
    assert before and set(before) == {"succeeded"}, Counter(before)
    assert small_server.check_models().healthy
    assert small_server.is_ready(), small_server.log_tail()


def test_sigterm_under_load_drains_every_request_sent_before_it_and_exits_cleanly(
    tmp_path: Path, model_metric, wait_for_queue
) -> None:
    """Accepted = the server had it at the signal: completed (success counter) or queued (pending gauge),
    read from the metrics port just before SIGTERM; plus the batch being executed, which the metrics do
    not show. Every accepted request must succeed. A request the client had not finished sending may
    see its connection closed (retryable ServerUnavailableError): the server never accepted it."""
    model = "image_preprocess"
    repository = _copy_models(tmp_path / "repository", model)
    image = (IMAGES / "astronaut.png").read_bytes()
    config = ServerConfig(model_repository=repository, exit_timeout_s=30, stop_timeout_s=40)
    server = LocalTritonServer(config).start()
    assert server.pid is not None
    process = psutil.Process(server.pid)
    requests = 48
    results: list[str] = []
    try:
        client = TritonClient(
            f"http://{server.http_url}", retry=RetryPolicy(max_attempts=1), max_in_flight=48
        )
        with client, ThreadPoolExecutor(requests) as pool:
            futures = [
                pool.submit(client.infer, model, {"IMAGE_BYTES": np.array([[image]], object)})
                for _ in range(requests)
            ]
            wait_for_queue(server, model)
            accepted = model_metric(server, "nv_inference_request_success", model) + model_metric(
                server, "nv_inference_pending_request_count", model
            )
            signalled = time.monotonic()
            process.send_signal(signal.SIGTERM)
            for future in futures:
                try:
                    future.result()
                    results.append("succeeded")
                except ServerUnavailableError:
                    results.append("refused")
                except ClientError as e:
                    results.append(f"failed: {e}")
        # Closing the client closes its keep-alive connections: Triton waits for open HTTP connections
        # (up to exit_timeout_s) before it stops, so an idle pooled connection would hold it up.
        code = process.wait(timeout=35)
        exit_s = time.monotonic() - signalled
    finally:
        server.stop()
    counts = Counter(results)
    succeeded, refused = counts["succeeded"], counts["refused"]
    print(
        f"\nsent={requests} accepted before SIGTERM>={accepted} succeeded={succeeded} "
        f"refused (never accepted)={refused} failed={requests - succeeded - refused}; "
        f"exit code {code} after {exit_s:.2f} s"
    )
    assert succeeded + refused == requests, counts
    assert succeeded >= accepted > 0
    assert code == 0 and exit_s < 25


def test_a_batch_job_loses_no_text_when_a_stub_of_its_pipeline_is_killed_mid_run(
    triton_repository: Path, tmp_path: Path
) -> None:
    """`python -m clients.batch` with its default retry against a supervised server of the text pipeline:
    the tokenizer's stub is killed while the job runs, and every text still gets its embedding."""
    repository = tmp_path / "repository"
    for model in ("text_tokenizer", "minilm_onnx", "text_embedder"):
        shutil.copytree(triton_repository / model, repository / model)  # links followed
    texts = tmp_path / "texts.txt"
    texts.write_text("".join(f"Sentence {i} about batching requests on a server.\n" for i in range(600)))
    output = tmp_path / "out.jsonl"
    config = ServerConfig(model_repository=repository, exit_timeout_s=2, stop_timeout_s=10)
    with LocalTritonServer(config) as server, server.supervise(interval_s=0.25) as supervisor:
        command = [sys.executable, "-m", "clients.batch", "--texts", str(texts), "--output", str(output)]
        job = subprocess.Popen(
            [*command, "--url", f"grpc://{server.grpc_url}", "--in-flight", "4", "--json", "--no-progress"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            deadline = time.monotonic() + 60
            while not output.exists() or len(output.read_bytes().splitlines()) < 50:
                assert job.poll() is None and time.monotonic() < deadline, job.stderr and job.stderr.read()
                time.sleep(0.01)
            _kill_stub(server, "text_tokenizer_0_0")
            stdout, stderr = job.communicate(timeout=240)
        finally:
            if job.poll() is None:
                job.kill()
                job.wait()
    summary = json.loads(stdout)
    counts = {key: summary[key] for key in ("total", "processed", "ok", "errors")}
    print(f"\n{counts}; repairs: {supervisor.repairs}")
    assert len(supervisor.repairs) == 1, stderr[-2000:]
    assert (summary["processed"], summary["ok"], summary["errors"]) == (600, 600, 0), stderr[-2000:]
    assert job.returncode == 0
