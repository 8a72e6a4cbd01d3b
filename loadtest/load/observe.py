"""What the server and the processes did during one run: Triton's statistics and psutil samples.

- :func:`statistics_snapshot` / :func:`statistics_delta`: every model's counters before and after a run
  (the statistics API through :class:`clients.TritonClient`); the difference gives each model's
  executions, average batch size and queue versus compute time for that run alone.
- :class:`ProcessSampler`: a background thread sampling CPU time and resident memory (:func:`rss_mb`) of
  a set of processes (a server with its Python-backend stubs, or a pool of workers) every ``interval_s``, each
  process's CPU under a label (:func:`triton_process_label`: the model a stub serves), and the CPU the
  whole machine used meanwhile, so a run says where every core went: each model's stubs, the server
  process, everything outside it (the load generator among them) and idle time.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

import psutil

from clients import ModelStatistics, RetryPolicy, TritonClient

logger = logging.getLogger(__name__)
NO_RETRY = RetryPolicy(max_attempts=1)  # a measurement reports failures; it never hides them


def statistics_snapshot(url: str) -> dict[str, ModelStatistics]:
    """Every loaded model's cumulative statistics, by model name (newest version)."""
    with TritonClient(url, retry=NO_RETRY) as client:
        return {s.model: s for s in client.all_statistics()}


def statistics_delta(
    before: dict[str, ModelStatistics], after: dict[str, ModelStatistics]
) -> dict[str, dict]:
    """Per-model summary of what ran between two snapshots; models that did not run are left out."""
    summary = {}
    for name, now in sorted(after.items()):
        earlier = before.get(name)
        delta = now.since(earlier) if earlier is not None else now
        if delta.requests or delta.executions:
            summary[name] = delta.to_dict()
    return summary


@dataclass(kw_only=True)
class ProcessUsage:
    """CPU seconds used and peak resident memory (MB, :func:`rss_mb`) of a group of processes during a
    run."""

    cpu_s: float = 0.0
    wall_s: float = 0.0
    peak_rss_mb: float = 0.0
    processes: int = 0
    cpu_s_by_label: dict[str, float] = field(default_factory=dict)
    machine_busy_s: float | None = None  # CPU seconds every process on the machine used meanwhile

    @property
    def mean_cores(self) -> float:
        return self.cpu_s / self.wall_s if self.wall_s else 0.0


@dataclass(kw_only=True)
class ProcessSampler:
    """Sample the processes returned by ``select()`` (called at each sample) until stopped."""

    select: Callable[[], list[psutil.Process]]
    interval_s: float = 0.2
    label: Callable[[psutil.Process], str] = lambda process: "processes"
    _cpu: dict[int, float] = field(default_factory=dict)
    _labels: dict[int, str] = field(default_factory=dict)
    _start_cpu: dict[int, float] = field(default_factory=dict)
    _rss: list[float] = field(default_factory=list)
    _seen: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        if self.interval_s <= 0:
            raise ValueError(f"interval_s must be positive, got {self.interval_s}")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="process-sampler", daemon=True)
        self._started = 0.0
        self.usage = ProcessUsage()

    def __enter__(self) -> ProcessSampler:
        self._started = time.perf_counter()
        self._machine_start = _machine_busy_s()
        self._sample()  # CPU time already spent (e.g. loading) is not counted
        self._start_cpu = dict(self._cpu)
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()
        machine_busy_s = _machine_busy_s() - self._machine_start
        by_label: dict[str, float] = {}
        for pid, cpu in self._cpu.items():
            label = self._labels[pid]
            by_label[label] = by_label.get(label, 0.0) + cpu - self._start_cpu.get(pid, 0.0)
        self.usage = ProcessUsage(
            cpu_s=sum(by_label.values()),
            wall_s=time.perf_counter() - self._started,
            peak_rss_mb=max(self._rss, default=0.0),
            processes=len(self._seen),
            cpu_s_by_label=by_label,
            machine_busy_s=machine_busy_s,
        )

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def _sample(self) -> None:
        total_rss = 0.0
        for process in self.select():
            try:
                with process.oneshot():
                    if process.pid not in self._labels:
                        self._labels[process.pid] = self.label(process)
                    times = process.cpu_times()
                    self._cpu[process.pid] = times.user + times.system
                    total_rss += rss_mb(process)
                self._seen.add(process.pid)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        self._rss.append(total_rss)


def rss_mb(process: psutil.Process) -> float:
    """The resident memory of ``process`` in MB, 10**6 bytes: what every ``*_mb`` field and "MB" label of
    the benchmark's and the soak's reports holds."""
    return process.memory_info().rss / 1e6


def process_tree(pid: int) -> Callable[[], list[psutil.Process]]:
    """A selector for ``pid`` and all its descendants (a tritonserver and its stubs)."""

    def select() -> list[psutil.Process]:
        try:
            root = psutil.Process(pid)
            return [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    return select


def triton_process_label(process: psutil.Process) -> str:
    """A Python-backend stub by the model it serves (its first argument is ``<repository>/<model>/<version>/
    model.py``; every instance of a model shares the label), any other process by its name."""
    arguments = process.cmdline()
    if len(arguments) > 1 and Path(arguments[0]).name == "triton_python_backend_stub":
        return Path(arguments[1]).parent.parent.name
    return process.name()


def _machine_busy_s() -> float:
    """CPU seconds the whole machine has spent busy since boot (every core, every process)."""
    times = psutil.cpu_times()._asdict()
    for not_busy in ("idle", "iowait"):
        times.pop(not_busy, None)
    for counted_in_user in ("guest", "guest_nice"):  # Linux counts guest time in user time too
        times.pop(counted_in_user, None)
    return sum(times.values())
