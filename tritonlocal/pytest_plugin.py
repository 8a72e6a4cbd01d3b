"""pytest fixtures for a real local tritonserver.

Enable with ``pytest_plugins = ["tritonlocal.pytest_plugin"]``. ``triton_server`` is session-scoped and
serves ``--triton-repository`` (default: build/local_repository, derived from model_repository when the
session starts). SIGTERM is turned into KeyboardInterrupt so that an interrupted run still tears the
server down; the kernel's parent-death signal covers SIGKILL.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tritonlocal.config import ServerConfig
from tritonlocal.server import LocalTritonServer
from tritonrepo.local import derive_local
from tritonrepo.paths import LOCAL_REPOSITORY


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("tritonlocal")
    group.addoption(
        "--triton-repository", type=Path, default=None, help="serve this repository instead of deriving"
    )


def pytest_configure(config: pytest.Config) -> None:
    def _interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"received signal {signum}")

    signal.signal(signal.SIGTERM, _interrupt)


@pytest.fixture(scope="session")
def triton_repository(request: pytest.FixtureRequest) -> Path:
    chosen = request.config.getoption("--triton-repository")
    if chosen is not None:
        return Path(chosen)
    derive_local()
    return LOCAL_REPOSITORY


@pytest.fixture(scope="session")
def triton_server(
    triton_repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalTritonServer]:
    log_path = tmp_path_factory.mktemp("tritonserver") / "tritonserver.log"
    config = ServerConfig(model_repository=triton_repository, log_path=log_path, exit_timeout_s=3)
    with LocalTritonServer(config) as server:
        yield server
