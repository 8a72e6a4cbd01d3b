"""Soak benchmark: mixed image and text load at a steady fraction of capacity for a fixed time.

    python -m loadtest.soak --minutes 30 --output reports/soak

1. derives build/local_repository and starts a local tritonserver (loopback, free ports);
2. calibrates: ``--calibrate-s`` seconds of closed-loop load (both pipelines at once) measure the
   capacity of image_classifier and text_embedder side by side;
3. warms up, then soaks: requests arrive at a fixed rate, ``--fraction`` of each measured capacity,
   for ``--warmup-minutes`` and then ``--minutes``;
4. every ``--sample-s`` seconds records the resident memory (RSS) of the server and of each
   Python-backend stub, and the throughput, errors and latency of the interval;
5. with ``--fault-minutes``, ends with a fault phase under the same load (loadtest/soak/faults.py: a
   stub killed and repaired by the supervisor, then a restart of the server) and counts the requests lost;
6. writes ``samples.csv``, ``soak.png`` and ``summary.md`` to ``--output``.

Bounded in time and aimed at 127.0.0.1 only; not a test. The verdict compares the first and last
minutes after warm-up: resident memory growth (target < 5%), throughput and errors (target zero).
"""

from __future__ import annotations

import contextlib
import csv
import io
import logging
import os
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from PIL import Image

from clients.sync_client import TritonClient
from loadtest.load.observe import rss_mb
from loadtest.load.quantiles import quantile
from loadtest.soak.config import SoakConfig
from loadtest.soak.faults import FaultEvent, run_faults
from loadtest.soak.progress import SoakProgress
from samples import photograph_paths, sentences
from tritonlocal import LocalTritonServer
from tritonlocal.health import live_stubs

logger = logging.getLogger(__name__)

KINDS = ("image", "text")
PIPELINES = {"image": "image_classifier", "text": "text_embedder"}
# A request still waiting for a client thread after this long counts as an error (the load is above
# what the server sustains; a soak at a fraction of capacity should never get there).
MAX_BACKLOG = 256


@dataclass(kw_only=True)
class Tally:
    """Completions since the last sample, per kind; filled by client threads, drained by the sampler."""

    ok: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    errors: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    latencies_s: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in KINDS})
    # Requests the load generator dropped unsent: all its threads were busy (MAX_BACKLOG waiting).
    shed: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    error_messages: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record_shed(self, kind: str) -> None:
        with self.lock:
            self.shed[kind] += 1

    def record(self, kind: str, latency_s: float, error: str | None) -> None:
        with self.lock:
            if error is None:
                self.ok[kind] += 1
                self.latencies_s[kind].append(latency_s)
            else:
                self.errors[kind] += 1
                self.error_messages[error[:200]] = self.error_messages.get(error[:200], 0) + 1

    def drain(self) -> Tally:
        with self.lock:
            taken = Tally(ok=self.ok, errors=self.errors, latencies_s=self.latencies_s, shed=self.shed)
            self.ok, self.errors = dict.fromkeys(KINDS, 0), dict.fromkeys(KINDS, 0)
            self.shed = dict.fromkeys(KINDS, 0)
            self.latencies_s = {k: [] for k in KINDS}
        return taken


class Workload:
    """Real inputs (photograph crops re-encoded as JPEG, sentences) and thread-local clients."""

    def __init__(self, url: str, *, seed: int) -> None:
        self.url = url
        self.images = _image_variants(64, seed=seed)
        self.sentences = list(sentences())
        self._local = threading.local()
        self._rng = random.Random(seed)

    def send(self, kind: str) -> None:
        client = getattr(self._local, "client", None)
        if client is None:
            client = self._local.client = TritonClient(self.url, max_in_flight=1)
        if kind == "image":
            client.classify([self._rng.choice(self.images)], model=PIPELINES["image"])
        else:
            client.embed([self._rng.choice(self.sentences)], model=PIPELINES["text"])


def timed(workload: Workload, kind: str, tally: Tally, scheduled: float) -> None:
    try:
        workload.send(kind)
    except Exception as e:  # noqa: BLE001 - every failure is counted and named in the summary
        # The server's words without the input's preview, so that one cause is counted once.
        message = getattr(e, "server_message", None) or str(e)
        tally.record(kind, time.monotonic() - scheduled, f"{kind}: {type(e).__name__}: {message}")
    else:
        tally.record(kind, time.monotonic() - scheduled, None)


def calibrate(workload: Workload, config: SoakConfig) -> dict[str, float]:
    """Closed loop, ``in_flight`` requests per kind at once: requests/s each kind completes."""
    tally = Tally()
    deadline = time.monotonic() + config.calibrate_s

    def loop(kind: str) -> None:
        while time.monotonic() < deadline:
            timed(workload, kind, tally, time.monotonic())

    with ThreadPoolExecutor(max_workers=2 * config.in_flight) as pool:
        for kind in KINDS:
            for _ in range(config.in_flight):
                pool.submit(loop, kind)
    done = tally.drain()
    if any(done.errors.values()):
        logger.warning("errors during calibration: %s", done.errors)
    return {kind: done.ok[kind] / config.calibrate_s for kind in KINDS}


@dataclass(kw_only=True)
class Pacer:
    """Sends requests of one kind at a fixed rate (open loop) until ``stop`` is set."""

    kind: str
    rate_per_s: float
    workload: Workload
    tally: Tally
    pool: ThreadPoolExecutor
    stop: threading.Event
    backlog: list[int] = field(default_factory=lambda: [0])

    def run(self) -> None:
        start = time.monotonic()
        sent = 0
        while not self.stop.is_set():
            scheduled = start + sent / self.rate_per_s
            if self.stop.wait(max(0.0, scheduled - time.monotonic())):
                return
            sent += 1
            if self.backlog[0] >= MAX_BACKLOG:
                self.tally.record_shed(self.kind)
                continue
            self.backlog[0] += 1
            self.pool.submit(self._one, scheduled)

    def _one(self, scheduled: float) -> None:
        try:
            timed(self.workload, self.kind, self.tally, scheduled)
        finally:
            self.backlog[0] -= 1


def process_rss_mb(server_pid: int | None) -> dict[str, float]:
    """Resident memory of the server and of each Python-backend stub (by instance name), in MB
    (:func:`~loadtest.load.observe.rss_mb`); nothing while the server restarts (the fault phase)."""
    try:
        if server_pid is None:
            return {}
        rss = {"tritonserver": rss_mb(psutil.Process(server_pid))}
    except psutil.NoSuchProcess:
        return {}
    for instance, pid in live_stubs(server_pid).items():
        with contextlib.suppress(psutil.Error):
            rss[instance] = rss_mb(psutil.Process(pid))
    return rss


def sample_row(elapsed_s: float, phase: str, interval_s: float, done: Tally, rss: dict[str, float]) -> dict:
    row: dict = {"time_s": round(elapsed_s, 1), "phase": phase}
    for kind in KINDS:
        latencies = done.latencies_s[kind]
        row[f"{kind}_per_s"] = round(done.ok[kind] / interval_s, 2)
        row[f"{kind}_ok"] = done.ok[kind]
        row[f"{kind}_errors"] = done.errors[kind]
        row[f"{kind}_shed"] = done.shed[kind]
        row[f"{kind}_p50_ms"] = round(1000 * quantile(latencies, 0.5), 1)
        row[f"{kind}_p95_ms"] = round(1000 * quantile(latencies, 0.95), 1)
    row["rss_total_mb"] = round(sum(rss.values()), 1)
    row.update({f"rss_mb:{name}": round(value, 1) for name, value in sorted(rss.items())})
    return row


def run_soak(config: SoakConfig, server: LocalTritonServer, *, progress: SoakProgress) -> dict:
    assert server.pid is not None
    load_before = os.getloadavg()[0]
    workload = Workload(f"http://{server.http_url}", seed=config.seed)
    log = progress.line
    log(
        f"calibrating for {config.calibrate_s:.0f} s ({config.in_flight} in flight per pipeline); "
        f"then {progress.plan()}"
    )
    capacity = calibrate(workload, config)
    rates = {kind: max(0.2, config.fraction * capacity[kind]) for kind in KINDS}
    log("capacity " + ", ".join(f"{k} {v:.1f}/s" for k, v in capacity.items()))
    log("soak rates " + ", ".join(f"{k} {v:.1f}/s" for k, v in rates.items()))
    tally, stop = Tally(), threading.Event()
    with ThreadPoolExecutor(max_workers=4 * config.in_flight) as pool:
        pacers = [
            threading.Thread(target=pacer.run, daemon=True)
            for pacer in (
                Pacer(kind=k, rate_per_s=rates[k], workload=workload, tally=tally, pool=pool, stop=stop)
                for k in KINDS
            )
        ]
        for pacer in pacers:
            pacer.start()
        try:
            rows, faults = _sample_until_done(config, server, tally, progress)
        finally:
            stop.set()
            for pacer in pacers:
                pacer.join()
    if faults:  # requests still retrying when the load stopped have completed: the phase counts them
        rows.append(sample_row(rows[-1]["time_s"], "fault", config.sample_s, tally.drain(), {}))
    return {
        "capacity": capacity,
        "rates": rates,
        "rows": rows,
        "faults": [event.describe() for event in faults],
        "error_messages": tally.error_messages,
        "machine": f"{os.cpu_count()} cores; 1-minute load average {load_before:.1f} before the run, "
        f"{os.getloadavg()[0]:.1f} after (other processes share the machine: throughput is noisy)",
    }


def _sample_until_done(
    config: SoakConfig, server: LocalTritonServer, tally: Tally, progress: SoakProgress
) -> tuple[list[dict], list[FaultEvent]]:
    """Sample every ``sample_s`` through warm-up, soak and fault phase; runs the faults in a thread."""
    warmup_s, fault_start_s = 60 * config.warmup_minutes, 60 * (config.warmup_minutes + config.minutes)
    total_s = fault_start_s + 60 * config.fault_minutes
    rows: list[dict] = []
    faults: list[FaultEvent] = []
    injector: threading.Thread | None = None
    start = last = time.monotonic()
    while (now := time.monotonic()) - start < total_s or (injector is not None and injector.is_alive()):
        if injector is None and config.fault_minutes and now - start >= fault_start_s:
            duration_s = 60 * config.fault_minutes

            def inject(duration_s: float = duration_s) -> None:
                faults.extend(run_faults(server, duration_s=duration_s, log=progress.line))

            injector = threading.Thread(target=inject, name="soak-faults", daemon=True)
            injector.start()
        time.sleep(
            min(config.sample_s, max(0.0, last + config.sample_s - now), max(0.0, start + total_s - now))
        )
        now = time.monotonic()
        phase = "warmup" if now - start < warmup_s else "soak" if injector is None else "fault"
        row = sample_row(now - start, phase, now - last, tally.drain(), process_rss_mb(server.pid))
        rows.append(row)
        last = now
        progress.sample(row)
    if injector is not None:
        injector.join()
    return rows, faults


def _image_variants(count: int, *, seed: int) -> list[bytes]:
    """Distinct JPEG crops of the sample photographs (no two requests alike)."""
    photos = [Image.open(path).convert("RGB") for path in photograph_paths()]
    rng = random.Random(seed)
    variants = []
    for index in range(count):
        photo = photos[index % len(photos)]
        width, height = photo.size
        share = rng.uniform(0.6, 1.0)
        w, h = int(width * share), int(height * share)
        left, top = rng.randint(0, width - w), rng.randint(0, height - h)
        buffer = io.BytesIO()
        photo.crop((left, top, left + w, top + h)).save(buffer, format="JPEG", quality=rng.randint(80, 95))
        variants.append(buffer.getvalue())
    return variants


def write_csv(rows: list[dict], path: Path) -> None:
    columns: list[str] = []
    for row in rows:
        columns.extend(c for c in row if c not in columns)
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
