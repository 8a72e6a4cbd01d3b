"""One root exception for everything the client raises, and the mapping from tritonclient's errors.

``wrap_error`` turns whatever tritonclient (or the HTTP/gRPC stack under it) raised into a ``ClientError``
subclass that says whether retrying can help. Callers raise the result ``from`` the original.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Collection
from typing import Any

import aiohttp
from geventhttpclient.response import HTTPConnectionClosed
from tritonclient.utils import InferenceServerException

_RESTRICTED_MARKERS = ("restricted", "expecting header")
# A full queue, or a request that waited in it past its queue timeout: the model is overloaded.
_OVERLOADED_MARKERS = ("exceeds maximum queue size", "queue is full", "request timeout expired")
_UNKNOWN_MODEL_MARKERS = ("unknown model",)
# A model whose process died mid-request ("Stub process '<instance>' is not healthy", until the
# supervisor restarts the server) or that is unloaded or loading while its server or replica restarts.
_MODEL_RESTARTING_MARKERS = ("is not healthy", "has no available versions", "is not ready")


class ClientError(Exception):
    """Root of every error raised by ``clients``.

    ``server_message`` is the server's own text (or the transport's), ``model`` the model asked for,
    ``status`` the HTTP status or gRPC code when there was one. For batch calls ``index`` and ``item``
    name the input that failed (``item`` is a file name or a short preview of a text).
    """

    retryable = False

    def __init__(
        self,
        server_message: str,
        *,
        model: str | None = None,
        status: str | None = None,
        index: int | None = None,
        item: str | None = None,
        noun: str = "input",
    ) -> None:
        super().__init__(server_message)
        self.server_message = server_message
        self.model = model
        self.status = status
        self.index = index
        self.item = item
        self.noun = noun
        self.attempts = 1  # how many times the call was tried (set by the retry loop)

    def at(self, index: int, item: str | None, noun: str) -> ClientError:
        """Mark this error as belonging to input ``index`` of a batch call; returns self."""
        self.index, self.item, self.noun = index, item, noun
        return self

    def __str__(self) -> str:
        where = ""
        if self.index is not None:
            where = f"{self.noun} {self.index}" + (f" ({self.item})" if self.item else "") + ": "
        model = f" [model {self.model}]" if self.model else ""
        return f"{where}{self.server_message}{model}"

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready description (used by the CLI's --json output and the batch job's records)."""
        return {
            "type": type(self).__name__,
            "message": self.server_message,
            "model": self.model,
            "status": self.status,
            "index": self.index,
            "retryable": self.retryable,
            "attempts": self.attempts,
        }


class RequestError(ClientError):
    """The server answered with an error that is neither bad input nor unavailability (e.g. HTTP 500)."""


class InvalidInputError(RequestError):
    """The request itself is wrong (HTTP 400, gRPC INVALID_ARGUMENT, or a model's error naming an input)."""


class ModelNotFoundError(RequestError):
    """The server does not know the model (HTTP 404, gRPC NOT_FOUND)."""


class RestrictedApiError(RequestError):
    """The server refused a restricted API (shared memory, model config...) for want of its header key."""


class ClientTimeoutError(ClientError):
    """No answer within the call's timeout_s. Not retried: the server may still be working on it."""


class ServerUnavailableError(ClientError):
    """The server cannot be reached or says it is unavailable (connection refused, HTTP 503, UNAVAILABLE)."""

    retryable = True


class ModelRestartingError(ServerUnavailableError):
    """The model could not compute the request because its process died or is being (re)started.

    Retried: inference is idempotent (clients/retry.py), and a repair takes seconds, within the deadline.
    """


class ServerOverloadedError(ServerUnavailableError):
    """The model's queue is full ("Exceeds maximum queue size") or the request waited in it past its
    queue timeout ("Request timeout expired"); retry after a pause."""


def wrap_error(
    error: BaseException, *, model: str | None = None, input_names: Collection[str] = ()
) -> ClientError | None:
    """The ``ClientError`` for ``error``, or None when it is not a server or transport error.

    ``input_names``: the request's input tensor names. A model's own error (HTTP 500 / INTERNAL) whose
    message names one of them ("IMAGE_BYTES: cannot decode image") is bad input, not a server fault.
    """
    if isinstance(error, ClientError):
        return error
    if isinstance(error, InferenceServerException):
        return _from_server_exception(error, model=model, input_names=input_names)
    if isinstance(error, (TimeoutError, socket.timeout, asyncio.TimeoutError, aiohttp.ServerTimeoutError)):
        return ClientTimeoutError(f"no answer in time ({error or type(error).__name__})", model=model)
    if isinstance(error, (ConnectionError, aiohttp.ClientConnectionError, OSError, HTTPConnectionClosed)):
        # HTTPConnectionClosed: the server (or a proxy) closed a keep-alive connection before answering,
        # e.g. while shutting down or reloading; the request was never accepted, so a retry is safe.
        return ServerUnavailableError(f"cannot reach the server: {error}", model=model)
    return None


def _from_server_exception(
    error: InferenceServerException, *, model: str | None, input_names: Collection[str]
) -> ClientError:
    message = error.message() or str(error)
    status = error.status() or None
    code = (status or "").removeprefix("StatusCode.")
    lowered = message.lower()
    kwargs: dict[str, Any] = {"model": model, "status": status}
    if code in ("DEADLINE_EXCEEDED", "504"):
        return ClientTimeoutError(message, **kwargs)
    if any(marker in lowered for marker in _RESTRICTED_MARKERS):
        return RestrictedApiError(message, **kwargs)
    if any(marker in lowered for marker in _OVERLOADED_MARKERS):
        return ServerOverloadedError(message, **kwargs)
    if code in ("UNAVAILABLE", "503"):
        return ServerUnavailableError(message, **kwargs)
    if any(marker in lowered for marker in _MODEL_RESTARTING_MARKERS):
        return ModelRestartingError(message, **kwargs)
    if code in ("NOT_FOUND", "404") or any(marker in lowered for marker in _UNKNOWN_MODEL_MARKERS):
        return ModelNotFoundError(message, **kwargs)
    if code in ("INVALID_ARGUMENT", "400") or any(f"{name}: " in message for name in input_names):
        return InvalidInputError(message, **kwargs)
    return RequestError(message, **kwargs)
