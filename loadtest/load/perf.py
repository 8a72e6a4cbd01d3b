"""Run perf_analyzer at one concurrency and parse what it measured.

Each measurement is one bounded perf_analyzer process: time windows of ``measurement_interval_ms``, at
most ``max_trials`` windows, stable when the last three windows agree within ``stability_percent``
(throughput and the 99th percentile), real data from :mod:`loadtest.load.perf_inputs`, results written with
``-f file.csv``. On a noisy 2-core machine a window set may never agree: perf_analyzer then writes no
CSV, so the point is kept from its verbose per-window lines (median throughput and p99 of the windows)
and marked unstable in the report, never re-run until it looks good.
"""

from __future__ import annotations

import csv
import itertools
import logging
import re
import statistics
import subprocess
from dataclasses import dataclass
from pathlib import Path

from clients.transport import grpc_headers
from loadtest.load.perf_inputs import InputData
from tritonlocal.perf_analyzer import locate
from tritonrepo.access import ADMIN_HEADER
from tritonrepo.choices import check_choice

logger = logging.getLogger(__name__)

PROTOCOLS = ("http", "grpc")
_PASS = re.compile(r"Pass \[(\d+)\] throughput: ([0-9.]+) infer/sec\. p(\d+) latency: (\d+) usec")
_PERCENTILES = (50, 90, 95, 99)


@dataclass(kw_only=True, frozen=True)
class PerfSettings:
    """How perf_analyzer measures a point: windows of ``measurement_interval_ms``, at most ``max_trials`` of
    them, stable when three agree within ``stability_percent``; the run is killed after ``timeout_s``."""

    measurement_interval_ms: int = 2000
    max_trials: int = 5
    stability_percent: int = 20
    percentile: int = 99
    timeout_s: float = 120.0

    def __post_init__(self) -> None:
        if self.measurement_interval_ms < 100:
            raise ValueError(
                f"measurement_interval_ms must be at least 100, got {self.measurement_interval_ms}"
            )
        if self.max_trials < 3:
            raise ValueError(
                f"max_trials must be at least 3 (stability compares 3 windows), got {self.max_trials}"
            )
        if not 0 < self.stability_percent <= 100:
            raise ValueError(f"stability_percent must be in (0, 100], got {self.stability_percent}")


@dataclass(kw_only=True)
class PerfPoint:
    """One perf_analyzer measurement. Latencies in milliseconds, throughput in inferences/s."""

    model: str
    protocol: str
    concurrency: int
    batch_size: int = 1
    throughput_per_s: float = 0.0
    p50_ms: float | None = None
    p90_ms: float | None = None
    p95_ms: float | None = None
    p99_ms: float | None = None
    server_queue_ms: float | None = None
    server_compute_ms: float | None = None
    stable: bool = False
    windows: int = 0
    error: str | None = None
    csv_file: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.throughput_per_s > 0


@dataclass(kw_only=True, frozen=True)
class PerfTarget:
    """What one perf_analyzer run measures: a served model at one concurrency, on real input data."""

    model: str
    url: str
    protocol: str
    concurrency: int
    inputs: InputData
    batch_size: int = 1
    # The key of a server whose model-config API is restricted (perf_analyzer reads each model's config):
    # sent as the admin header, under Triton's restricted-protocol prefix over gRPC.
    admin_key: str | None = None

    def __post_init__(self) -> None:
        check_choice("protocol", self.protocol, PROTOCOLS)
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {self.concurrency}")

    @property
    def stem(self) -> str:
        """The name of the run's CSV and log files."""
        batch = f"_b{self.batch_size}" if self.batch_size != 1 else ""
        return f"{self.model}_{self.protocol}_c{self.concurrency}{batch}"


def perf_command(target: PerfTarget, *, csv_path: Path, settings: PerfSettings) -> list[str]:
    return [
        str(locate()),
        "-m",
        target.model,
        "-u",
        target.url,
        "-i",
        target.protocol,
        f"--input-data={target.inputs.path}",
        # An explicit end: one thread per request.
        f"--concurrency-range={target.concurrency}:{target.concurrency}",
        "-b",
        str(target.batch_size),
        "--measurement-mode=time_windows",
        f"--measurement-interval={settings.measurement_interval_ms}",
        f"--max-trials={settings.max_trials}",
        f"--stability-percentage={settings.stability_percent}",
        f"--percentile={settings.percentile}",
        "-v",  # the per-window lines: the fallback when no stable measurement is reached
        "-f",
        str(csv_path),
        *target.inputs.shape_args,
        *_header_args(target),
    ]


def _header_args(target: PerfTarget) -> list[str]:
    if target.admin_key is None:
        return []
    headers = {ADMIN_HEADER: target.admin_key}
    headers = grpc_headers(headers) if target.protocol == "grpc" else headers
    return [arg for name, value in headers.items() for arg in ("-H", f"{name}:{value}")]


def run_paths(out_dir: Path, stem: str) -> tuple[Path, Path]:
    """The CSV and log paths of a new run of ``stem``: ``stem.csv`` for the first, ``stem_run2.csv`` and on
    for the runs after it (an experiment measures a target once per round). A run never reuses another's
    path: perf_analyzer writes no CSV when its windows disagree, and an earlier run's file left there
    would be read as this run's result."""
    for number in itertools.count(1):
        name = stem if number == 1 else f"{stem}_run{number}"
        csv_path, log_path = out_dir / f"{name}.csv", out_dir / f"{name}.log"
        if not csv_path.exists() and not log_path.exists():
            return csv_path, log_path
    raise AssertionError("unreachable")


def run_perf(target: PerfTarget, *, out_dir: Path, settings: PerfSettings) -> PerfPoint:
    """One bounded perf_analyzer run; its CSV and log are kept in ``out_dir`` under names of their own."""
    out_dir.mkdir(parents=True, exist_ok=True)
    csv_path, log_path = run_paths(out_dir, target.stem)
    command = perf_command(target, csv_path=csv_path, settings=settings)
    point = PerfPoint(
        model=target.model,
        protocol=target.protocol,
        concurrency=target.concurrency,
        batch_size=target.batch_size,
    )
    try:
        completed = subprocess.run(
            command, capture_output=True, text=True, timeout=settings.timeout_s, check=False
        )
        output = completed.stdout + completed.stderr
    except subprocess.TimeoutExpired as e:
        output = _text(e.stdout) + _text(e.stderr) + f"\nkilled after {settings.timeout_s:.0f} s"
    log_path.write_text(output)
    if csv_path.is_file():
        rows = parse_csv(csv_path)
        if rows:
            return _from_row(point, rows[0], csv_path, windows=len(parse_passes(output)))
    return _from_passes(point, output)


def _text(data: bytes | str | None) -> str:
    if data is None:
        return ""
    return data if isinstance(data, str) else data.decode(errors="replace")


def parse_csv(path: Path) -> list[dict[str, float]]:
    """perf_analyzer's ``-f`` CSV as one dict per concurrency row (numbers as floats; µs as written)."""
    with Path(path).open(newline="") as handle:
        return [
            {key.strip(): float(value) for key, value in row.items() if key and value not in (None, "")}
            for row in csv.DictReader(handle)
        ]


def parse_passes(output: str) -> list[tuple[float, float]]:
    """(throughput infer/s, percentile latency µs) of every measurement window in verbose output."""
    return [(float(m.group(2)), float(m.group(4))) for m in _PASS.finditer(output)]


def _from_row(point: PerfPoint, row: dict[str, float], csv_path: Path, *, windows: int) -> PerfPoint:
    point.throughput_per_s = row["Inferences/Second"]
    for percentile in _PERCENTILES:
        value = row.get(f"p{percentile} latency")
        setattr(point, f"p{percentile}_ms", value / 1000.0 if value is not None else None)
    point.server_queue_ms = row.get("Server Queue", 0.0) / 1000.0
    point.server_compute_ms = (
        sum(row.get(f"Server Compute {part}", 0.0) for part in ("Input", "Infer", "Output")) / 1000.0
    )
    point.stable, point.windows, point.csv_file = True, windows, csv_path.name
    return point


def _error_line(output: str) -> str:
    """The line that says what went wrong: the first naming an error, else the last one written."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for line in lines:
        if re.search(r"error|failed|unable", line, re.I):
            return line[:400]
    return lines[-1][:400] if lines else "perf_analyzer produced no measurement"


def _from_passes(point: PerfPoint, output: str) -> PerfPoint:
    passes = parse_passes(output)
    if not passes:
        point.error = _error_line(output)
        logger.warning("perf_analyzer %s c=%d failed: %s", point.model, point.concurrency, point.error)
        return point
    point.throughput_per_s = statistics.median(t for t, _ in passes)
    point.p99_ms = statistics.median(p for _, p in passes) / 1000.0
    point.windows = len(passes)
    point.stable = False
    logger.info(
        "%s c=%d: no stable measurement; kept the median of %d windows",
        point.model,
        point.concurrency,
        len(passes),
    )
    return point
