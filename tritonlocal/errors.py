"""Exceptions raised by the local launcher; every one derives from :class:`TritonLocalError`.

A missing, empty or malformed repository is the repository package's one error,
:class:`tritonrepo.errors.RepositoryError`, whoever finds it (re-exported by :mod:`tritonlocal`).
"""

from __future__ import annotations


class TritonLocalError(Exception):
    """Root of every error the launcher raises."""


class InstallationError(TritonLocalError):
    """The tritonserver binary, the Python backend or its stub cannot be found."""


class PortInUseError(TritonLocalError):
    """A port the server was asked to bind is taken by another process."""


class ServerStartError(TritonLocalError):
    """The server exited or did not become ready before the deadline."""

    def __init__(self, message: str, *, log_tail: str = "") -> None:
        super().__init__(
            f"{message}\n--- last lines of the server log ---\n{log_tail}" if log_tail else message
        )
        self.log_tail = log_tail


class ModelLoadError(ServerStartError):
    """One or more models failed to load; carries the server's own error lines."""

    def __init__(self, message: str, *, error_lines: list[str], log_tail: str = "") -> None:
        super().__init__(message, log_tail=log_tail)
        self.error_lines = error_lines
