"""Untrusted clients: loopback binding, model control off, restricted APIs behind a per-start key.

A server of our own, started with ``generate_admin_key=True`` (a random key per start, on
``server.admin_key``). Measured on Triton 2.51: a restricted API without the key answers HTTP 403
"This API is restricted, expecting header 'triton-admin-key'" and gRPC UNAVAILABLE "This protocol is
restricted, expecting header 'triton-grpc-protocol-triton-admin-key'" (gRPC looks for the header under
that prefix). With the key the call goes through, except loading/unloading models, which model control
mode "none" refuses to everyone (HTTP 503 / gRPC UNAVAILABLE).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from clients import RestrictedApiError, RetryPolicy, TritonClient
from tritonlocal import LocalTritonServer, ServerConfig
from tritonrepo.access import ADMIN_HEADER

ROOT = Path(__file__).resolve().parents[2]
MODEL = "l2_normalize"
GRPC_PREFIX = "triton-grpc-protocol-"
REFUSED = {"http": ("403", "This API is restricted"), "grpc": ("StatusCode.UNAVAILABLE", "is restricted")}
# Restricted API -> a call to it (client, headers) -> result. Each names the API group it belongs to.
RESTRICTED_CALLS: dict[str, Callable[[Any, dict], Any]] = {
    "model-repository: index": lambda c, h: c.get_model_repository_index(headers=h),
    "model-config: get": lambda c, h: c.get_model_config(MODEL, headers=h),
    "shared-memory: status": lambda c, h: c.get_system_shared_memory_status(headers=h),
    "shared-memory: unregister": lambda c, h: c.unregister_system_shared_memory(headers=h),
    "logging: get": lambda c, h: c.get_log_settings(headers=h),
    "trace: get": lambda c, h: c.get_trace_settings(headers=h),
}
OPEN_CALLS: dict[str, Callable[[Any], Any]] = {
    "health": lambda c: c.is_server_ready(),
    "metadata": lambda c: c.get_model_metadata(MODEL),
    "statistics": lambda c: c.get_inference_statistics(MODEL),
}


@pytest.fixture(scope="module")
def keyed_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalTritonServer]:
    repository = tmp_path_factory.mktemp("access") / "repository"
    shutil.copytree(
        ROOT / "model_repository" / MODEL, repository / MODEL, ignore=shutil.ignore_patterns("__pycache__")
    )
    config = ServerConfig(model_repository=repository, generate_admin_key=True, exit_timeout_s=2)
    with LocalTritonServer(config) as server:
        yield server


def _client(server: LocalTritonServer, protocol: str) -> Any:
    if protocol == "http":
        return httpclient.InferenceServerClient(server.http_url)
    return grpcclient.InferenceServerClient(server.grpc_url)


def _key_headers(server: LocalTritonServer, protocol: str) -> dict[str, str]:
    assert server.admin_key
    return {(GRPC_PREFIX if protocol == "grpc" else "") + ADMIN_HEADER: server.admin_key}


def test_each_start_generates_a_fresh_admin_key_and_restricts_the_apis_on_the_command_line(
    tmp_path: Path,
) -> None:
    shutil.copytree(
        ROOT / "model_repository" / MODEL, tmp_path / MODEL, ignore=shutil.ignore_patterns("__pycache__")
    )
    server = LocalTritonServer(
        ServerConfig(model_repository=tmp_path, generate_admin_key=True, exit_timeout_s=2)
    )
    keys = []
    for _ in range(2):
        with server:
            keys.append(server.admin_key)
            assert server.admin_headers == {ADMIN_HEADER: server.admin_key}
            assert server.pid is not None
            command = " ".join(psutil.Process(server.pid).cmdline())
            assert (
                f"--http-restricted-api=model-repository,model-config,shared-memory,logging,trace:{ADMIN_HEADER}="
                in command
            )
            assert (
                "--grpc-restricted-protocol=model-repository,model-config,shared-memory,logging,trace:"
                in command
            )
            assert "--model-control-mode=none" in command
            assert "--http-address=127.0.0.1" in command and "--grpc-address=127.0.0.1" in command
    assert all(k and len(k) >= 24 for k in keys) and keys[0] != keys[1]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize("api", sorted(RESTRICTED_CALLS))
def test_a_restricted_api_is_refused_without_the_key_and_allowed_with_it(
    keyed_server: LocalTritonServer, protocol: str, api: str
) -> None:
    call = RESTRICTED_CALLS[api]
    client = _client(keyed_server, protocol)
    with pytest.raises(InferenceServerException) as refused:
        call(client, {})
    status, words = REFUSED[protocol]
    print(f"\n{protocol} {api} without key: {refused.value.status()} {refused.value.message()}")
    assert refused.value.status() == status and words in refused.value.message()
    with pytest.raises(InferenceServerException):
        call(client, {(GRPC_PREFIX if protocol == "grpc" else "") + ADMIN_HEADER: "wrong-key"})
    call(client, _key_headers(keyed_server, protocol))  # with the key: answered


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_model_control_is_off_even_with_the_key(keyed_server: LocalTritonServer, protocol: str) -> None:
    client = _client(keyed_server, protocol)
    for action in (client.load_model, client.unload_model):
        with pytest.raises(InferenceServerException) as refused:
            action(MODEL, headers=_key_headers(keyed_server, protocol))
        print(f"\n{protocol} {action.__name__} with key: {refused.value.status()} {refused.value.message()}")
        assert "not allowed" in refused.value.message()
    assert client.is_model_ready(MODEL)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_health_metadata_statistics_and_inference_stay_open(
    keyed_server: LocalTritonServer, protocol: str
) -> None:
    client = _client(keyed_server, protocol)
    for name, call in OPEN_CALLS.items():
        assert call(client), name
    with TritonClient(f"{protocol}://{_url(keyed_server, protocol)}") as library:
        outputs = library.infer(MODEL, {"VECTOR": np.ones((2, 16), np.float32)})
    np.testing.assert_allclose(outputs["NORM"], 4.0)


def _url(server: LocalTritonServer, protocol: str) -> str:
    return server.http_url if protocol == "http" else server.grpc_url


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_the_client_does_not_retry_a_refused_restricted_call_and_passes_the_key_when_given(
    keyed_server: LocalTritonServer, protocol: str
) -> None:
    url = f"{protocol}://{_url(keyed_server, protocol)}"
    with (
        TritonClient(url, retry=RetryPolicy(max_attempts=5)) as client,
        pytest.raises(RestrictedApiError) as e,
    ):
        client.models()
    assert e.value.attempts == 1 and not e.value.retryable
    with TritonClient(url, headers=keyed_server.admin_headers) as client:
        assert [m.name for m in client.models()] == [MODEL]
        assert client.signature(MODEL).max_batch_size == 64  # read from the (restricted) model config


def _other_local_addresses() -> list[str]:
    found = ["127.0.0.2"]  # loopback too, but a different address than the one the server bound
    for addresses in psutil.net_if_addrs().values():
        found += [a.address for a in addresses if a.family == socket.AF_INET and a.address != "127.0.0.1"]
    return sorted(set(found))


@pytest.mark.parametrize("port_name", ["http_port", "grpc_port", "metrics_port"])
def test_the_ports_are_bound_to_loopback_only(keyed_server: LocalTritonServer, port_name: str) -> None:
    port = getattr(keyed_server.config, port_name)
    with socket.create_connection(("127.0.0.1", port), timeout=2):
        pass
    for address in _other_local_addresses():
        with pytest.raises(OSError), socket.create_connection((address, port), timeout=2):
            pass
    print(
        f"\n{port_name} {port}: reachable on 127.0.0.1 only; refused on {', '.join(_other_local_addresses())}"
    )


def test_the_clients_cli_passes_the_admin_key_from_the_environment(keyed_server: LocalTritonServer) -> None:
    command = [
        sys.executable,
        "-m",
        "clients",
        "--url",
        f"http://{keyed_server.http_url}",
        "--json",
        "models",
    ]
    environment = {k: v for k, v in os.environ.items() if k != "TRITON_ADMIN_KEY"}
    refused = subprocess.run(command, capture_output=True, text=True, env=environment, check=False)
    assert refused.returncode != 0 and "restricted, expecting header 'triton-admin-key'" in refused.stderr
    allowed = subprocess.run(
        command,
        capture_output=True,
        text=True,
        env={**environment, "TRITON_ADMIN_KEY": keyed_server.admin_key or ""},
        check=False,
    )
    assert allowed.returncode == 0, allowed.stderr
    assert "l2_normalize" in allowed.stdout
