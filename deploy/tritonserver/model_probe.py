"""Per-model health check for tritonserver: the readiness and liveness probe of the deployments.

Triton's own ``/v2/health/ready`` cannot serve as the probe here:
- a Python-backend stub that died (OOM killer, a segfault, ``kill -9``) is not restarted by Triton 2.51,
  and the server and the model keep answering "ready" while every request routed to that instance fails
  with "Stub process '<instance>' is not healthy";
- the server runs with ``--exit-on-error=false`` so that one model that fails to load does not take the
  others down, and then the pipelines that did load must decide whether the pod serves.

This script, run inside the server's container (stdlib only; Python 3.10 in NVIDIA's image), exits 0
only when the server is live, every model named in ``--require`` (or ``$TRITON_REQUIRED_MODELS``) is
ready, and every instance of every ready Python-backend model has a live stub process. It prints what
it found, naming the models that failed to load (with the server's reason) and the dead instances:

    python3 /opt/tritonserver/model_probe.py --require image_classifier,text_embedder

The repository index and model configurations are restricted APIs: the probe sends the
``triton-admin-key`` header from ``$TRITON_ADMIN_KEY`` when set.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.request
from pathlib import Path

STUB_EXECUTABLE = "triton_python_backend_stub"
# The stub's argv: binary, model.py, shm region, two sizes, parent pid, lib dir, ipc handle, instance.
STUB_PARENT_ARG = 5
STUB_INSTANCE_ARG = 8
ADMIN_HEADER = "triton-admin-key"


class ProbeError(Exception):
    """The server could not be asked (not listening, refused, timed out)."""


def request(url: str, *, method: str = "GET", admin_key: str | None, timeout_s: float) -> tuple[int, object]:
    headers = {ADMIN_HEADER: admin_key} if admin_key else {}
    data = b"{}" if method == "POST" else None
    req = urllib.request.Request(url, data=data, method=method, headers=headers)  # noqa: S310 - probe URL
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as response:  # noqa: S310
            body = response.read()
            return response.status, json.loads(body) if body else None
    except urllib.error.HTTPError as e:
        return e.code, None
    except (urllib.error.URLError, OSError) as e:
        raise ProbeError(f"{url}: {e}") from e


def live_stub_instances(proc: Path, server_pid: int | None) -> set[str]:
    """Instance names of the live stub processes (below ``server_pid`` when given)."""
    found: set[str] = set()
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            status = (entry / "status").read_text()
        except OSError:
            continue  # exited while we looked
        if "State:\tZ" in status or len(argv) <= STUB_INSTANCE_ARG:
            continue
        if not argv[0].decode(errors="replace").endswith(STUB_EXECUTABLE):
            continue
        if server_pid is not None and argv[STUB_PARENT_ARG] != str(server_pid).encode():
            continue
        found.add(argv[STUB_INSTANCE_ARG].decode(errors="replace"))
    return found


def expected_instances(config: dict) -> list[str]:
    """``<group>_<index>`` for every instance of a model configuration (as Triton names them)."""
    names = []
    groups = config.get("instance_group") or [{}]
    for position, group in enumerate(groups):
        group_name = group.get("name") or f"{config['name']}_{position}"
        names.extend(f"{group_name}_{index}" for index in range(max(1, int(group.get("count", 1)))))
    return names


def probe(args: argparse.Namespace) -> list[str]:
    """The problems found; an empty list means healthy. Prints the state of every model."""
    base = args.url.rstrip("/")
    key = os.environ.get("TRITON_ADMIN_KEY") or None
    timeout = args.timeout_s
    problems: list[str] = []
    status, _ = request(f"{base}/v2/health/live", admin_key=None, timeout_s=timeout)
    if status != 200:
        return [f"tritonserver is not live (/v2/health/live answered {status})"]
    for model in args.require:
        status, _ = request(f"{base}/v2/models/{model}/ready", admin_key=None, timeout_s=timeout)
        if status != 200:
            problems.append(f"required model {model} is not ready (HTTP {status})")
    status, index = request(f"{base}/v2/repository/index", method="POST", admin_key=key, timeout_s=timeout)
    if status != 200 or not isinstance(index, list):
        problems.append(f"repository index unavailable (HTTP {status}); set TRITON_ADMIN_KEY")
        return problems
    alive = live_stub_instances(args.proc, args.server_pid)
    for model in sorted(index, key=lambda m: m.get("name", "")):
        name, state = model.get("name", "?"), model.get("state", "UNKNOWN")
        if state != "READY":
            print(f"not loaded: {name} ({state}): {model.get('reason', 'no reason given')}")
            continue
        status, config = request(f"{base}/v2/models/{name}/config", admin_key=key, timeout_s=timeout)
        if status != 200 or not isinstance(config, dict):
            problems.append(f"{name}: configuration unavailable (HTTP {status})")
            continue
        if config.get("backend") != "python":
            continue
        dead = [instance for instance in expected_instances(config) if instance not in alive]
        if dead:
            problems.append(f"{name}: stub process dead for instance(s) {', '.join(dead)}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument(
        "--require",
        type=lambda text: [m for m in text.split(",") if m],
        default=[m for m in os.environ.get("TRITON_REQUIRED_MODELS", "").split(",") if m],
        help="comma-separated models that must be ready (default: $TRITON_REQUIRED_MODELS)",
    )
    parser.add_argument("--server-pid", type=int, default=None, help="only stubs of this server")
    parser.add_argument("--proc", type=Path, default=Path("/proc"), help=argparse.SUPPRESS)
    parser.add_argument("--timeout-s", type=float, default=2.0)
    args = parser.parse_args(argv)
    try:
        problems = probe(args)
    except ProbeError as e:
        problems = [f"cannot reach tritonserver: {e}"]
    for problem in problems:
        print(f"UNHEALTHY: {problem}")
    if not problems:
        print("healthy: server live, required models ready, every Python-backend instance has its stub")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
