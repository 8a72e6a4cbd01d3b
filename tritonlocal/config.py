"""Typed configuration of a local tritonserver, turned into its command line."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from pathlib import Path

from tritonrepo.access import ADMIN_HEADER, RESTRICTED_GRPC_PROTOCOLS, RESTRICTED_HTTP_APIS


@dataclass(kw_only=True)
class ServerConfig:
    """What to serve and how. Ports left at 0 are picked free at start-up.

    ``admin_key``: when set, the model-repository, model-config, shared-memory, logging and trace
    APIs answer only requests carrying the header ``triton-admin-key: <admin_key>``.
    ``generate_admin_key``: with no ``admin_key``, restrict those APIs anyway with a random key made
    at each start (``LocalTritonServer.admin_key``). Without either, the APIs are open to anyone who
    can reach the port, which is only acceptable on loopback.
    ``exit_on_error``: True (the default) fails fast: a model that fails to load stops the start with a
    ``ModelLoadError`` naming it. False serves the models that loaded (``--exit-on-error=false``, and
    readiness no longer waits for every model) and names the others in
    ``LocalTritonServer.failed_models``: the policy of the deployments (docs/failure-modes.md).
    ``environment``: variables set for the server and the Python-backend stubs it spawns, over this
    process's environment (e.g. the folder the Python models write their timings to).
    """

    model_repository: Path
    host: str = "127.0.0.1"
    http_port: int = 0
    grpc_port: int = 0
    metrics_port: int = 0
    startup_timeout_s: float = 180.0
    stop_timeout_s: float = 15.0
    exit_timeout_s: int = 5
    log_path: Path | None = None
    log_verbose: int = 0
    admin_key: str | None = None
    generate_admin_key: bool = False
    model_control_mode: str = "none"
    exit_on_error: bool = True
    extra_args: tuple[str, ...] = field(default_factory=tuple)
    environment: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.model_repository = Path(self.model_repository)
        try:
            ipaddress.ip_address(self.host)
        except ValueError as e:
            raise ValueError(
                f"host must be an IP address such as '127.0.0.1' (loopback) or '0.0.0.0' (all interfaces), "
                f"got {self.host!r}"
            ) from e
        for name in ("http_port", "grpc_port", "metrics_port"):
            port = getattr(self, name)
            if not 0 <= port <= 65535:
                raise ValueError(f"{name} must be between 0 (pick a free port) and 65535, got {port}")
        if self.startup_timeout_s <= 0 or self.stop_timeout_s <= 0:
            raise ValueError("startup_timeout_s and stop_timeout_s must be positive")
        if self.model_control_mode not in ("none", "explicit", "poll"):
            raise ValueError(
                f"model_control_mode must be 'none', 'explicit' or 'poll', got {self.model_control_mode!r}"
            )
        if self.admin_key is not None and not self.admin_key.strip():
            raise ValueError("admin_key must be a non-empty string, or None to leave the APIs unrestricted")

    def command(self, binary: Path, backend_directory: Path) -> list[str]:
        """The tritonserver command line for the resolved (non-zero) ports."""
        if 0 in (self.http_port, self.grpc_port, self.metrics_port):
            raise ValueError("ports must be resolved before building the command")
        args = [
            str(binary),
            f"--model-repository={self.model_repository.resolve()}",
            f"--backend-directory={backend_directory}",
            f"--http-address={self.host}",
            f"--http-port={self.http_port}",
            f"--grpc-address={self.host}",
            f"--grpc-port={self.grpc_port}",
            f"--metrics-address={self.host}",
            f"--metrics-port={self.metrics_port}",
            "--allow-gpu-metrics=false",
            f"--exit-timeout-secs={self.exit_timeout_s}",
            f"--log-verbose={self.log_verbose}",
            f"--model-control-mode={self.model_control_mode}",
        ]
        if self.exit_on_error:
            args.append("--strict-readiness=true")
        else:
            args.extend(["--exit-on-error=false", "--strict-readiness=false"])
        if self.admin_key is not None:
            restriction = f"{ADMIN_HEADER}={self.admin_key}"
            args.append(f"--http-restricted-api={','.join(RESTRICTED_HTTP_APIS)}:{restriction}")
            args.append(f"--grpc-restricted-protocol={','.join(RESTRICTED_GRPC_PROTOCOLS)}:{restriction}")
        args.extend(self.extra_args)
        return args
