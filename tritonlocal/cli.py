"""The tritonlocal command line: every command lives here; the modules it calls neither print nor parse.

python -m tritonlocal serve                  # serve build/local_repository until Ctrl-C
python -m tritonlocal serve --http-port 8000 --grpc-port 8001 --metrics-port 8002
python -m tritonlocal monitor                # the same, with a local Prometheus beside it
python -m tritonlocal replicas --count 2     # replicas behind nginx
python -m tritonlocal install-perf-analyzer
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from tritonlocal import perf_analyzer
from tritonlocal.config import ServerConfig
from tritonlocal.errors import TritonLocalError
from tritonlocal.monitoring import SUMMARY_FLAG, LocalPrometheus, PrometheusConfig
from tritonlocal.replicas import LocalReplicaSet, ReplicaSetConfig
from tritonlocal.server import LocalTritonServer
from tritonrepo.access import ADMIN_HEADER
from tritonrepo.commands import EXIT_FAILED, EXIT_OK, EXIT_USAGE, command_parser, subcommand
from tritonrepo.errors import RepositoryError
from tritonrepo.local import derive_local
from tritonrepo.paths import LOCAL_REPOSITORY, LOGS

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

# The exit code of each failure the commands report, the most specific first.
# A repository that is missing, empty or malformed: tritonrepo's one error, from the launcher too.
EXIT_CODES: dict[type[Exception], int] = {
    TritonLocalError: EXIT_FAILED,
    RepositoryError: EXIT_FAILED,
    ValueError: EXIT_USAGE,
}
C = TypeVar("C", bound="DataclassInstance")


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO, format="%(levelname)s %(message)s"
    )
    try:
        return int(args.handler(args))
    except tuple(EXIT_CODES) as e:
        print(f"error: {e}", file=sys.stderr)
        return next(code for kind, code in EXIT_CODES.items() if isinstance(e, kind))


EXIT_CODES_HELP = (
    "0 done (a server stopped by Ctrl-C included), 1 the server or a tool failed (its log's "
    "tail is printed), 2 a usage error"
)


def _parser() -> argparse.ArgumentParser:
    parser = command_parser(
        "tritonlocal",
        "Run a real tritonserver locally (no Docker).",
        exit_codes=EXIT_CODES_HELP,
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages too")
    sub = parser.add_subparsers(required=True)
    for add_command in (_add_serve, _add_install, _add_monitor, _add_replicas):
        add_command(sub)
    return parser


def _command(sub: Any, name: str, help_text: str) -> argparse.ArgumentParser:
    command: argparse.ArgumentParser = subcommand(sub, name, help=help_text, exit_codes=EXIT_CODES_HELP)
    return command


def _add_ports(command: argparse.ArgumentParser, *, metrics: bool = True, front: str = "") -> None:
    command.add_argument("--http-port", type=int, default=8000, help=f"the {front}HTTP/REST port")
    command.add_argument("--grpc-port", type=int, default=8001, help=f"the {front}gRPC port")
    if metrics:
        command.add_argument("--metrics-port", type=int, default=8002, help="the Prometheus metrics port")


def _add_serve(sub: Any) -> None:
    serve = _command(sub, "serve", "serve a model repository until interrupted")
    serve.add_argument("--repository", type=Path, default=LOCAL_REPOSITORY, help="the repository to serve")
    serve.add_argument(
        "--no-derive", action="store_true", help="do not re-derive build/local_repository first"
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to bind: loopback unless you choose")
    _add_ports(serve)
    serve.add_argument(
        "--admin-key",
        default=None,
        help="key for the restricted repository/config/shm/logging/trace APIs (default: random per start)",
    )
    serve.add_argument(
        "--no-admin-key", action="store_true", help="leave those APIs open to anyone who reaches the port"
    )
    serve.add_argument(
        "--allow-failed-models",
        action="store_true",
        help="serve the models that load and name the ones that fail (else: fail fast on the first)",
    )
    serve.add_argument(
        "--startup-timeout-s", type=float, default=180.0, help="how long the models may take to load"
    )
    serve.add_argument(
        "--log-path",
        type=Path,
        default=None,
        help=f"the server's log file (default: {LOGS}/tritonserver-<http port>.log)",
    )
    serve.set_defaults(handler=_serve)


def _add_install(sub: Any) -> None:
    install = _command(sub, "install-perf-analyzer", "unpack perf_analyzer into this environment")
    install.add_argument("--force", action="store_true", help="unpack it again even when it is there")
    install.set_defaults(handler=_install)


def _add_monitor(sub: Any) -> None:
    monitor = _command(sub, "monitor", "serve a repository with a local Prometheus beside it (loopback)")
    monitor.add_argument(
        "--repository",
        type=Path,
        default=None,
        help="the repository to serve (default: derive build/local_repository)",
    )
    _add_ports(monitor)
    monitor.add_argument("--prometheus-port", type=int, default=9090, help="Prometheus's web port")
    monitor.set_defaults(handler=_monitor)


def _add_replicas(sub: Any) -> None:
    replicas = _command(sub, "replicas", "serve N local replicas behind nginx (loopback) until Ctrl-C")
    replicas.add_argument(
        "--repository", type=Path, default=LOCAL_REPOSITORY, help="the repository each replica serves"
    )
    replicas.add_argument("--count", type=int, default=2, help="how many replicas")
    _add_ports(replicas, metrics=False, front="nginx's ")
    replicas.set_defaults(handler=_replicas)


def _serve(args: argparse.Namespace) -> int:
    if args.repository == LOCAL_REPOSITORY and not args.no_derive:
        derive_local()
    config = _config(
        ServerConfig,
        args,
        model_repository=args.repository,
        generate_admin_key=not args.no_admin_key,
        exit_on_error=not args.allow_failed_models,
    )
    stop = _stop_on_signals()
    with LocalTritonServer(config) as server:
        print(
            f"tritonserver ready  http://{server.http_url}  grpc {server.grpc_url}  "
            f"metrics {server.metrics_url}"
        )
        if server.admin_key:
            print(
                f"restricted APIs need the header {ADMIN_HEADER}; for the clients CLI:\n"
                f"  export TRITON_ADMIN_KEY={server.admin_key}"
            )
        for name, reason in server.failed_models.items():
            print(f"NOT SERVED: {name}: {reason}")
        print(f"log: {server.log_path}   (Ctrl-C to stop)", flush=True)
        if not _run_until(stop, server.is_running):
            print(f"error: tritonserver exited\n{server.log_tail()}", file=sys.stderr)
            return EXIT_FAILED
    print("stopped")
    return EXIT_OK


def _monitor(args: argparse.Namespace) -> int:
    repository = args.repository
    if repository is None:
        derive_local()
        repository = LOCAL_REPOSITORY
    server_config = _config(ServerConfig, args, model_repository=repository, extra_args=(SUMMARY_FLAG,))
    stop = _stop_on_signals()
    with LocalTritonServer(server_config) as server:
        target = server.metrics_url.removeprefix("http://").removesuffix("/metrics")
        with LocalPrometheus(
            PrometheusConfig(scrape_targets=[target], port=args.prometheus_port)
        ) as prometheus:
            print(f"tritonserver  http://{server.http_url}  grpc {server.grpc_url}", end="")
            print(f"  metrics {server.metrics_url}")
            print(f"prometheus    {prometheus.url}  (e.g. query model:nv_inference_batch_size:avg1m)")
            print("Ctrl-C stops both", flush=True)
            if not _run_until(stop, lambda: server.is_running() and prometheus.is_running()):
                print("error: tritonserver or prometheus exited", file=sys.stderr)
                return EXIT_FAILED
    print("stopped")
    return EXIT_OK


def _replicas(args: argparse.Namespace) -> int:
    config = _config(ReplicaSetConfig, args, model_repository=args.repository, replicas=args.count)
    stop = _stop_on_signals()
    with LocalReplicaSet(config) as replica_set:
        print(f"nginx  http://{replica_set.http_url}  grpc {replica_set.grpc_url}")
        for index, server in enumerate(replica_set.servers):
            print(f"  replica {index}: http://{server.http_url}  grpc {server.grpc_url}", end="")
            print(f"  metrics {server.metrics_url}")
        print("Ctrl-C stops all", flush=True)
        if not _run_until(stop, lambda: all(server.is_running() for server in replica_set.servers)):
            print("error: a replica exited", file=sys.stderr)
            return EXIT_FAILED
    print("stopped")
    return EXIT_OK


def _install(args: argparse.Namespace) -> int:
    print(perf_analyzer.install(force=args.force))
    return EXIT_OK


def _config(kind: type[C], args: argparse.Namespace, **given: Any) -> C:
    """A ``kind`` from ``given`` and from the options named after its fields (``--http-port``)."""
    named = {f.name: getattr(args, f.name) for f in dataclasses.fields(kind) if hasattr(args, f.name)}
    return kind(**(named | given))


def _stop_on_signals() -> threading.Event:
    """An event set by Ctrl-C (SIGINT) or SIGTERM, so that the ``with`` blocks stop what they started."""
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    return stop


def _run_until(stop: threading.Event, running: Callable[[], bool]) -> bool:
    """Wait until ``stop`` is set (True) or ``running`` turns false (False), checking twice a second."""
    while not stop.wait(0.5):
        if not running():
            return False
    return True
