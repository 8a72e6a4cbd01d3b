"""The launcher against the real tritonserver: serving, batching, bad start conditions, clean stops."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import psutil
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from clients import ModelStatistics, TritonClient
from tritonlocal import LocalTritonServer, ModelLoadError, PortInUseError, RepositoryError, ServerConfig
from tritonrepo.derive import derive_repository
from tritonrepo.files import EXPORT_OUTPUTS
from tritonrepo.served_code import BATCHING_HELPER, PARAMETERS_HELPER

ROOT = Path(__file__).resolve().parents[2]
MODEL = "l2_normalize"
PROBE = Path(__file__).parent / "probes" / "interrupted_run.py"


@pytest.fixture()
def small_repository(tmp_path: Path) -> Path:
    """A repository holding only the l2_normalize model, for servers a test starts itself."""
    repo = tmp_path / "repository"
    shutil.copytree(
        ROOT / "model_repository" / MODEL, repo / MODEL, ignore=shutil.ignore_patterns("__pycache__")
    )
    return repo


def _vectors(rows: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(rows, 16)).astype(np.float32)


def _infer_http(url: str, vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    tensor = httpclient.InferInput("VECTOR", list(vectors.shape), "FP32")
    tensor.set_data_from_numpy(vectors)
    # Closed in the thread that made it: left to the garbage collector, tritonclient's HTTP client may be
    # closed from another thread, where its gevent pool has no hub and the close fails.
    with httpclient.InferenceServerClient(url) as client:
        result = client.infer(MODEL, [tensor])
    return result.as_numpy("NORMALIZED"), result.as_numpy("NORM")


def test_l2_normalize_is_correct_over_http_and_grpc(triton_server: LocalTritonServer) -> None:
    vectors = _vectors(5)
    expected_norm = np.linalg.norm(vectors, axis=1, keepdims=True)

    unit, norm = _infer_http(triton_server.http_url, vectors)
    np.testing.assert_allclose(norm, expected_norm, rtol=1e-5)
    np.testing.assert_allclose(unit, vectors / expected_norm, rtol=1e-5, atol=1e-6)

    client = grpcclient.InferenceServerClient(triton_server.grpc_url)
    tensor = grpcclient.InferInput("VECTOR", list(vectors.shape), "FP32")
    tensor.set_data_from_numpy(vectors)
    result = client.infer(MODEL, [tensor])
    np.testing.assert_allclose(result.as_numpy("NORMALIZED"), unit, rtol=1e-6)


def test_a_bad_request_fails_alone_with_a_message_naming_the_input(triton_server: LocalTritonServer) -> None:
    bad = _vectors(1)
    bad[0, 3] = np.nan
    with pytest.raises(Exception, match="VECTOR: every value must be finite"):
        _infer_http(triton_server.http_url, bad)
    unit, _ = _infer_http(triton_server.http_url, _vectors(2))
    assert unit.shape == (2, 16)


def test_concurrent_requests_are_batched_into_fewer_executions(
    triton_server: LocalTritonServer, settled_statistics: Callable[[TritonClient, str], ModelStatistics]
) -> None:
    with TritonClient(f"http://{triton_server.http_url}") as stats:
        before = settled_statistics(stats, MODEL)  # the earlier tests' requests counted, or 96 reads 97

    def one_request(seed: int) -> tuple[int, np.ndarray]:
        _, norm = _infer_http(triton_server.http_url, _vectors(1, seed=seed))
        return seed, norm

    with ThreadPoolExecutor(max_workers=32) as pool:  # 32 requests in flight at once
        results = list(pool.map(one_request, range(96)))
    for seed, norm in results:  # each response belongs to its own request
        expected = np.linalg.norm(_vectors(1, seed=seed), axis=1, keepdims=True)
        np.testing.assert_allclose(norm, expected, rtol=1e-5)
    with TritonClient(f"http://{triton_server.http_url}") as stats:
        delta = stats.statistics_since(before, requests=len(results))
    print(f"96 requests at concurrency 32: {delta.inferences} inferences in {delta.executions} executions")
    assert delta.inferences == 96
    assert delta.executions < delta.inferences, "the dynamic batcher formed no batch"


def test_a_port_in_use_is_reported_before_the_server_starts(small_repository: Path) -> None:
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        port = blocker.getsockname()[1]
        with pytest.raises(
            PortInUseError, match=rf"http port {port} on 127.0.0.1 is already in use.*--http-port"
        ):
            LocalTritonServer(ServerConfig(model_repository=small_repository, http_port=port)).start()


def test_a_missing_repository_is_reported(tmp_path: Path) -> None:
    with pytest.raises(RepositoryError, match="does not exist"):
        LocalTritonServer(ServerConfig(model_repository=tmp_path / "missing")).start()


def test_an_empty_repository_is_reported(tmp_path: Path) -> None:
    with pytest.raises(RepositoryError, match="is empty"):
        LocalTritonServer(ServerConfig(model_repository=tmp_path)).start()


def test_a_model_that_fails_to_load_is_reported_with_the_servers_error_line(small_repository: Path) -> None:
    broken = small_repository / "broken"
    shutil.copytree(small_repository / MODEL, broken)
    (broken / "config.pbtxt").write_text((broken / "config.pbtxt").read_text().replace(MODEL, "broken"))
    (broken / "1" / "model.py").write_text("raise ImportError('the weights file is corrupt')\n")
    server = LocalTritonServer(ServerConfig(model_repository=small_repository, exit_timeout_s=2))
    with pytest.raises(ModelLoadError) as failure:
        server.start()
    assert any(
        "failed to load 'broken'" in line and "the weights file is corrupt" in line
        for line in failure.value.error_lines
    )
    assert "broken" in str(failure.value)
    assert not server.is_running()


def test_a_python_model_without_its_model_file_is_reported_without_waiting_out_the_start_timeout(
    small_repository: Path,
) -> None:
    # Its stub exits at once, and Triton then waits on it for minutes rather than failing the load.
    (small_repository / MODEL / "1" / "model.py").unlink()
    config = ServerConfig(model_repository=small_repository, exit_timeout_s=2, startup_timeout_s=120)
    server = LocalTritonServer(config)
    started = time.monotonic()
    with pytest.raises(ModelLoadError, match=rf"model\(s\) {MODEL} failed to load") as failure:
        server.start()
    assert time.monotonic() - started < 60  # generous: it takes about a second
    assert any("Python model file not found" in line for line in failure.value.error_lines)
    assert not server.is_running()


def test_a_repository_whose_tokenizer_was_not_exported_still_serves_its_other_models(tmp_path: Path) -> None:
    """As `tritonlocal serve` does: derive, then start failing fast on any model that does not load. The
    tokenizer without its tokenizer.json is left out by the derivation, with the pipeline through it,
    instead of stopping the whole server."""
    source, exported = tmp_path / "source", shutil.ignore_patterns(*EXPORT_OUTPUTS)
    source.mkdir()
    for helper in (BATCHING_HELPER, PARAMETERS_HELPER):
        shutil.copyfile(ROOT / "model_repository" / helper, source / helper)
    for name in (MODEL, "text_tokenizer", "text_embedder"):
        shutil.copytree(ROOT / "model_repository" / name, source / name, symlinks=True, ignore=exported)
    derived = derive_repository(source, tmp_path / "local")
    with LocalTritonServer(ServerConfig(model_repository=tmp_path / "local", exit_timeout_s=2)) as server:
        normalized, norms = _infer_http(server.http_url, _vectors(3))
    np.testing.assert_allclose(np.linalg.norm(normalized, axis=1), 1.0, rtol=1e-5)
    assert norms.shape[0] == 3
    assert derived.written == [MODEL] and set(derived.skipped) == {"text_tokenizer", "text_embedder"}


def test_stop_leaves_no_server_or_stub_process(small_repository: Path) -> None:
    server = LocalTritonServer(ServerConfig(model_repository=small_repository)).start()
    pid = server.pid
    assert pid is not None
    tree = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    assert any("stub" in p.name() for p in tree), "expected a Python-backend stub under the server"
    server.stop()
    assert not [p for p in tree if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


@pytest.mark.parametrize(
    "signum", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=lambda s: signal.Signals(s).name
)
def test_an_interrupted_test_run_leaves_no_server_or_stub(
    small_repository: Path, tmp_path: Path, signum: int
) -> None:
    pid_file, log = tmp_path / "pids.txt", tmp_path / "probe.log"
    # Its output goes to a file, not a pipe nobody reads until the end: a full pipe would block its exit.
    with log.open("wb") as output:  # the child keeps its own copy of the descriptor
        run = (
            subprocess.Popen(  # a real pytest run that starts the fixture's server and is interrupted midway
                [
                    sys.executable,
                    "-m",
                    "pytest",
                    "-q",
                    "-p",
                    "no:cacheprovider",
                    str(PROBE),
                    f"--triton-repository={small_repository}",
                    f"--rootdir={ROOT}",
                    "-c",
                    str(ROOT / "pyproject.toml"),
                ],
                cwd=ROOT,
                env={**os.environ, "PROBE_PID_FILE": str(pid_file)},
                stdout=output,
                stderr=subprocess.STDOUT,
            )
        )
    try:
        pids = _wait_for_pids(pid_file, run, log)
        run.send_signal(signum)
        try:
            run.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail(
                f"the probe run did not exit within 60 s of {signal.Signals(signum).name}:\n{log.read_text()}"
            )
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and _alive(pids):
        time.sleep(0.1)
    assert not _alive(pids), f"left running after {signal.Signals(signum).name}: {_alive(pids)}"


def _wait_for_pids(pid_file: Path, run: subprocess.Popen, log: Path, timeout_s: float = 120) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pid_file.exists() and pid_file.read_text().endswith("\n"):
            return [int(p) for p in pid_file.read_text().split()]
        if run.poll() is not None:
            pytest.fail(f"the probe run ended before its server was up:\n{log.read_text()}")
        time.sleep(0.1)
    pytest.fail("the probe run's server did not come up")


def _alive(pids: list[int]) -> list[int]:
    alive = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
        except psutil.NoSuchProcess:
            pass
    return alive
