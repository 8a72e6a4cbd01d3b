"""Model Analyzer's progress, read from its log while it runs: each configuration it profiles, N of M,
with its settings and the time left.

Model Analyzer writes, for every configuration of the manual brute search, ``Creating model config: X``
(or ``Found existing model config: X`` on a resumed run) and one ``Setting <field> to <value>`` line per
swept field, then ``Profiling X: concurrency=N`` as perf_analyzer starts on it, or ``Existing
measurement found ...`` when its checkpoint holds the measurement already. M is the plan's count:
every target's variants and its shipped configuration, at each concurrency.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tritonrepo.progress import Progress, duration

CONFIG = re.compile(r"\] (?:Creating|Found existing) model config: (?P<variant>\S+)\s*$")
SETTING = re.compile(r"\]\s+(?:Setting (?P<field>\S+) to (?P<value>.+)|Enabling (?P<enabled>\S+))\s*$")
PROFILING = re.compile(r"\] Profiling (?P<variant>\S+): (?P<load>.+?)\s*$")
CHECKPOINTED = "Existing measurement found for run config"
POLL_S = 0.5


class AnalyzerProgress:
    """Turns Model Analyzer's log lines into progress: a line per configuration (and a bar on a
    terminal), with the time left once one configuration has been measured."""

    def __init__(self, progress: Progress, *, total: int, bar: Any = None) -> None:
        self.progress, self.total, self.bar = progress, total, bar
        self.started = 0  # configurations begun, measured or read from the checkpoint
        self.measured_starts: list[float] = []  # when each configuration measured here began
        self._variant = ""  # the configuration Model Analyzer created last, and its swept settings
        self._settings: list[str] = []

    def feed(self, line: str, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        if found := CONFIG.search(line):
            self._variant, self._settings = found["variant"], []
        elif found := SETTING.search(line):
            enabled = found["enabled"]
            self._settings.append(f"{enabled} enabled" if enabled else f"{found['field']} {found['value']}")
        elif found := PROFILING.search(line):
            own = found["variant"] == self._variant and self._settings
            settings = f"; {', '.join(self._settings)}" if own else ""
            self._begin(f"{found['variant']} at {found['load']}{settings}", now, measured=True)
        elif CHECKPOINTED in line:
            self._begin(
                f"{self._variant or 'a configuration'} measured before (checkpoint)", now, measured=False
            )

    def time_left_s(self) -> float | None:
        """The configurations not yet finished, at the mean time of those measured here so far; None
        before one has finished."""
        starts = self.measured_starts
        if len(starts) < 2:
            return None
        return (starts[-1] - starts[0]) / (len(starts) - 1) * (self.total - self.started + 1)

    def _begin(self, what: str, now: float, *, measured: bool) -> None:
        self.started += 1
        if measured:
            self.measured_starts.append(now)
        left = self.time_left_s()
        when = f"about {duration(left)} left" if left is not None else "time left known after the first"
        self.progress.line(f"configuration {self.started} of {self.total}: {what} ({when})")
        if self.bar is not None:
            self.bar.update(1)


def follow(
    process: subprocess.Popen, log_file: Path, offset: int, *, deadline: float, on_line: Callable[[str], None]
) -> int:
    """Hand each line ``process`` appends to ``log_file`` (from byte ``offset``) to ``on_line`` until it
    exits; its exit status. Raises subprocess.TimeoutExpired at ``deadline`` (time.monotonic())."""
    with log_file.open("rb") as log:
        log.seek(offset)
        pending = b""
        while True:
            try:
                status = process.wait(timeout=POLL_S)
            except subprocess.TimeoutExpired:
                status = None
            pending += log.read()
            *lines, pending = pending.split(b"\n")
            for line in lines:
                on_line(line.decode(errors="replace"))
            if status is not None:
                if pending:
                    on_line(pending.decode(errors="replace"))
                return status
            if time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(process.args, 0)
