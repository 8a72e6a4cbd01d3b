"""LocalTritonServer: start a real tritonserver on loopback, wait for readiness, stop it cleanly."""

from __future__ import annotations

import atexit
import logging
import re
import secrets
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import IO

from tritonlocal import health
from tritonlocal import process as proc
from tritonlocal.config import ServerConfig
from tritonlocal.errors import (
    ModelLoadError,
    PortInUseError,
    ServerStartError,
    TritonLocalError,
)
from tritonlocal.installation import find_installation, prepare_backend_directory, server_environment
from tritonlocal.ports import pick_free_port, port_in_use
from tritonrepo.access import ADMIN_HEADER
from tritonrepo.errors import RepositoryError
from tritonrepo.paths import LOGS

logger = logging.getLogger(__name__)

# The server logs "failed to load 'name' version 1: <reason>\n\nAt: <traceback>" with literal "\n".
_LOAD_FAILURE = re.compile(r"failed to load '([^']+)'(?:(?!\\n)[^\n\"])*")
_ADDRESS_IN_USE = re.compile(
    r".*(already in use|Address in use|Failed to listen|failed to start \w+ service).*", re.I
)
# A Python-backend stub that cannot start ("Python model file not found in '<repo>/<model>/1/model.py'")
# exits, and Triton 2.51 then waits on it for minutes instead of failing the model's load.
_STUB_FAILURE = re.compile(r"Failed to preinitialize Python stub: [^\n]*")
_STUB_MODEL = re.compile(r"'[^']*/([^/']+)/\d+/[^/']*'")
_POLL_INTERVAL_S = 0.1
_PORT_FLAGS = {"http_port": "--http-port", "grpc_port": "--grpc-port", "metrics_port": "--metrics-port"}

# The kernel's parent-death signal (process.spawn) fires when the *thread* that started the child exits.
# A server restarted from a short-lived thread (the Supervisor's) would be killed with it, so every
# server is started from the main thread or from this one thread, which lives as long as the process.
_SPAWNER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tritonlocal-spawner")


class LocalTritonServer(proc.Endpoint):
    """A tritonserver process serving ``config.model_repository``.

    Use it as a context manager (``with LocalTritonServer(config) as server: ...``) or call
    :meth:`start` and :meth:`stop`. The server and every Python-backend stub it spawns are stopped on
    exit, on an exception, on interpreter exit, and by the kernel if this process is killed.
    """

    config: ServerConfig

    def __init__(self, config: ServerConfig) -> None:
        self.requested = config
        self.config = config
        self._process: subprocess.Popen | None = None
        self._log_file: IO[bytes] | None = None
        self.log_path: Path | None = None
        # Models that failed to load while the server serves the others (ServerConfig.exit_on_error=False).
        self.failed_models: dict[str, str] = {}

    # -- addresses (http_url and grpc_url: proc.Endpoint) --------------------------------------------
    @property
    def metrics_url(self) -> str:
        return f"http://{self.config.host}:{self.config.metrics_port}/metrics"

    @property
    def admin_key(self) -> str | None:
        """The key that opens the restricted APIs (given, or generated at start), None if unrestricted."""
        return self.config.admin_key

    @property
    def admin_headers(self) -> dict[str, str]:
        """Headers for restricted calls (shared memory, model config...): ``{"triton-admin-key": key}``."""
        return {ADMIN_HEADER: self.config.admin_key} if self.config.admin_key else {}

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def is_running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> LocalTritonServer:
        if self.is_running():
            return self
        check_repository(self.requested.model_repository)
        installation = find_installation()
        backend_dir = prepare_backend_directory(installation, _state_dir() / "backends")
        env = {**server_environment(installation), **self.requested.environment}
        auto_ports = [name for name in _PORT_FLAGS if getattr(self.requested, name) == 0]
        attempts = 3 if auto_ports else 1
        admin_key = self.requested.admin_key
        if admin_key is None and self.requested.generate_admin_key:
            admin_key = secrets.token_urlsafe(24)  # per start; read it from self.admin_key
        for attempt in range(1, attempts + 1):
            self.config = replace(self._resolve_ports(), admin_key=admin_key)
            command = self.config.command(installation.binary, backend_dir)
            self._launch(command, env)
            try:
                self._wait_ready()
                break
            except PortInUseError:
                self.stop()
                if attempt == attempts:
                    raise
                logger.info("a picked port was taken before the server bound it; retrying")
            except BaseException:
                self.stop()
                raise
        atexit.register(self.stop)
        self.failed_models = self._load_failures()
        for name, line in self.failed_models.items():
            logger.warning("serving without %s: %s", name, line)
        logger.info(
            "tritonserver ready: http %s grpc %s (log %s)", self.http_url, self.grpc_url, self.log_path
        )
        return self

    def stop(self, *, timeout_s: float | None = None) -> int | None:
        """Stop the server (SIGTERM, wait up to ``timeout_s`` (default: stop_timeout_s), SIGKILL) and
        every process it spawned."""
        if self._process is None:
            return None
        wait_s = self.config.stop_timeout_s if timeout_s is None else timeout_s
        code = proc.terminate_tree(self._process, timeout_s=wait_s)
        self._process = None
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        atexit.unregister(self.stop)
        return code

    def restart(self, *, graceful: bool = True) -> LocalTritonServer:
        """Stop and start again on the same ports with the same admin key, so clients can carry on.

        The repair for a dead Python-backend stub: with model control mode "none" nothing else can
        reload a model (see docs/failure-modes.md). ``graceful=False`` kills the server at once instead
        of letting it drain: with a dead stub it would wait out exit_timeout_s while answering 404
        ("no available versions") for the model it unloads, which clients rightly do not retry, whereas
        a refused connection during the restart is retried.
        """
        keep = self.config
        self.stop(timeout_s=None if graceful else 0.0)
        if self.log_path is not None and self.log_path.exists():  # keep the log of what went wrong
            self.log_path.replace(self.log_path.with_name(self.log_path.name + ".before-restart"))
        self.requested = replace(
            self.requested,
            http_port=keep.http_port,
            grpc_port=keep.grpc_port,
            metrics_port=keep.metrics_port,
            admin_key=keep.admin_key,
        )
        return self.start()

    def check_models(self) -> health.ModelHealth:
        """Which Python-backend model instances have a live stub process (see tritonlocal.health)."""
        return health.check_models(self.pid, self.config.model_repository)

    def supervise(self, *, interval_s: float = 1.0) -> health.Supervisor:
        """Start a background thread that restarts the server when a stub dies; stop() it when done."""
        return health.Supervisor(server=self, interval_s=interval_s).start()

    # -- diagnostics -----------------------------------------------------------------------------
    def log_tail(self, lines: int = 40) -> str:
        return proc.log_tail(self.log_path, lines)

    def is_ready(self) -> bool:
        return _http_ok(f"http://{self.http_url}/v2/health/ready")

    # -- internals -------------------------------------------------------------------------------
    def _resolve_ports(self) -> ServerConfig:
        host = self.requested.host
        resolved: dict[str, int] = {}
        for name, flag in _PORT_FLAGS.items():
            port = getattr(self.requested, name)
            if port == 0:
                taken = set(resolved.values())
                port = pick_free_port(host)
                while port in taken:
                    port = pick_free_port(host)
            elif port_in_use(host, port):
                raise PortInUseError(
                    f"{name.replace('_', ' ')} {port} on {host} is already in use by another process; "
                    f"stop that process, choose another port with {flag}, or pass {flag} 0 to pick a free one"
                )
            resolved[name] = port
        return replace(
            self.requested,
            http_port=resolved["http_port"],
            grpc_port=resolved["grpc_port"],
            metrics_port=resolved["metrics_port"],
        )

    def _launch(self, command: list[str], env: dict[str, str]) -> None:
        log_path = self.requested.log_path or LOGS / f"tritonserver-{self.config.http_port}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log_path = log_path
        log_file = log_path.open("wb")
        self._log_file = log_file
        logger.debug("starting %s", " ".join(command))

        def spawn() -> subprocess.Popen:
            return proc.spawn(command, env=env, log=log_file, cwd=Path.cwd())

        in_main = threading.current_thread() is threading.main_thread()
        self._process = spawn() if in_main else _SPAWNER.submit(spawn).result()

    def _wait_ready(self) -> None:
        assert self._process is not None
        deadline = time.monotonic() + self.config.startup_timeout_s
        url = f"http://{self.http_url}/v2/health/ready"
        scanned = 0  # bytes of the log already searched for a stub that could not start
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise self._start_failure(f"tritonserver exited with code {self._process.returncode}")
            if _http_ok(url):
                return
            scanned, stub_failed = _scan_for_stub_failure(self.log_path, scanned)
            if stub_failed:
                raise self._start_failure("a Python-backend stub could not start")
            time.sleep(_POLL_INTERVAL_S)
        raise ServerStartError(
            f"tritonserver was not ready after {self.config.startup_timeout_s:.0f} s "
            f"(polling {url}); raise startup_timeout_s if models load slowly",
            log_tail=self.log_tail(),
        )

    def _load_failures(self) -> dict[str, str]:
        """Model name -> the server's "failed to load" lines for it, for each model that did not load."""
        log = self._log_text()
        failed: dict[str, list[str]] = {}
        for line in _failure_lines(log):
            match = _LOAD_FAILURE.match(line)
            if match:
                failed.setdefault(match.group(1), []).append(line)
        return {name: "; ".join(lines) for name, lines in sorted(failed.items())}

    def _log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path and self.log_path.exists() else ""

    def _start_failure(self, headline: str) -> TritonLocalError:
        log = self._log_text()
        tail = self.log_tail()
        stubs = [m.group(0).strip() for m in _STUB_FAILURE.finditer(log)]
        failures = _failure_lines(log) + list(dict.fromkeys(stubs))
        if failures:
            names = sorted(
                {m.group(1) for m in _LOAD_FAILURE.finditer(log)}
                | {m.group(1) if m else "(unnamed)" for m in map(_STUB_MODEL.search, stubs)}
            )
            return ModelLoadError(
                f"{headline}: model(s) {', '.join(names)} failed to load:\n  " + "\n  ".join(failures),
                error_lines=failures,
                log_tail=tail,
            )
        in_use = [m.group(0).strip() for m in _ADDRESS_IN_USE.finditer(log)]
        if in_use:
            return PortInUseError(f"{headline}: a port was already in use:\n  " + "\n  ".join(in_use))
        return ServerStartError(headline, log_tail=tail)


def _scan_for_stub_failure(path: Path | None, offset: int) -> tuple[int, bool]:
    """Search the whole lines the log has gained since ``offset`` for a stub that could not start.
    Returns where the next search starts (after the last whole line) and whether one was found."""
    if path is None or not path.exists():
        return offset, False
    with path.open("rb") as log:
        log.seek(offset)
        new = log.read()
    whole = new[: new.rfind(b"\n") + 1]
    return offset + len(whole), bool(_STUB_FAILURE.search(whole.decode(errors="replace")))


def _failure_lines(log: str) -> list[str]:
    """The server's distinct "failed to load" lines (a message repeated inside a longer one counted once)."""
    found = [m.group(0).strip() for m in _LOAD_FAILURE.finditer(log)]
    return [line for line in dict.fromkeys(found) if not any(o != line and o.startswith(line) for o in found)]


def check_repository(path: Path) -> None:
    """Raise RepositoryError unless ``path`` is a directory holding at least one model."""
    path = Path(path)
    if not path.exists():
        raise RepositoryError(
            f"model repository {path} does not exist; pass the folder that holds one directory per model "
            "(for this project: build/local_repository, made by `python -m tritonrepo derive`)"
        )
    if not path.is_dir():
        raise RepositoryError(f"model repository {path} is a file, not a directory of models")
    models = [p for p in path.iterdir() if p.is_dir() and _looks_like_model(p)]
    if not models:
        raise RepositoryError(
            f"model repository {path} is empty: no sub-directory holds a config.pbtxt or a numbered version "
            "folder; each model needs <repository>/<model>/config.pbtxt and <repository>/<model>/1/"
        )


def _looks_like_model(directory: Path) -> bool:
    return (directory / "config.pbtxt").is_file() or any(
        p.is_dir() and p.name.isdigit() for p in directory.iterdir()
    )


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1.0) as response:  # noqa: S310 - loopback URL
            return bool(response.status == 200)
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return False


def _state_dir() -> Path:
    """Per-environment folder for the assembled backend directory."""
    return Path(sys.prefix) / "var" / "tritonlocal"
