"""One GPU run: ``python -m loadtest.bench --mode gpu [--dry-run] [--url URL]`` (``make bench-gpu``).

Without ``--url`` the run exports into a copy of the repository and measures the local tritonserver of
the nvidia-pytriton wheel (the mode for a machine without Docker; its report says what that server
runs). With ``--url`` it measures a running tritonserver that serves the benchmark's clones (the
compose profile ``bench``): no export, no server of its own, no Model Analyzer (which starts its own).

Writes ``reports/<run id>/`` as the CPU benchmark does: ``report.md``, ``results.json`` and ``raw/``
(the export's log, perf_analyzer's CSVs and inputs, the server's and the alternative's logs, Model
Analyzer's log), plus ``analyzer/`` (its summary and tables).
"""

from __future__ import annotations

import logging
import os
import sys
import time
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path

from export.precision.records import report_section
from loadtest.bench.gpu import stage
from loadtest.bench.gpu.plan import (
    DRY_RUN,
    GPU,
    ROUTES,
    TEXT_MODEL,
    GpuPlan,
    encoder_of,
    lost_routes,
    measured_models,
    optional_models,
    precision_notes,
    served_clones,
)
from loadtest.bench.gpu.report import write_gpu_report
from loadtest.bench.gpu.server import (
    LOCAL_LABEL,
    RESTRICTED_CONFIG,
    URL_LABEL,
    ServerUrls,
    config_restricted,
    not_ready,
    refusal,
)
from loadtest.bench.results import write_results
from loadtest.load import environment
from tritonrepo.paths import BUILD, PRECISION_RECORDS, REPOSITORY, ROOT

logger = logging.getLogger(__name__)

# The variable holding the key of a --url server's restricted APIs (compose's bench-gpu sets it).
ADMIN_KEY_VARIABLE = "TRITON_ADMIN_KEY"

ANALYZER_SKIPPED = (
    "skipped: this run measures the server at --url, and Model Analyzer starts a tritonserver of its own "
    "(the local one), which would measure another server; run `python -m loadtest.tune --kind KIND_GPU "
    "--sweep gpu` for its search on the local server"
)


def run(
    *,
    dry_run: bool,
    output: Path,
    run_id: str,
    source: Path = REPOSITORY,
    urls: ServerUrls | None = None,
    records: Path = PRECISION_RECORDS,
) -> Path:
    """The run's report. ``urls``: measure that running server (``records``: the precision records of the
    export that wrote ``source``'s files) instead of exporting and starting the local one."""
    plan: GpuPlan = DRY_RUN if dry_run else GPU
    device = stage.device_facts(plan)  # a GPU plan without CUDA stops here, before any work
    admin_key = os.environ.get(ADMIN_KEY_VARIABLE) or None  # what opens a --url server's restricted APIs
    unavailable = check_served(plan, urls, source, records, admin_key) if urls is not None else []
    folder = output / run_id
    raw = folder / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    work = BUILD / "bench" / run_id  # the local mode's copy, derived repository and searches
    started = time.monotonic()
    results: dict = {
        "run_id": run_id,
        "mode": "gpu",
        "dry_run": dry_run,
        "command": "python -m loadtest.bench " + " ".join(sys.argv[1:]),
        "started_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "plan": asdict(plan),
        "device": device,
        "machine": environment.machine(),
        "git": environment.git_commit(ROOT),
        "source_config_sha256": environment.source_config_hashes(source),
        "server": {"kind": "local", "label": LOCAL_LABEL}
        if urls is None
        else {"kind": "url", "label": URL_LABEL.format(url=f"http://{urls.http_url}")},
        "errors": [],
    }
    if urls is None:
        work.mkdir(parents=True, exist_ok=True)
        repository, records, results["export"] = stage.prepare_repository(plan, source, work, raw)
    else:
        repository, results["export"] = source, {"records": str(records)}
    results["precision_section"] = report_section(records)
    _served(results, plan, (urls, admin_key, unavailable), repository, records, work, raw)
    if urls is None:
        _analyzer(results, plan, repository, folder, work, raw)
    else:
        results["analyzer_skipped"] = ANALYZER_SKIPPED
    results["duration_s"] = round(time.monotonic() - started, 1)
    write_results(folder, results)
    return write_gpu_report(folder)


def _served(
    results: dict,
    plan: GpuPlan,
    server: tuple[ServerUrls | None, str | None, list[str]],
    repository: Path,
    records: Path,
    work: Path,
    raw: Path,
) -> None:
    """The experiments, against the server at ``urls`` or a local one started for them; the arms of the
    optional routes that cannot be served are left out, and the report says why. ``server``: the --url
    server's addresses, its admin key and the optional models it does not serve (None: a local one)."""
    urls, admin_key, unavailable = server
    try:
        if urls is None:
            served = stage.serve_and_measure(plan, repository, records, work, raw)
        else:
            served = stage.measure_at(plan, urls, repository, records, raw, (admin_key, unavailable))
        results["server"] |= served.pop("server")
        results["lost_arms"] = lost_routes(repository, records, served.pop("unavailable"))
        served["encoders"] = [encoder_of(repository, route) for route in ROUTES]
        served["precision_notes"] = precision_notes(repository, records, results["lost_arms"])
        results["errors"] += served.pop("errors", [])
        results["served"] = served
    except Exception as e:  # noqa: BLE001 - the report must say what failed, and the analyzer still runs
        logger.exception("serving failed")
        results["errors"].append(f"served: {type(e).__name__}: {e}")


def check_served(
    plan: GpuPlan, urls: ServerUrls, source: Path, records: Path, admin_key: str | None
) -> list[str]:
    """The optional routes' models the server at ``urls`` does not serve (their arms are left out).
    Refuses, naming each missing model and what serves it, a server without the other clones."""
    _, arms = served_clones(plan, source, records)
    try:
        missing = not_ready(urls.http_url, measured_models(arms))
    except OSError as e:
        raise stage.GpuBenchError(
            f"no tritonserver answers at http://{urls.http_url} ({e}); start it, or give its address "
            "with --url"
        ) from e
    required = [model for model in missing if model not in optional_models()]
    if required:
        raise stage.GpuBenchError(refusal(urls.http_url, required))
    if config_restricted(urls.http_url, TEXT_MODEL, admin_key):
        raise stage.GpuBenchError(RESTRICTED_CONFIG.format(url=urls.http_url))
    return [model for model in missing if model in optional_models()]


def _analyzer(results: dict, plan: GpuPlan, repository: Path, folder: Path, work: Path, raw: Path) -> None:
    try:
        results["analyzer"] = stage.analyzer(plan, repository, folder, work, raw)
    except Exception as e:  # noqa: BLE001
        logger.exception("Model Analyzer failed")
        results["errors"].append(f"analyzer: {type(e).__name__}: {e}")
