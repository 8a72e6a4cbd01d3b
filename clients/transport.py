"""One interface over tritonclient's four clients (HTTP or gRPC, blocking or asyncio).

The transports differ in small ways that are handled here and nowhere else:
- gRPC answers with protobuf messages; ``as_json=True`` gives the same JSON as HTTP (64-bit numbers as
  strings, and the config wrapped in ``{"config": ...}``);
- timeouts: gRPC takes ``client_timeout`` per call; tritonclient's blocking HTTP client only takes one
  at construction (so there is one client per timeout value); asyncio calls run under ``wait_for``;
- tritonclient's blocking clients are not thread-safe, so each thread gets its own;
- a blocking gRPC client is closed once: tritonclient closes it again when it is collected (see
  ``_GrpcClient``);
- restricted APIs: Triton's gRPC endpoint looks for the key header under a ``triton-grpc-protocol-``
  prefix (``triton-grpc-protocol-triton-admin-key``), HTTP under its plain name; gRPC calls send each
  extra header under both names, so one ``headers={"triton-admin-key": ...}`` works for either protocol;
- every failure is wrapped into a ``ClientError`` here, ``from`` the original exception.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
import tritonclient.http as httpclient
import tritonclient.http.aio as httpaio

from clients.endpoint import Endpoint
from clients.errors import wrap_error

_MODULES = {"http": (httpclient, httpaio), "grpc": (grpcclient, grpcaio)}
GRPC_RESTRICTED_PREFIX = "triton-grpc-protocol-"


@dataclass(frozen=True)
class Op:
    """A tritonclient method; ``json``: gRPC must be asked for JSON; ``unwrap``: the key gRPC wraps it in."""

    method: str
    json: bool = False
    unwrap: str | None = None


@dataclass(frozen=True, kw_only=True)
class Call:
    """One tritonclient call: ``op(*args, **kwargs)``; ``model`` and ``input_names`` explain its failures.

    A transport makes one attempt; an operation retries it (:func:`clients.retry.retrying`).
    """

    op: Op
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    timeout_s: float
    model: str | None = None
    input_names: tuple[str, ...] = ()

    @property
    def what(self) -> str:
        return f"{self.op.method}{self.args[:1]!r}"


LIVE = Op("is_server_live")
READY = Op("is_server_ready")
METADATA = Op("get_model_metadata", json=True)
CONFIG = Op("get_model_config", json=True, unwrap="config")
INDEX = Op("get_model_repository_index", json=True)
STATISTICS = Op("get_inference_statistics", json=True)
INFER = Op("infer")
REGISTER_SHM = Op("register_system_shared_memory")
UNREGISTER_SHM = Op("unregister_system_shared_memory")


class TransportBase:
    """What the blocking and the asyncio transport share: headers, per-call arguments, tensors."""

    def __init__(self, endpoint: Endpoint, headers: Mapping[str, str] | None) -> None:
        self.endpoint = endpoint
        self.module: ModuleType = _MODULES[endpoint.protocol][0]
        self.is_grpc = endpoint.protocol == "grpc"
        self.headers = grpc_headers(headers or {}) if self.is_grpc else dict(headers or {})

    def infer_input(self, name: str, shape: list[int], datatype: str) -> Any:
        return self.module.InferInput(name, shape, datatype)

    def requested_output(self, name: str) -> Any:
        return self.module.InferRequestedOutput(name)

    def _kwargs(self, call: Call) -> dict[str, Any]:
        kwargs = dict(call.kwargs)
        if self.headers:
            kwargs["headers"] = self.headers
        if self.is_grpc:
            kwargs["client_timeout"] = call.timeout_s
            if call.op.json:
                kwargs["as_json"] = True
        return kwargs

    def _finish(self, op: Op, raw: Any) -> Any:
        if self.is_grpc and op.json:
            raw = json.loads(raw) if isinstance(raw, str) else raw
            if op.unwrap:
                raw = raw.get(op.unwrap, raw)
        return raw

    @contextmanager
    def _wrapped_errors(self, call: Call) -> Iterator[None]:
        """Raise what fails inside as its ``ClientError``, ``from`` the original (see ``wrap_error``)."""
        try:
            yield
        except Exception as e:
            wrapped = wrap_error(e, model=call.model, input_names=call.input_names)
            if wrapped is None:
                raise
            raise wrapped from e


class _GrpcClient(grpcclient.InferenceServerClient):
    """tritonclient's blocking gRPC client, closed at most once.

    tritonclient's client closes its channel again when it is collected, and under gevent (the Locust
    image's gRPC users) each close counts the channel out of grpcio's gevent poller once more. A worker
    whose clients had been closed by :meth:`SyncTransport.close` then sometimes hung at exit inside that
    second close, called by the garbage collector (tests/images/test_locust_image.py)."""

    _closed = False

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            super().close()


class SyncTransport(TransportBase):
    """Blocking calls; safe to use from several threads at once (one tritonclient client per thread)."""

    def __init__(self, endpoint: Endpoint, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(endpoint, headers)
        self._local = threading.local()
        self._lock = threading.Lock()
        self._created: list[Any] = []

    def call(self, call: Call) -> Any:
        client = self._client(call.timeout_s)
        with self._wrapped_errors(call):
            raw = getattr(client, call.op.method)(*call.args, **self._kwargs(call))
        return self._finish(call.op, raw)

    def close(self) -> None:
        with self._lock:
            created, self._created = self._created, []
        for client in created:
            client.close()

    def _client(self, timeout_s: float) -> Any:
        clients = getattr(self._local, "clients", None)
        if clients is None:
            clients = self._local.clients = {}
        key = None if self.is_grpc else timeout_s  # gRPC takes the timeout per call
        if key not in clients:
            if self.is_grpc:
                client = _GrpcClient(self.endpoint.address)
            else:
                client = httpclient.InferenceServerClient(
                    self.endpoint.address, connection_timeout=timeout_s, network_timeout=timeout_s
                )
            with self._lock:
                self._created.append(client)
            clients[key] = client
        return clients[key]


class AsyncTransport(TransportBase):
    """asyncio calls over one tritonclient aio client, created inside the running event loop."""

    def __init__(
        self, endpoint: Endpoint, headers: Mapping[str, str] | None = None, *, connections: int = 100
    ):
        super().__init__(endpoint, headers)
        self._aio: ModuleType = _MODULES[endpoint.protocol][1]
        self._connections = connections
        self._client: Any = None

    async def call(self, call: Call) -> Any:
        client = self._get_client()
        with self._wrapped_errors(call):
            raw = await asyncio.wait_for(
                getattr(client, call.op.method)(*call.args, **self._kwargs(call)), timeout=call.timeout_s
            )
        return self._finish(call.op, raw)

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.close()

    def _get_client(self) -> Any:
        if self._client is None:
            if self.is_grpc:
                self._client = grpcaio.InferenceServerClient(self.endpoint.address)
            else:  # no session-wide timeout: each call has its own (wait_for above)
                self._client = httpaio.InferenceServerClient(
                    self.endpoint.address, conn_limit=self._connections, conn_timeout=None
                )
        return self._client


def grpc_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """gRPC metadata for ``headers``: lower-case keys, each also under Triton's restricted-protocol prefix."""
    result = {}
    for key, value in headers.items():
        key = key.lower()
        result[key] = value
        if not key.startswith(GRPC_RESTRICTED_PREFIX):
            result[GRPC_RESTRICTED_PREFIX + key] = value
    return result
