"""Run a real Triton Inference Server locally, with no Docker and no GPU.

The tritonserver binary, its Python backend and the backend stubs come from the ``nvidia-pytriton``
wheel. :class:`LocalTritonServer` starts it on loopback with free ports, waits until it is ready and
stops it together with every Python-backend stub it spawned.
"""

from tritonlocal.config import ServerConfig
from tritonlocal.errors import (
    ModelLoadError,
    PortInUseError,
    ServerStartError,
    TritonLocalError,
)
from tritonlocal.server import LocalTritonServer
from tritonrepo.errors import RepositoryError

__all__ = [
    "LocalTritonServer",
    "ModelLoadError",
    "PortInUseError",
    "RepositoryError",
    "ServerConfig",
    "ServerStartError",
    "TritonLocalError",
]
