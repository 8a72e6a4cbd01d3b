"""One command for every experiment: ``python -m loadtest.bench --mode quick|full``.

Writes ``reports/<run id>/``: ``report.md`` with tables and PNG plots, ``results.json`` (everything
measured), and ``raw/`` (perf_analyzer CSVs and logs, their input data, Locust CSVs and HTML, server
statistics, onnxruntime profiles). Quick mode takes about 8 minutes on 2 cores, full mode about 45.

    python -m loadtest.bench --mode quick
    python -m loadtest.bench --mode full --output reports --run-id my-run
    python -m loadtest.bench --mode quick --only ragged         # one experiment, by its registry key
    python -m loadtest.bench --mode quick --only batching,sweeps --models image_classifier_lite2
    python -m loadtest.bench --mode gpu [--dry-run]             # on a CUDA machine (loadtest/bench/gpu/)

The served experiments run against a repository derived for the run
(:mod:`tritonrepo.variants`) holding the public models and their variants side by
side; the in-process and profiling experiments run after the server has stopped, so they do not compete
with it for the cores. Which experiment runs in which stage: :mod:`loadtest.experiments.registry`.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

from loadtest.bench.results import write_results
from loadtest.experiments import plans as experiments_plan
from loadtest.experiments import registry
from loadtest.experiments import stages as experiment_stages
from loadtest.load import environment
from loadtest.report.markdown import write_report
from tritonrepo.paths import BUILD, REPORTS, REPOSITORY, ROOT

logger = logging.getLogger(__name__)

GPU_MODE = "gpu"  # export, serve and measure on this machine's GPU: loadtest/bench/gpu/


@dataclass(kw_only=True)
class BenchOptions:
    mode: str
    output: Path
    run_id: str
    skip: tuple[str, ...] = ()
    models: tuple[str, ...] = ()  # the sweep's and `batching`'s models instead of the plan's

    def __post_init__(self) -> None:
        if self.mode not in experiments_plan.PLANS:
            raise ValueError(f"mode must be one of {', '.join(experiments_plan.PLANS)}, got {self.mode!r}")
        experiments_plan.with_models(experiments_plan.PLANS[self.mode], self.models, REPOSITORY)
        unknown = set(self.skip) - set(registry.KEYS)
        if unknown:
            raise ValueError(
                f"--skip names unknown experiments {sorted(unknown)}; known: {', '.join(registry.KEYS)}"
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtest.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=sorted((*experiments_plan.PLANS, GPU_MODE)), default="quick")
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="--mode gpu only: the same plan on the CPU with tiny counts (KIND_CPU, no export)",
    )
    parser.add_argument("--output", type=Path, default=REPORTS)
    parser.add_argument("--run-id", default=None, help="folder name under --output (default: time and mode)")
    parser.add_argument(
        "--skip",
        default="",
        help=f"comma-separated experiments to leave out: {','.join(registry.KEYS)}",
    )
    parser.add_argument(
        "--only",
        default="",
        help="comma-separated experiments to run, leaving out every other (instead of --skip)",
    )
    parser.add_argument(
        "--models",
        default="",
        help="comma-separated models of the repository for the concurrency sweep and the batching on vs off "
        "experiment (its ensembles), instead of the mode's",
    )
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    run_id = args.run_id or datetime.now(timezone.utc).strftime(f"%Y%m%dT%H%M%SZ-{args.mode}")
    if args.mode == GPU_MODE or args.dry_run:
        return _gpu(args, run_id)
    try:
        options = BenchOptions(
            mode=args.mode,
            output=args.output,
            run_id=run_id,
            skip=skipped(args.skip, args.only),
            models=tuple(m for m in args.models.split(",") if m),
        )
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    report = run(options)
    print(f"report: {report}")
    return 0


def _gpu(args: argparse.Namespace, run_id: str) -> int:
    from loadtest.bench.gpu import run as gpu_run
    from loadtest.bench.gpu.stage import GpuBenchError

    if args.mode != GPU_MODE or args.skip or args.only or args.models:
        print(
            "error: --dry-run goes with --mode gpu, which takes no --skip, --only or --models",
            file=sys.stderr,
        )
        return 2
    try:
        report = gpu_run.run(dry_run=args.dry_run, output=args.output, run_id=run_id)
    except GpuBenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"report: {report}")
    return 0


def skipped(skip: str, only: str) -> tuple[str, ...]:
    """The experiments to leave out, from ``--skip`` or (its complement) ``--only``."""
    skip_names = tuple(s for s in skip.split(",") if s)
    only_names = tuple(s for s in only.split(",") if s)
    if skip_names and only_names:
        raise ValueError("give --skip or --only, not both")
    if not only_names:
        return skip_names
    unknown = sorted(set(only_names) - set(registry.KEYS))
    if unknown:
        raise ValueError(f"--only names unknown experiments {unknown}; known: {', '.join(registry.KEYS)}")
    return tuple(e for e in registry.KEYS if e not in only_names)


def run(options: BenchOptions) -> Path:
    plan = experiments_plan.with_models(experiments_plan.PLANS[options.mode], options.models, REPOSITORY)
    folder = options.output / options.run_id
    raw = folder / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    results: dict = {
        "run_id": options.run_id,
        "mode": options.mode,
        "command": "python -m loadtest.bench " + " ".join(sys.argv[1:]),
        "started_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "plan": asdict(plan),
        "skipped": list(options.skip),
        "machine": environment.machine(),
        "load_average_start": environment.load_average(),
        "git": environment.git_commit(ROOT),
        "source_config_sha256": environment.source_config_hashes(REPOSITORY),
        "errors": [],
    }
    cores = os.cpu_count() or 1
    work = BUILD / "bench" / options.run_id
    stages = {
        "served": lambda: experiment_stages.served_stage(plan, REPOSITORY, work, raw, cores, options.skip),
        "central": lambda: experiment_stages.central_stage(plan, REPOSITORY, work, raw, cores),
        "inprocess": lambda: experiment_stages.inprocess_stage(plan, REPOSITORY, cores),
        "profile": lambda: experiment_stages.profile_stage(plan, REPOSITORY, raw, cores),
    }
    for name in registry.STAGES:  # a stage runs when any of its experiments is left in
        if registry.in_stage(name, options.skip):
            _stage(results, name, stages[name])
    results["load_average_end"] = environment.load_average()
    results["duration_s"] = round(time.monotonic() - started, 1)
    write_results(folder, results)
    return write_report(folder)


def _stage(results: dict, name: str, stage) -> None:  # noqa: ANN001 - a callable returning a dict
    """Run one stage; a failure is recorded in the report (with its message) and the others still run."""
    started = time.monotonic()
    try:
        produced = stage()
        results["errors"].extend(f"{name}/{error}" for error in produced.pop("experiment_errors", []))
        results.update(produced)
    except Exception as e:  # noqa: BLE001 - the report must say what failed, and the rest must run
        logger.exception("stage %s failed", name)
        results["errors"].append(f"{name}: {type(e).__name__}: {e}")
    results.setdefault("stage_durations_s", {})[name] = round(time.monotonic() - started, 1)


if __name__ == "__main__":
    raise SystemExit(main())
