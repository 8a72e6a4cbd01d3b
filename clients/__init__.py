"""Clients for the Triton server: a library (blocking and asyncio), a CLI and an offline batch job.

    from clients import TritonClient
    with TritonClient("http://127.0.0.1:8000") as client:
        print(client.classify([Path("cat.png")])[0].labels)

``python -m clients --help`` for the CLI, ``python -m clients.batch --help`` for the batch job.
"""

from clients.async_client import AsyncTritonClient
from clients.codec import Classification
from clients.endpoint import Endpoint, parse_url
from clients.errors import (
    ClientError,
    ClientTimeoutError,
    InvalidInputError,
    ModelNotFoundError,
    ModelRestartingError,
    RequestError,
    RestrictedApiError,
    ServerOverloadedError,
    ServerUnavailableError,
)
from clients.model_info import Health, ModelSignature, ModelState
from clients.options import ClientOptions
from clients.retry import RetryPolicy
from clients.stats import Duration, ModelStatistics
from clients.sync_client import TritonClient
from tritonrepo.tensors import TensorSpec

__all__ = [
    "AsyncTritonClient",
    "Classification",
    "ClientError",
    "ClientOptions",
    "ClientTimeoutError",
    "Duration",
    "Endpoint",
    "parse_url",
    "Health",
    "InvalidInputError",
    "ModelNotFoundError",
    "ModelRestartingError",
    "ModelSignature",
    "ModelState",
    "ModelStatistics",
    "RequestError",
    "RestrictedApiError",
    "RetryPolicy",
    "ServerOverloadedError",
    "ServerUnavailableError",
    "TensorSpec",
    "TritonClient",
]
