"""Several local tritonserver replicas behind nginx: the scale-out design, on one machine.

:class:`LocalReplicaSet` starts N :class:`LocalTritonServer` processes on free loopback ports and an
nginx (Debian's ``nginx`` package) whose configuration is rendered from deploy/nginx/nginx.conf.template
into a temporary prefix: one HTTP listener (``proxy_pass`` with ``proxy_next_upstream``) and one HTTP/2
listener for gRPC (``grpc_pass`` with ``grpc_next_upstream``). Everything stops together.

    with LocalReplicaSet(ReplicaSetConfig(model_repository=path, replicas=2)) as replica_set:
        client = httpclient.InferenceServerClient(replica_set.http_url)
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field, replace
from pathlib import Path

import psutil

from tritonlocal import process as proc
from tritonlocal.config import ServerConfig
from tritonlocal.errors import TritonLocalError
from tritonlocal.ports import pick_free_port
from tritonlocal.server import LocalTritonServer
from tritonrepo.paths import DEPLOY

logger = logging.getLogger(__name__)

TEMPLATE = DEPLOY / "nginx" / "nginx.conf.template"
LIMITS = "limits.conf"  # beside the template; the request-size limit shared with docker compose's nginx
_PLACEHOLDER = re.compile(r"@[A-Z_]+@")
INSTALL_HINT = "install it with `apt-get install -y nginx` (the Makefile's bootstrap step does this)"


class ReplicaSetError(TritonLocalError):
    """nginx is missing or did not start."""


@dataclass(kw_only=True)
class ReplicaSetConfig:
    """N replicas of one repository behind nginx on ``host`` (loopback). Ports 0 are picked free."""

    model_repository: Path
    replicas: int = 2
    host: str = "127.0.0.1"
    http_port: int = 0
    grpc_port: int = 0
    template: Path = TEMPLATE
    max_fails: int = 1
    fail_timeout_s: int = 5
    exit_timeout_s: int = 5
    startup_timeout_s: float = 180.0
    nginx_binary: Path | None = None
    server_extra_args: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        self.model_repository = Path(self.model_repository)
        self.template = Path(self.template)
        if self.replicas < 1:
            raise ValueError(f"replicas must be at least 1, got {self.replicas}")
        if not ipaddress.ip_address(self.host).is_loopback:
            raise ValueError(f"host must be a loopback address such as 127.0.0.1, got {self.host!r}")
        if not self.template.is_file():
            raise ValueError(f"nginx template {self.template} does not exist; run from the repository root")
        if self.max_fails < 1 or self.fail_timeout_s < 1:
            raise ValueError("max_fails and fail_timeout_s must be at least 1")


def render_nginx_config(
    template: str,
    *,
    host: str,
    http_port: int,
    grpc_port: int,
    http_backends: list[str],
    grpc_backends: list[str],
    max_fails: int,
    fail_timeout_s: int,
    down: frozenset[int] = frozenset(),
) -> str:
    """The template with its @NAME@ placeholders filled; backends whose index is in ``down`` are
    marked ``down`` (taken out of rotation). Raises if a placeholder is left unfilled."""

    def servers(backends: list[str]) -> str:
        limits = f"max_fails={max_fails} fail_timeout={fail_timeout_s}s"
        return "\n".join(
            f"        server {b} {limits}{' down' if i in down else ''};" for i, b in enumerate(backends)
        )

    values = {
        "HOST": host,
        "HTTP_PORT": str(http_port),
        "GRPC_PORT": str(grpc_port),
        "HTTP_SERVERS": servers(http_backends),
        "GRPC_SERVERS": servers(grpc_backends),
        "TRIES": str(len(http_backends)),
    }
    text = template
    for name, value in values.items():
        text = text.replace(f"@{name}@", value)
    leftover = [line.strip() for line in text.splitlines() if _PLACEHOLDER.search(line)]
    if leftover:
        raise ValueError(f"unfilled placeholders in the nginx template: {leftover}")
    return text


def find_nginx(binary: Path | None = None) -> Path:
    missing = ReplicaSetError(f"the nginx binary was not found on PATH or in /usr/sbin; {INSTALL_HINT}")
    return proc.find_binary("nginx", binary, missing=missing, fallbacks=[Path("/usr/sbin/nginx")])


class LocalReplicaSet(proc.Endpoint):
    """``config.replicas`` tritonservers and one nginx in front of them; a context manager."""

    config: ReplicaSetConfig

    def __init__(self, config: ReplicaSetConfig) -> None:
        self.requested = config
        self.config = config  # with the ports picked once started
        self.servers: list[LocalTritonServer] = []
        self._nginx: subprocess.Popen | None = None
        self._workdir: Path | None = None
        self._down: set[int] = set()

    def start(self) -> LocalReplicaSet:
        nginx = find_nginx(self.config.nginx_binary)
        self._workdir = Path(tempfile.mkdtemp(prefix="tritonlocal-replicas-"))
        try:
            for index in range(self.config.replicas):
                self.servers.append(LocalTritonServer(self._server_config(index)).start())
            self._start_nginx(nginx)
        except BaseException:
            self.stop()
            raise
        logger.info(
            "nginx on http %s grpc %s in front of %d replicas",
            self.http_url,
            self.grpc_url,
            len(self.servers),
        )
        return self

    def stop_replica(self, index: int, *, drain: bool = True) -> None:
        """Stop one replica as a rolling update does, or (``drain=False``) as a lost pod would.

        Draining first takes the replica out of nginx's rotation (``down``, then a graceful reload:
        old workers finish their in-flight requests) and only then stops it, like a Kubernetes pod
        that leaves the Service endpoints during its preStop sleep before SIGTERM. Without draining
        the server gets SIGTERM while nginx still sends it requests.
        """
        if drain:
            self._down.add(index)
            self._reload_nginx()
        self.servers[index].stop()

    def kill_replica(self, index: int) -> None:
        """SIGKILL one replica (a crashed process or node), then reap its Python-backend stubs."""
        pid = self.servers[index].pid
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.servers[index].stop()

    def stop(self) -> None:
        """Stop nginx, then every replica; safe to call twice."""
        try:
            if self._nginx is not None:
                proc.terminate_tree(self._nginx, timeout_s=5)
                self._nginx = None
        finally:
            for server in self.servers:
                with contextlib.suppress(Exception):
                    server.stop()
            self.servers = []
            if self._workdir is not None:
                shutil.rmtree(self._workdir, ignore_errors=True)
                self._workdir = None

    def access_log(self) -> str:
        path = self._workdir / "nginx" / "logs" / "access.log" if self._workdir else None
        return path.read_text(errors="replace") if path and path.exists() else ""

    # -- internals --------------------------------------------------------------------------------
    def _server_config(self, index: int) -> ServerConfig:
        assert self._workdir is not None
        return ServerConfig(
            model_repository=self.config.model_repository,
            host=self.config.host,
            exit_timeout_s=self.config.exit_timeout_s,
            startup_timeout_s=self.config.startup_timeout_s,
            log_path=self._workdir / f"replica-{index}.log",
            extra_args=self.config.server_extra_args,
        )

    def _start_nginx(self, binary: Path) -> None:
        assert self._workdir is not None
        prefix = self._workdir / "nginx"
        for sub in ("logs", "tmp"):
            (prefix / sub).mkdir(parents=True)
        # Workers run as an unprivileged user when nginx starts as root: let them reach the temp dirs.
        for path in (self._workdir, prefix):
            path.chmod(0o755)
        (prefix / "tmp").chmod(0o1777)
        host = self.requested.host
        http_port = self.requested.http_port or pick_free_port(host)
        grpc_port = self.requested.grpc_port or pick_free_port(host)
        while grpc_port == http_port:
            grpc_port = pick_free_port(host)
        self.config = replace(self.requested, http_port=http_port, grpc_port=grpc_port)
        self._write_nginx_config()
        command = [
            str(binary),
            "-p",
            f"{prefix}/",
            "-e",
            str(prefix / "logs" / "error.log"),
            "-c",
            str(prefix / "nginx.conf"),
            "-g",
            "daemon off;",
        ]
        log = (prefix / "logs" / "stdout.log").open("wb")
        self._nginx = proc.spawn(command, env={"PATH": os.environ.get("PATH", "")}, log=log, cwd=prefix)
        log.close()
        self._wait_nginx_ready(prefix)

    def _write_nginx_config(self) -> Path:
        assert self._workdir is not None
        conf = self._workdir / "nginx" / "nginx.conf"
        shutil.copyfile(self.config.template.parent / LIMITS, conf.parent / LIMITS)  # its `include`
        conf.write_text(
            render_nginx_config(
                self.config.template.read_text(),
                host=self.config.host,
                http_port=self.config.http_port,
                grpc_port=self.config.grpc_port,
                http_backends=[s.http_url for s in self.servers],
                grpc_backends=[s.grpc_url for s in self.servers],
                max_fails=self.config.max_fails,
                fail_timeout_s=self.config.fail_timeout_s,
                down=frozenset(self._down),
            )
        )
        return conf

    def _reload_nginx(self, timeout_s: float = 15.0) -> None:
        """Rewrite the config and reload gracefully; return once the old workers have finished."""
        assert self._nginx is not None
        self._write_nginx_config()
        old_workers = proc.descendants(self._nginx.pid)
        self._nginx.send_signal(signal.SIGHUP)
        _, alive = psutil.wait_procs(old_workers, timeout=timeout_s)
        if alive:
            raise ReplicaSetError(
                f"nginx workers {[p.pid for p in alive]} still busy {timeout_s:.0f} s after a reload"
            )

    def _wait_nginx_ready(self, prefix: Path) -> None:
        assert self._nginx is not None
        deadline = time.monotonic() + 15
        url = f"http://{self.http_url}/v2/health/ready"
        while time.monotonic() < deadline:
            if self._nginx.poll() is not None:
                error_log = (prefix / "logs" / "error.log").read_text(errors="replace")
                raise ReplicaSetError(f"nginx exited with code {self._nginx.returncode}:\n{error_log}")
            with contextlib.suppress(urllib.error.URLError, OSError):
                with urllib.request.urlopen(url, timeout=1) as response:  # noqa: S310 - loopback URL
                    if response.status == 200:
                        return
            time.sleep(0.1)
        raise ReplicaSetError(f"nginx did not answer {url} within 15 s")
