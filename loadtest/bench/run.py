"""One command for every experiment: ``python -m loadtest.bench --mode quick|full``.

Writes ``reports/<run id>/``: ``report.md`` with tables and PNG plots, ``results.json`` (everything
measured), and ``raw/`` (perf_analyzer CSVs and logs, their input data, Locust CSVs and HTML, server
statistics, onnxruntime profiles). Quick mode takes about 17 minutes on 2 cores, full mode about 60.

    python -m loadtest.bench --mode quick
    python -m loadtest.bench --mode full --output reports --run-id my-run
    python -m loadtest.bench --mode quick --only ragged         # one experiment, by its registry key
    python -m loadtest.bench --mode quick --models image_classifier_lite2     # yours: sweep, batching
    python -m loadtest.bench --mode gpu [--dry-run]             # on a CUDA machine (loadtest/bench/gpu/)
    python -m loadtest.bench --mode gpu --url http://tritonserver-bench:8000   # a running server
    python -m loadtest.bench --mode gpu --write-repository build/bench_repository   # what it serves

The served experiments run against a repository derived for the run
(:mod:`tritonrepo.clones`) holding the public models and their clones side by
side; the in-process and profiling experiments run after the server has stopped, so they do not compete
with it for the cores. Which experiment runs in which stage: :mod:`loadtest.experiments.registry`.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

from export.needed import export_needed
from loadtest.bench.progress import BenchProgress, expected_stage_s
from loadtest.bench.results import write_results
from loadtest.experiments import plans, registry
from loadtest.experiments import stages as experiment_stages
from loadtest.experiments.plans import Plan
from loadtest.load import environment
from loadtest.report.markdown import write_report
from tritonrepo.choices import check_choice
from tritonrepo.commands import EXIT_FAILED, EXIT_OK, EXIT_USAGE, command_parser
from tritonrepo.paths import BUILD, PRECISION_RECORDS, REPORTS, REPOSITORY, ROOT
from tritonrepo.progress import Progress

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
        check_choice("mode", self.mode, plans.PLANS)
        plans.with_models(plans.PLANS[self.mode], self.models, REPOSITORY)
        unknown = set(self.skip) - set(registry.KEYS)
        if unknown:
            raise ValueError(
                f"--skip names unknown experiments {sorted(unknown)}; known: {', '.join(registry.KEYS)}"
            )


EXIT_CODES = (
    "0 every stage and experiment ran, 1 one failed (the report names it; the others' "
    "results are still written) or the run could not start, 2 a usage error"
)


def build_parser() -> argparse.ArgumentParser:
    parser = command_parser(
        "python -m loadtest.bench",
        __doc__.splitlines()[0],
        exit_codes=EXIT_CODES,
    )
    parser.add_argument(
        "--mode",
        choices=sorted((*plans.PLANS, GPU_MODE)),
        default="quick",
        help="quick (about 17 min on 2 cores), full (about 60 min), gpu (on a CUDA machine)",
    )
    _add_gpu_options(parser)
    parser.add_argument("--output", type=Path, default=REPORTS, help="the folder the run's folder goes in")
    parser.add_argument(
        "--run-id", default=None, help="folder name under --output (default: the start time and the mode)"
    )
    parser.add_argument(
        "--skip",
        default=None,
        help=f"comma-separated experiments to leave out, of {','.join(registry.KEYS)}",
    )
    parser.add_argument(
        "--only",
        default=None,
        help="comma-separated experiments to run, leaving out every other (instead of --skip; default: all)",
    )
    parser.add_argument(
        "--models",
        default=None,
        help="comma-separated models of the repository to measure instead of the shipped ones: the "
        "concurrency sweep and batching on vs off (those that batch), nothing else; what they need is "
        "exported first (an up-to-date file is kept) and only that is served (default: the mode's)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages too")
    parser.add_argument(
        "-q", "--quiet", action="store_true", help="no progress and no log below warnings: the report's path"
    )
    return parser


def _add_gpu_options(parser: argparse.ArgumentParser) -> None:
    """The options of ``--mode gpu`` (loadtest/bench/gpu/)."""
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="--mode gpu only: the same plan on the CPU with tiny counts (KIND_CPU, the export in fp32)",
    )
    parser.add_argument(
        "--url",
        default=None,
        help="--mode gpu only: measure the running tritonserver at this URL (http://HOST:PORT), which serves "
        "the --write-repository clones, instead of exporting and starting the local server",
    )
    parser.add_argument(
        "--grpc-url",
        default=None,
        help="with --url: the server's gRPC endpoint (default: its host, port 8001)",
    )
    parser.add_argument(
        "--records",
        type=Path,
        default=None,
        help="with --url or --write-repository: the export's precision records "
        f"(default: {PRECISION_RECORDS})",
    )
    parser.add_argument(
        "--write-repository",
        type=Path,
        default=None,
        metavar="FOLDER",
        help="--mode gpu only: write the GPU plan's clones with the models' own configurations for "
        "NVIDIA's container into FOLDER (files copied), and measure nothing",
    )


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.verbose and args.quiet:
        parser.error("give --verbose or --quiet, not both")
    level = logging.DEBUG if args.verbose else logging.WARNING if args.quiet else logging.INFO
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    run_id = args.run_id or datetime.now(timezone.utc).strftime(f"%Y%m%dT%H%M%SZ-{args.mode}")
    if (
        args.mode == GPU_MODE
        or args.dry_run
        or args.url
        or args.grpc_url
        or args.records
        or args.write_repository
    ):
        return _gpu(args, run_id)
    models = tuple(m for m in (args.models or "").split(",") if m)
    try:
        options = BenchOptions(
            mode=args.mode,
            output=args.output,
            run_id=run_id,
            skip=skipped(args.skip or "", args.only or "", models),
            models=models,
        )
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    failures = export_needed(models, REPOSITORY) if models else {}
    if failures:
        named = "; ".join(f"{model}: {why}" for model, why in failures.items())
        print(f"error: not exported, so not measured: {named}", file=sys.stderr)
        return EXIT_FAILED
    return finished(run(options, progress=Progress(quiet=args.quiet)))


def _gpu(args: argparse.Namespace, run_id: str) -> int:
    from loadtest.bench.gpu import run as gpu_run
    from loadtest.bench.gpu.plan import write_repository
    from loadtest.bench.gpu.server import server_urls
    from loadtest.bench.gpu.stage import GpuBenchError

    problem = _gpu_usage_problem(args)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return EXIT_USAGE
    records = args.records or PRECISION_RECORDS
    try:
        if args.write_repository is not None:
            written = write_repository(args.write_repository, source=REPOSITORY, records=records)
            print(f"wrote {len(written)} models into {args.write_repository}: {', '.join(sorted(written))}")
            return EXIT_OK
        urls = server_urls(args.url, args.grpc_url) if args.url else None
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    try:
        report = gpu_run.run(
            dry_run=args.dry_run, output=args.output, run_id=run_id, urls=urls, records=records
        )
    except GpuBenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_FAILED
    return finished(report)


def _gpu_usage_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with the options of a GPU run, or None."""
    if args.mode != GPU_MODE or args.skip or args.only or args.models:
        return (
            "--dry-run, --url and --write-repository go with --mode gpu, which takes no --skip, --only "
            "or --models"
        )
    if args.grpc_url and not args.url:
        return "--grpc-url goes with --url"
    if args.records and not (args.url or args.write_repository):
        return "--records goes with --url or --write-repository (a run without --url exports its own)"
    if args.write_repository and (args.url or args.dry_run):
        return "--write-repository writes the GPU plan's repository and measures nothing: give it alone"
    return None


def finished(report: Path) -> int:
    """Print the report's path and what failed in the run (its results.json's errors); the exit code."""
    print(f"report: {report}")
    errors = json.loads((report.parent / "results.json").read_text())["errors"]
    for error in errors:
        print(f"failed: {error}", file=sys.stderr)
    if errors:
        print(f"error: {len(errors)} part(s) of the run failed; the report says which", file=sys.stderr)
    return EXIT_FAILED if errors else EXIT_OK


def skipped(skip: str, only: str, models: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The experiments to leave out, from ``--skip`` or (its complement) ``--only``; with ``models``, also
    every experiment that measures the shipped models rather than those."""
    skip_names = tuple(s for s in skip.split(",") if s)
    only_names = tuple(s for s in only.split(",") if s)
    if skip_names and only_names:
        raise ValueError("give --skip or --only, not both")
    unknown = sorted(set(only_names) - set(registry.KEYS))
    if unknown:
        raise ValueError(f"--only names unknown experiments {unknown}; known: {', '.join(registry.KEYS)}")
    shipped = [e for e in only_names if e not in registry.MODEL_KEYS]
    if models and shipped:
        raise ValueError(
            f"--models measures the models it names with {', '.join(registry.MODEL_KEYS)}; {shipped} measure "
            "the shipped models: run them without --models"
        )
    left_out = (e for e in registry.KEYS if e not in only_names) if only_names else skip_names
    unmeasured = (e for e in registry.KEYS if e not in registry.MODEL_KEYS) if models else ()
    return tuple(dict.fromkeys((*left_out, *unmeasured)))


def run(options: BenchOptions, *, progress: Progress | None = None) -> Path:
    """Run the stages of ``options``; a stage that fails is recorded and the others still run. The
    report's path."""
    plan = plans.with_models(plans.PLANS[options.mode], options.models, REPOSITORY)
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
    stages = stage_runners(plan, options, work=BUILD / "bench" / options.run_id, raw=raw)
    bench = BenchProgress(progress or Progress(), expected_stage_s(options.mode, options.skip))
    for name in bench.stages:  # a stage runs when any of its experiments is left in
        with bench.stage(name):
            _stage(results, name, stages[name])
    results["load_average_end"] = environment.load_average()
    results["duration_s"] = round(time.monotonic() - started, 1)
    write_results(folder, results)
    return write_report(folder)


def stage_runners(
    plan: Plan, options: BenchOptions, *, work: Path, raw: Path
) -> dict[str, Callable[[], dict]]:
    """Each stage (registry.STAGES) as a call returning its results.json keys."""
    cores = os.cpu_count() or 1
    return {
        "served": lambda: experiment_stages.served_stage(plan, REPOSITORY, work, raw, cores, options.skip),
        "central": lambda: experiment_stages.central_stage(plan, REPOSITORY, work, raw, cores),
        "inprocess": lambda: experiment_stages.inprocess_stage(plan, REPOSITORY, cores),
        "profile": lambda: experiment_stages.profile_stage(plan, REPOSITORY, raw, cores),
    }


def _stage(results: dict, name: str, stage: Callable[[], dict]) -> None:
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
