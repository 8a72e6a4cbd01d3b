"""Detect and repair Python-backend model instances whose stub process died.

Every instance of a Python-backend model runs in its own ``triton_python_backend_stub`` process, a child
of tritonserver whose command line names the instance (``<model>_<group>_<index>``). Triton 2.51 does
not restart a stub that dies (OOM killer, a segfault in a native library, ``kill -9``): the server and the
model still report ready, and every request routed to that instance fails with
"Stub process '<instance>' is not healthy." (HTTP 500 / gRPC INTERNAL).

:func:`check_models` compares the instances the served repository declares with the stub processes
that are alive. :class:`Supervisor` polls it in a background thread and restarts the server (on the same
ports, with the same admin key) when an instance has lost its stub: with model control mode "none" the
repository API is shut, so a restart is the only repair, and it is what an orchestrator does too.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import psutil

from tritonlocal.config import ServerConfig
from tritonlocal.process import descendants
from tritonrepo.configs import parse_config

logger = logging.getLogger(__name__)

STUB_EXECUTABLE = "triton_python_backend_stub"
# The stub's argv: binary, model.py, shm region, two sizes, parent pid, lib dir, ipc handle, instance.
_STUB_INSTANCE_ARG = 8


@dataclass(frozen=True, kw_only=True)
class ModelHealth:
    """One scan: the Python-backend instances the repository declares and the stubs found alive."""

    server_running: bool
    expected: dict[str, str]  # instance name -> model name
    alive: dict[str, int]  # instance name -> stub pid

    @property
    def dead_instances(self) -> list[str]:
        return sorted(name for name in self.expected if name not in self.alive)

    @property
    def dead_models(self) -> list[str]:
        return sorted({self.expected[name] for name in self.dead_instances})

    @property
    def healthy(self) -> bool:
        return self.server_running and not self.dead_instances

    def describe(self) -> str:
        if not self.server_running:
            return "tritonserver is not running"
        if self.healthy:
            return f"all {len(self.expected)} Python-backend instances have a live stub"
        return (
            f"{len(self.dead_instances)} of {len(self.expected)} Python-backend instances lost their stub "
            f"process: {', '.join(self.dead_instances)} (models {', '.join(self.dead_models)})"
        )


def expected_stub_instances(repository: Path) -> dict[str, str]:
    """Instance name -> model name for every Python-backend model instance ``repository`` declares."""
    expected: dict[str, str] = {}
    for folder in sorted(Path(repository).iterdir()):
        config_path = folder / "config.pbtxt"
        if not config_path.is_file():
            continue
        config = parse_config(config_path)
        if config.backend != "python":
            continue
        name = config.name or folder.name
        groups = list(config.instance_group) or [None]
        for index, group in enumerate(groups):
            group_name = (group.name if group is not None and group.name else None) or f"{name}_{index}"
            count = max(1, group.count) if group is not None else 1
            for instance in range(count):
                expected[f"{group_name}_{instance}"] = name
    return expected


def live_stubs(server_pid: int) -> dict[str, int]:
    """Instance name -> pid of every live (not zombie) Python-backend stub below ``server_pid``."""
    stubs: dict[str, int] = {}
    for child in descendants(server_pid):
        with contextlib.suppress(psutil.Error):
            if child.status() == psutil.STATUS_ZOMBIE:
                continue
            argv = child.cmdline()
            if argv and argv[0].endswith(STUB_EXECUTABLE) and len(argv) > _STUB_INSTANCE_ARG:
                stubs[argv[_STUB_INSTANCE_ARG]] = child.pid
    return stubs


def check_models(server_pid: int | None, repository: Path) -> ModelHealth:
    running = server_pid is not None and psutil.pid_exists(server_pid)
    with contextlib.suppress(psutil.Error):
        running = running and psutil.Process(server_pid).status() != psutil.STATUS_ZOMBIE
    return ModelHealth(
        server_running=running,
        expected=expected_stub_instances(repository),
        alive=live_stubs(server_pid) if running and server_pid is not None else {},
    )


@dataclass(kw_only=True)
class Repair:
    detected_at: float  # time.monotonic()
    problem: str
    repaired_s: float | None = None  # seconds from detection to ready again; None if the restart failed


class SupervisedServer(Protocol):
    """What :class:`Supervisor` needs of a server (:class:`tritonlocal.LocalTritonServer` has it)."""

    @property
    def config(self) -> ServerConfig: ...

    @property
    def pid(self) -> int | None: ...

    def check_models(self) -> ModelHealth: ...

    def restart(self, *, graceful: bool = True) -> object: ...


@dataclass(kw_only=True)
class Supervisor:
    """Polls ``server.check_models()`` every ``interval_s`` and restarts the server when it is unhealthy."""

    server: SupervisedServer
    interval_s: float = 1.0
    repairs: list[Repair] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __post_init__(self) -> None:
        if self.interval_s <= 0:
            raise ValueError(f"interval_s must be positive, got {self.interval_s}")

    def start(self) -> Supervisor:
        self._thread = threading.Thread(target=self._run, name="triton-supervisor", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.server.config.startup_timeout_s + self.interval_s)

    def __enter__(self) -> Supervisor:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def check_once(self) -> ModelHealth:
        """One scan; restarts the server when it is unhealthy. Returns the scan before any repair."""
        report = self.server.check_models()
        stopped_on_purpose = self.server.pid is None
        if not report.healthy and not stopped_on_purpose and not self._stop.is_set():
            repair = Repair(detected_at=time.monotonic(), problem=report.describe())
            self.repairs.append(repair)
            logger.warning("%s; restarting tritonserver on the same ports", repair.problem)
            try:
                self.server.restart(graceful=False)
            except Exception:  # noqa: BLE001 - keep supervising; the next scan tries again
                logger.exception("restarting tritonserver failed")
            else:
                repair.repaired_s = time.monotonic() - repair.detected_at
                logger.warning("tritonserver restarted and ready after %.1f s", repair.repaired_s)
        return report

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.check_once()
