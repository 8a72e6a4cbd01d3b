"""One GPU run: ``python -m loadtest.bench --mode gpu [--dry-run]`` (``make bench-gpu``).

Writes ``reports/<run id>/`` as the CPU benchmark does: ``report.md``, ``results.json`` and ``raw/``
(the export's log, perf_analyzer's CSVs and inputs, the server's and the alternative's logs, Model
Analyzer's log), plus ``analyzer/`` (its summary and tables).
"""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path

from export.records import report_section
from loadtest.bench.gpu import stage
from loadtest.bench.gpu.plan import DRY_RUN, GPU, ROUTES, GpuPlan, encoder_of
from loadtest.bench.gpu.report import write_gpu_report
from loadtest.bench.results import write_results
from loadtest.load import environment
from tritonrepo.paths import BUILD, REPOSITORY, ROOT

logger = logging.getLogger(__name__)


def run(*, dry_run: bool, output: Path, run_id: str, source: Path = REPOSITORY) -> Path:
    plan: GpuPlan = DRY_RUN if dry_run else GPU
    device = stage.device_facts(plan)  # a GPU plan without CUDA stops here, before any work
    folder = output / run_id
    raw = folder / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    work = BUILD / "bench" / run_id
    work.mkdir(parents=True, exist_ok=True)
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
        "errors": [],
    }
    repository, records, results["export"] = stage.prepare_repository(plan, source, work, raw)
    results["precision_section"] = report_section(records)
    try:
        served = stage.serve_and_measure(plan, repository, records, work, raw)
        served["encoders"] = [encoder_of(repository, route) for route in ROUTES]
        results["errors"] += served.pop("errors", [])
        results["served"] = served
    except Exception as e:  # noqa: BLE001 - the report must say what failed, and the analyzer still runs
        logger.exception("serving failed")
        results["errors"].append(f"served: {type(e).__name__}: {e}")
    try:
        results["analyzer"] = stage.analyzer(plan, repository, folder, work, raw)
    except Exception as e:  # noqa: BLE001
        logger.exception("Model Analyzer failed")
        results["errors"].append(f"analyzer: {type(e).__name__}: {e}")
    results["duration_s"] = round(time.monotonic() - started, 1)
    write_results(folder, results)
    return write_gpu_report(folder)
