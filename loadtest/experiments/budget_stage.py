"""The time budgets of several services at several loads, against a running server or one started here.

:func:`run_budgets` measures each service at each load (:func:`loadtest.experiments.budget_runs.measure`),
one load after the other, then, with the server idle or stopped, the same work in this process on a
batch of the load's size (:func:`inprocess_time`). Without a URL it starts the local tritonserver on a
repository derived for the services alone (:func:`tritonrepo.clones.build_repository`: the exported
files run in the Python backend), with the Python models writing their timings, so each step's compute
is split into the model's code and the stub's share.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import shutil
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from loadtest.baselines.pipelines import ExportedEncoder, ImagePipeline, TextPipeline, served_file
from loadtest.experiments.budget import Budget, InProcessTime
from loadtest.experiments.budget_runs import Load, Target, measure, service_rows
from loadtest.experiments.inprocess import alternating_median_ms
from loadtest.load.model_rows import Row, described_services
from loadtest.load.stub_timings import server_environment
from tritonlocal import LocalTritonServer, ServerConfig
from tritonrepo.clones import Clone, build_repository
from tritonrepo.configs import input_kind, instance_count, load_repository, threads_per_instance
from tritonrepo.files import NATIVE_RUNTIMES

logger = logging.getLogger(__name__)

# Images, text, and what every model of the user's own code serves to clients.
SERVICES = ("image_classifier", "text_embedder", *described_services())
IN_FLIGHT = (1, 32)
ROW_ENTRIES = 64  # distinct request rows per service (images cycle through photograph variants)


@dataclass(kw_only=True, frozen=True)
class BudgetPlan:
    """What :func:`run_budgets` measures: each service at each in-flight count, ``requests`` requests
    after ``warmup`` (None: twice the in-flight count, at least 8), at most ``duration_s`` per load; the
    in-process time the median of ``inprocess_repeats`` calls (0: not measured)."""

    services: tuple[str, ...] = SERVICES
    in_flight: tuple[int, ...] = IN_FLIGHT
    requests: int = 400
    warmup: int | None = None
    duration_s: float = 120.0
    protocol: str = "grpc"
    inprocess_repeats: int = 9

    def __post_init__(self) -> None:
        if not self.services or not self.in_flight:
            raise ValueError("a budget needs at least one service and one in-flight count")
        if self.inprocess_repeats < 0:
            raise ValueError(f"inprocess_repeats must be at least 0, got {self.inprocess_repeats}")
        for count in self.in_flight:
            self.load(count)  # refuses a bad count, request total or protocol

    def load(self, in_flight: int) -> Load:
        warmup = self.warmup if self.warmup is not None else max(8, 2 * in_flight)
        return Load(
            in_flight=in_flight,
            requests=self.requests,
            warmup=warmup,
            duration_s=self.duration_s,
            protocol=self.protocol,
        )


def run_budgets(
    plan: BudgetPlan, *, repository: Path, raw: Path, target: Target | None = None, work: Path | None = None
) -> list[Budget]:
    """Every service of ``plan`` at every load against ``target`` (None: a local server started on a
    repository derived from ``repository`` under ``work``), then each in this process. Each run's record
    and the local server's log go to ``raw``."""
    if target is None and work is None:
        raise ValueError("run_budgets needs a target server, or a work folder to derive one's repository in")
    rows = {service: service_rows(repository, service, ROW_ENTRIES) for service in plan.services}
    with _served(plan, target, repository=repository, work=work, raw=raw) as serving:
        budgets = [
            measure(serving, service, plan.load(count), repository=repository, rows=rows[service], raw=raw)
            for service in plan.services
            for count in plan.in_flight
        ]
    threads = functools.partial(served_threads, serving.repository)
    if plan.inprocess_repeats:
        for budget in budgets:
            _add_inprocess(budget, repository, rows[budget.service], plan.inprocess_repeats, threads)
    return budgets


def served_threads(served: Path | None, model: str) -> int:
    """The intra-op threads one instance of ``model`` runs with in the derived repository ``served`` (its
    ``intra_op_threads``; ``auto``: the cores divided among its instances), all the cores where it is
    not known (None: a server whose repository is not here)."""
    parameters = load_repository(served)[model].config if served is not None else None
    if parameters is None or "intra_op_threads" not in parameters.parameters:
        return _cores()
    value = parameters.parameters["intra_op_threads"].string_value
    if value != "auto":
        return max(1, int(value))
    return threads_per_instance(_cores(), instance_count(parameters))


@contextlib.contextmanager
def _served(
    plan: BudgetPlan, target: Target | None, *, repository: Path, work: Path | None, raw: Path
) -> Iterator[Target]:
    if target is not None or work is None:
        assert target is not None  # run_budgets refuses neither
        yield target
        return
    served, timings = work / "repository", work / "timings"
    shutil.rmtree(timings, ignore_errors=True)
    timings.mkdir(parents=True)
    build_repository(repository, served, [Clone(model=s) for s in plan.services], total_threads=_cores())
    raw.mkdir(parents=True, exist_ok=True)
    config = ServerConfig(
        model_repository=served,
        log_path=raw / "tritonserver.log",
        exit_timeout_s=5,
        startup_timeout_s=600,
        environment=server_environment(timings),
    )
    with LocalTritonServer(config) as server:
        yield Target(http_url=server.http_url, grpc_url=server.grpc_url, timings=timings, repository=served)


def _add_inprocess(
    budget: Budget, repository: Path, rows: Sequence[Row], repeats: int, threads: Callable[[str], int]
) -> None:
    max_batch = load_repository(repository)[budget.service].config.max_batch_size
    batch_size = min(budget.in_flight, max_batch) if max_batch > 0 else 1
    try:
        budget.inprocess = inprocess_time(
            repository, budget.service, rows, batch_size=batch_size, threads=threads, repeats=repeats
        )
    except (ValueError, OSError) as e:  # a missing file or an unknown pipeline: the report says which
        budget.notes.append(f"in one process: not measured ({e})")


def _cores() -> int:
    return os.cpu_count() or 1


def inprocess_time(
    repository: Path,
    service: str,
    rows: Sequence[Row],
    *,
    batch_size: int,
    threads: Callable[[str], int],
    repeats: int,
) -> InProcessTime:
    """The median ms of ``service``'s work on ``batch_size`` of ``rows`` in this process (``repeats``
    calls after one warm-up), with the exported files of ``repository``, the exported file run with
    ``threads(its model)`` intra-op threads. Raises ValueError for a service with no in-process pipeline
    here (the report then says so)."""
    call, what = _pipeline(repository, service, threads)
    batch = [rows[i % len(rows)] for i in range(batch_size)]
    median = alternating_median_ms({batch_size: functools.partial(call, batch)}, repeats)[batch_size]
    return InProcessTime(batch_size=batch_size, ms_per_batch=median, what=what)


def _pipeline(
    repository: Path, service: str, threads_of: Callable[[str], int]
) -> tuple[Callable[[list[Row]], object], str]:
    """``service``'s work as one call on a list of request rows, and what it runs."""
    models = load_repository(repository)
    entry = models[service]
    kind = input_kind(entry.config)
    steps = entry.ensemble_steps()
    native = [s for s in steps if models[s].is_native] if steps else ([service] if entry.is_native else [])
    if len(native) != 1:
        raise ValueError(f"{service} runs {len(native)} exported files; an in-process pipeline runs one")
    encoder = native[0]
    threads = threads_of(encoder)
    runtime = NATIVE_RUNTIMES[models[encoder].kind][0]
    file = f"{encoder} ({runtime}, {threads} thread{'s' if threads > 1 else ''})"
    if kind == "image":
        image = ImagePipeline(
            repository, classifier_model=encoder, runtime=runtime, threads=threads, preprocess_model=steps[0]
        )
        what = f"{steps[0]}'s code, {file}, softmax and top-k"
        return (lambda batch: image([bytes(_only(r)) for r in batch])), what
    if kind == "text":
        text = TextPipeline(repository, encoder_model=encoder, runtime=runtime, threads=threads)
        return (lambda batch: text([str(_only(r)) for r in batch])), f"the tokenisation, {file}"
    if steps:
        raise ValueError(f"{service} is an ensemble whose requests carry {kind}; no in-process pipeline")
    model = ExportedEncoder(served_file(repository, encoder), runtime=runtime, threads=threads)
    names = [tensor.name for tensor in entry.config.input]

    def tensors(batch: list[Row]) -> object:
        stacked = [np.stack([row[name] for row in batch]) for name in names]
        if set(names) == set(model.runner.input_names):  # fed by name where the file names them alike
            return model.runner.run(dict(zip(names, stacked, strict=True)))
        return model(*stacked)

    return tensors, file


def _only(row: Row) -> Any:
    """The one item of a request row of one STRING input (an encoded image or a text)."""
    (value,) = row.values()
    return value.reshape(-1)[0]
