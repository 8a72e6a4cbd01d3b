"""perf_analyzer experiments against one running server: sweeps, batching on/off (1), instances (2), arms.

Every measurement is a :class:`ServedPoint`: the perf_analyzer result plus the server's statistics for
that run alone (a snapshot before and after), so every served run reports the average batch size
each model reached and its queue versus compute time. The arms of an experiment are measured in
alternation at each concurrency (A, B, A, B...), never one block after the other, so that a change in
the machine's background load hits every arm alike.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from loadtest.load.observe import (
    ProcessSampler,
    process_tree,
    statistics_delta,
    statistics_snapshot,
    triton_process_label,
)
from loadtest.load.perf import PerfPoint, PerfSettings, PerfTarget, run_perf
from loadtest.load.perf_inputs import InputData, write_input_data
from tritonlocal import LocalTritonServer
from tritonrepo.configs import ModelEntry, load_repository, pipeline_steps
from tritonrepo.errors import RepositoryError

logger = logging.getLogger(__name__)


@dataclass(kw_only=True)
class ServedPoint:
    experiment: str
    arm: str
    model: str
    served_model: str
    perf: PerfPoint
    encoder: str = ""  # the exported step ``model`` calls, whose batches the report shows
    server: dict[str, dict] = field(default_factory=dict)
    wall_s: float = 0.0  # the perf_analyzer run, for the share of time each model spent computing
    server_cpu_cores: float | None = None  # CPU time of the server and its stubs / wall time
    # CPU seconds by process during the run: each model's Python-backend stubs under the model's name,
    # the server process under its own; and what the whole machine used meanwhile (every process).
    cpu_s_by_process: dict[str, float] = field(default_factory=dict)
    machine_cpu_s: float | None = None


@dataclass(kw_only=True)
class PerfSession:
    """A running server, where perf_analyzer's files go, and the real input data of each public model."""

    http_url: str
    grpc_url: str
    repository: Path
    out_dir: Path
    settings: PerfSettings
    entries: int = 16
    server_pid: int | None = None
    admin_key: str | None = None  # sent by perf_analyzer to a server whose restricted APIs need it
    _inputs: dict[str, InputData] = field(default_factory=dict)
    _models: dict[str, ModelEntry] = field(default_factory=dict)

    @classmethod
    def for_server(
        cls, server: LocalTritonServer, *, repository: Path, raw: Path, settings: PerfSettings
    ) -> PerfSession:
        """A session on ``server``, perf_analyzer's files under ``raw``/perf_analyzer."""
        return cls.for_urls(
            server.http_url,
            server.grpc_url,
            repository=repository,
            raw=raw,
            settings=settings,
            server_pid=server.pid,
            admin_key=server.admin_key,
        )

    @classmethod
    def for_urls(
        cls,
        http_url: str,
        grpc_url: str,
        *,
        repository: Path,
        raw: Path,
        settings: PerfSettings,
        server_pid: int | None = None,
        admin_key: str | None = None,
    ) -> PerfSession:
        """A session on the server at ``http_url`` / ``grpc_url`` (``host:port``), perf_analyzer's files
        under ``raw``/perf_analyzer. ``server_pid``: None for a server of another host or container, whose
        processes' CPU time is then not sampled."""
        return cls(
            http_url=http_url,
            grpc_url=grpc_url,
            repository=repository,
            out_dir=raw / "perf_analyzer",
            settings=settings,
            server_pid=server_pid,
            admin_key=admin_key,
        )

    def input_data(self, model: str) -> InputData:
        if model not in self._inputs:
            path = self.out_dir / "inputs" / f"{model}.json"
            self._inputs[model] = write_input_data(model, self.repository, path, entries=self.entries)
        return self._inputs[model]

    def encoder_of(self, model: str) -> str:
        """The exported step ``model`` calls (read from the repository's configs), '' where none."""
        if not self._models:
            self._models.update(load_repository(self.repository))
        try:
            return pipeline_steps(self._models, model).encoder or ""
        except RepositoryError:  # an ensemble of several exported steps: the report searches its stats
            return ""

    def measure(
        self,
        experiment: str,
        arm: str,
        model: str,
        *,
        protocol: str,
        concurrency: int,
        served_model: str = "",
    ) -> ServedPoint:
        """One perf_analyzer run on ``served_model`` (default ``model``), labelled experiment / arm."""
        served = served_model or model
        target = PerfTarget(
            model=served,
            url=self.grpc_url if protocol == "grpc" else self.http_url,
            protocol=protocol,
            concurrency=concurrency,
            inputs=self.input_data(model),  # a variant has its original's inputs
            admin_key=self.admin_key,
        )
        before = statistics_snapshot(self.http_url)
        started = time.perf_counter()
        sampler = (
            ProcessSampler(select=process_tree(self.server_pid), label=triton_process_label)
            if self.server_pid is not None
            else None
        )
        with sampler or contextlib.nullcontext():
            perf = run_perf(target, out_dir=self.out_dir, settings=self.settings)
        wall_s = time.perf_counter() - started
        server = statistics_delta(before, statistics_snapshot(self.http_url))
        logger.info(
            "%s / %s: %s %s c=%d -> %.1f/s p99 %s ms",
            experiment,
            arm,
            served,
            protocol,
            concurrency,
            perf.throughput_per_s,
            f"{perf.p99_ms:.0f}" if perf.p99_ms else "-",
        )
        return ServedPoint(
            experiment=experiment,
            arm=arm,
            model=model,
            served_model=served,
            perf=perf,
            encoder=self.encoder_of(model),
            server=server,
            wall_s=wall_s,
            server_cpu_cores=sampler.usage.mean_cores if sampler is not None else None,
            cpu_s_by_process=sampler.usage.cpu_s_by_label if sampler is not None else {},
            machine_cpu_s=sampler.usage.machine_busy_s if sampler is not None else None,
        )


def arms_experiment(
    session: PerfSession,
    experiment: str,
    model: str,
    arms: dict[str, str],
    *,
    concurrencies: list[int],
    rounds: int = 1,
    protocol: str = "grpc",
) -> list[ServedPoint]:
    """Each arm (label -> served clone of ``model``) in turn, ``rounds`` times at each concurrency.

    The order is A, B, C, A, B, C... so that background load hits every arm alike. The `batching` experiment
    is ``model`` with dynamic batching against its clone without, the `instances` experiment its clones with
    more instances (e.g. '2 instances' -> model__x2).
    """
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    return [
        session.measure(experiment, arm, model, served_model=served, protocol=protocol, concurrency=c)
        for c in concurrencies
        for _ in range(rounds)
        for arm, served in arms.items()
    ]


def sweeps(
    session: PerfSession,
    *,
    models: list[str],
    protocols: list[str],
    concurrencies: list[int],
    measured: list[ServedPoint],
) -> list[ServedPoint]:
    """Throughput and latency against concurrency for every model and protocol.

    A point already measured on the unchanged model in this run (the `batching` experiment's 'batching on'
    arm) is reused rather than measured twice.
    """
    known = {
        (p.served_model, p.perf.protocol, p.perf.concurrency): p for p in measured if p.arm == "batching on"
    }

    def point(model: str, protocol: str, concurrency: int) -> ServedPoint:
        reused = known.get((model, protocol, concurrency))
        if reused is not None:
            return replace(reused, experiment="sweep", arm="default")
        return session.measure("sweep", "default", model, protocol=protocol, concurrency=concurrency)

    return [point(*key) for key in itertools.product(models, protocols, concurrencies)]
