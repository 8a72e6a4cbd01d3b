"""ClientBase: what TritonClient and AsyncTritonClient share, their methods included.

Each public method is an operation of :mod:`clients.operations` (a generator of steps), bound by
:class:`Method`; a client carries the steps out in its ``_run``: TritonClient's returns the result,
AsyncTritonClient's is a coroutine, so the same method is blocking on one and awaitable on the other.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, Concatenate, Generic, ParamSpec, Protocol, TypeVar, overload

from clients import operations as ops
from clients.endpoint import Endpoint, parse_url
from clients.model_info import ModelSignature
from clients.options import ClientOptions
from clients.retry import RetryPolicy
from clients.steps import Task
from clients.transport import TransportBase

P = ParamSpec("P")
T = TypeVar("T")
R = TypeVar("R")


class _Blocking(Protocol):
    """A client whose ``_run`` returns the operation's result (TritonClient)."""

    def _run(self, task: Task[R]) -> R: ...


class _Awaiting(Protocol):
    """A client whose ``_run`` is a coroutine (AsyncTritonClient)."""

    def _run(self, task: Task[R]) -> Coroutine[Any, Any, R]: ...


class Method(Generic[P, T]):
    """An operation as a client method: ``client.name(...)`` is ``client._run(operation(client, ...))``."""

    def __init__(self, operation: Callable[Concatenate[ClientBase, P], Task[T]]) -> None:
        self._operation = operation
        self.__doc__ = operation.__doc__

    @overload
    def __get__(self, client: None, owner: type) -> Method[P, T]: ...
    @overload
    def __get__(self, client: _Awaiting, owner: type) -> Callable[P, Coroutine[Any, Any, T]]: ...
    @overload
    def __get__(self, client: _Blocking, owner: type) -> Callable[P, T]: ...
    def __get__(self, client: Any, owner: type) -> Any:  # typed by the overloads above
        if client is None:
            return self
        operation = self._operation

        @functools.wraps(operation)
        def method(*args: P.args, **kwargs: P.kwargs) -> Any:
            return client._run(operation(client, *args, **kwargs))

        return method


class ClientBase:
    """The endpoint, the options, the signature cache and the methods of both clients.

    ``url`` picks the protocol by scheme (``http://``, ``grpc://``) unless ``protocol`` is given; the
    keyword arguments are :class:`~clients.options.ClientOptions`. Subclasses open their transport in
    ``_open`` and carry out an operation's steps in ``_run``.
    """

    _transport: TransportBase

    def __init__(
        self,
        url: str = "http://127.0.0.1:8000",
        *,
        protocol: str | None = None,
        timeout_s: float = 30.0,
        retry: RetryPolicy | None = None,
        headers: Mapping[str, str] | None = None,
        per_request: bool = True,
        max_in_flight: int = 16,
        use_shared_memory: bool = False,
    ) -> None:
        self.endpoint: Endpoint = parse_url(url, protocol)
        self.options = ClientOptions(
            timeout_s=timeout_s,
            retry=retry or RetryPolicy(),
            headers=dict(headers or {}),
            per_request=per_request,
            max_in_flight=max_in_flight,
            use_shared_memory=use_shared_memory,
        )
        self._signatures: dict[str, ModelSignature] = {}
        self._open()

    health = Method(ops.health)
    models = Method(ops.models)
    statistics = Method(ops.statistics)
    statistics_since = Method(ops.statistics_since)
    all_statistics = Method(ops.all_statistics)
    signature = Method(ops.signature)
    infer = Method(ops.infer)
    classify = Method(ops.classify)
    embed = Method(ops.embed)

    def _open(self) -> None:
        raise NotImplementedError

    def _run(self, task: Task[Any]) -> Any:
        raise NotImplementedError
