"""Process-group handling: start a child that cannot outlive us, stop it and all it spawned; what the
local services built on such children share (``with`` blocks, their log's tail)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Protocol, TypeVar

import psutil

_PR_SET_PDEATHSIG = 1
S = TypeVar("S", bound="Service")


class Service:
    """Something that runs processes between ``start()`` and ``stop()``: ``with`` starts it and stops it."""

    def start(self: S) -> S:
        raise NotImplementedError

    def stop(self) -> object:
        raise NotImplementedError

    def __enter__(self: S) -> S:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


class Addresses(Protocol):
    """Where a started service listens: ports 0 (pick a free one) are replaced by the picked ones."""

    host: str
    http_port: int
    grpc_port: int


class Endpoint(Service):
    """A service that clients reach over HTTP and gRPC at the host and ports of its ``config``."""

    config: Addresses

    @property
    def http_url(self) -> str:
        return f"{self.config.host}:{self.config.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"{self.config.host}:{self.config.grpc_port}"


def find_binary(name: str, given: Path | None, *, missing: Exception, fallbacks: Sequence[Path] = ()) -> Path:
    """``given``, else ``name`` on PATH, else the first existing one of ``fallbacks``; raises ``missing``."""
    found = given or shutil.which(name) or next((path for path in fallbacks if path.is_file()), None)
    if found is None or not Path(found).is_file():
        raise missing
    return Path(found)


def log_tail(path: Path | None, lines: int) -> str:
    """The last ``lines`` lines of the log at ``path``; empty while there is none."""
    if path is None or not path.exists():
        return ""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Ask the kernel to send SIGTERM to the child when the process that started it dies."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def spawn(command: Sequence[str], *, env: dict[str, str], log: IO[bytes], cwd: Path) -> subprocess.Popen:
    """Start ``command`` in a new process group, output to ``log``.

    The group lets us stop the server together with its Python-backend stubs; the death signal stops
    it even when this process is killed without a chance to clean up.
    """
    return subprocess.Popen(  # noqa: S603 - command built from typed config, no shell
        list(command),
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=_die_with_parent,
    )


def descendants(pid: int) -> list[psutil.Process]:
    with contextlib.suppress(psutil.Error):
        return psutil.Process(pid).children(recursive=True)
    return []


def terminate_tree(process: subprocess.Popen, *, timeout_s: float) -> int | None:
    """SIGTERM the process, wait up to ``timeout_s``, then SIGKILL it and everything it spawned.

    Returns the process's exit code. Afterwards no process of its group or tree is left.
    """
    children = descendants(process.pid)
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(process.pid)
            process.wait(timeout=10)
    children.extend(c for c in descendants(process.pid) if c not in children)
    _kill_group(process.pid)
    for child in children:
        with contextlib.suppress(psutil.Error):
            child.kill()
    psutil.wait_procs(children, timeout=5)
    _wait_group_empty(process.pid, timeout_s=5)
    return process.returncode


def group_members(pgid: int) -> list[psutil.Process]:
    """Live processes whose process group is ``pgid`` (zombies excluded)."""
    members = []
    for proc in psutil.process_iter(["pid", "status"]):
        with contextlib.suppress(psutil.Error, ProcessLookupError):
            if proc.info["status"] != psutil.STATUS_ZOMBIE and os.getpgid(proc.pid) == pgid:
                members.append(proc)
    return members


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _wait_group_empty(pgid: int, *, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while group_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)
