"""Which tritonserver the GPU benchmark measures, and whether it serves what the plan measures.

Two servers can stand behind a run. With ``--url`` it is a running tritonserver, such as the compose
profile ``bench``'s ``tritonserver-bench``: NVIDIA's container serving the benchmark's variants with the
models' own configurations (onnxruntime and libtorch backends). Without it the run starts the local
tritonserver of the nvidia-pytriton wheel on a derived repository, where every exported file runs in the
Python backend. The report names which, with the server's version and each measured model's platform
or backend as the server itself reports them.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass

from clients.endpoint import server_addresses
from tritonrepo.access import ADMIN_HEADER

TIMEOUT_S = 10.0
COMPOSE_BENCH = (
    "docker compose --env-file deploy/versions.env --env-file deploy/secrets.env run --rm bench-gpu"
)
WRITE_REPOSITORY = "python -m loadtest.bench --mode gpu --write-repository build/bench_repository"
LOCAL_LABEL = (
    "the local tritonserver from the nvidia-pytriton wheel: ONNX and TorchScript files run in the Python "
    "backend (tritonrepo/native_runner.py), not in the container's onnxruntime and libtorch backends; "
    "its batching and instance figures do not describe a compose deployment"
)
URL_LABEL = (
    "the running tritonserver at {url} (started outside this run; the compose profile bench serves the "
    "models' own configurations in NVIDIA's container): each model's platform or backend below is what it "
    "reports"
)


@dataclass(frozen=True, kw_only=True)
class ServerUrls:
    """A running server's endpoints as ``host:port``, the form perf_analyzer and tritonclient take."""

    http_url: str
    grpc_url: str


def server_urls(url: str, grpc_url: str | None = None) -> ServerUrls:
    """``--url`` (``http://host:port``; the port defaults to 8000) and ``--grpc-url`` (``host:port``;
    default: the same host, port 8001) as :class:`ServerUrls`. Raises ValueError naming what is wrong."""
    http, grpc = server_addresses(url, grpc_url)
    return ServerUrls(http_url=http, grpc_url=grpc)


def not_ready(http_url: str, models: list[str]) -> list[str]:
    """The models of ``models`` the server at ``http_url`` does not report ready. Raises OSError when no
    server answers there at all."""
    _get(http_url, "/v2/health/live")  # a server that does not answer is not a list of missing models
    missing = []
    for model in models:
        try:
            _get(http_url, f"/v2/models/{model}/ready")
        except urllib.error.HTTPError:
            missing.append(model)
    return missing


def config_restricted(http_url: str, model: str, admin_key: str | None = None) -> bool:
    """Whether the server refuses ``model``'s configuration to a request with ``admin_key`` (None: none).
    perf_analyzer reads it over HTTP and gRPC, sending the key the run has (``TRITON_ADMIN_KEY``)."""
    try:
        _get(http_url, f"/v2/models/{model}/config", admin_key)
    except urllib.error.HTTPError as e:
        return e.code == 403
    return False


RESTRICTED_CONFIG = (
    "the tritonserver at http://{url} answers its model-config API, which perf_analyzer reads, only with "
    "the admin header ("
    + ADMIN_HEADER
    + "), and this run has no key that opens it: set TRITON_ADMIN_KEY to the server's key (compose's "
    "bench-gpu passes the one in deploy/secrets.env)"
)


def refusal(http_url: str, missing: list[str]) -> str:
    """Why a run against ``http_url`` cannot measure the plan, and the commands that serve what it needs."""
    return (
        f"the tritonserver at http://{http_url} does not serve {len(missing)} model(s) the GPU plan "
        f"measures: {', '.join(missing)}. On a GPU host the compose profile bench serves them: "
        f"`{COMPOSE_BENCH}` "
        f"writes the benchmark's repository (`{WRITE_REPOSITORY}`), starts tritonserver-bench on it and "
        "measures it. For another server, write that repository and serve the folder."
    )


def describe(http_url: str, models: list[str], *, label: str, admin_key: str | None = None) -> dict:
    """What the server at ``http_url`` is: ``label``, its URL and version (``/v2``), and each of
    ``models``' platform or backend from ``/v2/models/<m>/config`` (read with ``admin_key``)."""
    try:
        version = str(json.loads(_get(http_url, "/v2"))["version"])
    except (OSError, ValueError, KeyError) as e:
        version = f"unknown ({type(e).__name__})"
    return {
        "label": label,
        "url": f"http://{http_url}",
        "version": version,
        "models": {model: _backend(http_url, model, admin_key) for model in models},
    }


def _backend(http_url: str, model: str, admin_key: str | None) -> str:
    try:
        config = json.loads(_get(http_url, f"/v2/models/{model}/config", admin_key))
    except (OSError, ValueError) as e:
        return f"unknown ({type(e).__name__}: {e})"
    return str(config.get("platform") or config.get("backend") or "unknown")


def _get(http_url: str, path: str, admin_key: str | None = None) -> bytes:
    """The body of GET ``path``, with the admin header when ``admin_key`` is given (urllib.error.HTTPError
    for any status but 2xx, OSError when unreachable)."""
    headers = {ADMIN_HEADER: admin_key} if admin_key is not None else {}
    request = urllib.request.Request(f"http://{http_url}{path}", headers=headers)
    with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
        return bytes(response.read())
