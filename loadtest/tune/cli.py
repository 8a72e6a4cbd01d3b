"""Command line: ``python -m loadtest.tune`` (``make tune``).

python -m loadtest.tune                                        # quick sweep, both pipelines, p99 <= 1000 ms
python -m loadtest.tune --models image_classifier --latency-budget-ms 300 --adopt
python -m loadtest.tune --sweep minimal --models efficientnet_lite0_onnx --output reports/tune-check
"""

from __future__ import annotations

import argparse
import logging
import shlex
import sys
import time
from pathlib import Path

from loadtest.tune import analyzer, report, results
from loadtest.tune.adopt import adopt
from loadtest.tune.plan import KINDS, SWEEPS, TunePlan, make_plan
from loadtest.tune.progress import AnalyzerProgress
from tritonlocal.errors import TritonLocalError
from tritonrepo.commands import EXIT_FAILED, EXIT_OK, EXIT_USAGE, command_parser
from tritonrepo.errors import RepositoryError
from tritonrepo.paths import BUILD, REPORTS, REPOSITORY
from tritonrepo.progress import Progress

DEFAULT_MODELS = ("image_classifier", "text_embedder")
EXIT_INTERRUPTED = 130  # Ctrl-C, as a shell reports it
EXIT_CODES = (
    "0 tuned (the summary names the winners), 1 Model Analyzer failed, ran past --timeout-s "
    "or measured nothing (its log says why), 2 a usage error (an unknown or untunable model, a bad "
    "value), 130 interrupted (the same command resumes from the checkpoint)"
)


def build_parser() -> argparse.ArgumentParser:
    parser = command_parser(
        "python -m loadtest.tune",
        "Search the local CPU configuration with Model Analyzer under a p99 latency budget.",
        exit_codes=EXIT_CODES,
    )
    parser.add_argument(
        "--models",
        nargs="+",
        default=list(DEFAULT_MODELS),
        help="ensembles (their exported step is tuned) or exported models",
    )
    parser.add_argument("--sweep", choices=sorted(SWEEPS), default="quick", help="what is searched")
    parser.add_argument(
        "--concurrency",
        type=int,
        nargs="+",
        default=None,
        help="requests in flight each configuration is measured at: the load you serve "
        "(default: the sweep's, 8 for quick)",
    )
    parser.add_argument("--latency-budget-ms", type=float, default=1000.0, help="p99 constraint")
    parser.add_argument(
        "--min-gain",
        type=float,
        default=0.05,
        help="a variant replaces the shipped configuration only if this much faster (0.05 = 5%%)",
    )
    parser.add_argument(
        "--output", type=Path, default=None, help=f"report folder (default: {REPORTS}/tune-<time>)"
    )
    parser.add_argument("--work", type=Path, default=BUILD / "tune", help="work folder with checkpoints")
    parser.add_argument("--source", type=Path, default=REPOSITORY, help="the deployable repository")
    parser.add_argument(
        "--kind",
        choices=KINDS,
        default="KIND_CPU",
        help="the instances searched: KIND_GPU on this machine's GPU",
    )
    parser.add_argument("--timeout-s", type=float, default=3600.0, help="stop Model Analyzer after this long")
    parser.add_argument(
        "--adopt",
        action="store_true",
        help="write each winner to model_repository/<model>/local_cpu.pbtxt for `tritonrepo derive`",
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress: the summary and errors only")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING if args.quiet else logging.INFO, format="%(levelname)s %(name)s: %(message)s"
    )
    command = "python -m loadtest.tune " + shlex.join(sys.argv[1:] if argv is None else argv)
    output = args.output or REPORTS / time.strftime("tune-%Y%m%d-%H%M%S")
    if args.adopt and args.kind != "KIND_CPU":
        print(
            "error: --adopt writes the local CPU settings (local_cpu.pbtxt); use it with --kind KIND_CPU",
            file=sys.stderr,
        )
        return EXIT_USAGE
    try:
        plan = make_plan(
            args.models,
            sweep=args.sweep,
            concurrency=args.concurrency,
            latency_budget_ms=args.latency_budget_ms,
            min_gain=args.min_gain,
            source=args.source,
            kind=args.kind,
        )
        workspace = analyzer.prepare(plan, args.work)
    except (ValueError, analyzer.TuneError) as e:  # what was asked cannot be tuned here
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except (RepositoryError, TritonLocalError) as e:  # a malformed repository, no tritonserver
        print(f"error: {e}", file=sys.stderr)
        return EXIT_FAILED
    started = time.monotonic()
    try:
        measure(plan, workspace, timeout_s=args.timeout_s, progress=Progress(quiet=args.quiet))
        measured = results.read_measurements(workspace.export, workspace.output_repository)
    except (analyzer.TuneError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print(
            f"interrupted; the same command resumes from the checkpoint in {workspace.root}", file=sys.stderr
        )
        return EXIT_INTERRUPTED
    return _report(args, plan, workspace, measured, command=command, output=output, started=started)


def _report(
    args: argparse.Namespace,
    plan: TunePlan,
    workspace: analyzer.Workspace,
    measured: list[results.Measurement],
    *,
    command: str,
    output: Path,
    started: float,
) -> int:
    """Pick each model's winner, adopt it when asked, and write and print the report."""
    outcomes = results.outcomes(measured, list(plan.targets.values()), min_gain=plan.min_gain)
    refused = ""
    try:
        adopted = (
            adopt(outcomes, plan.source, command=command, latency_budget_ms=plan.latency_budget_ms)
            if args.adopt
            else []
        )
    except ValueError as e:  # a winner Triton would refuse to load: reported, nothing written
        adopted, refused = [], str(e)
    output.mkdir(parents=True, exist_ok=True)
    copied = report.copy_model_analyzer_outputs(workspace.export, output)
    facts = report.RunFacts(command=command, elapsed_s=time.monotonic() - started, adopted=adopted)
    summary = report.write_summary(output, plan, outcomes, facts, copied)
    print(summary.read_text())
    print(f"report: {summary}")
    if refused:
        print(f"error: {refused}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def measure(plan: TunePlan, workspace: analyzer.Workspace, *, timeout_s: float, progress: Progress) -> None:
    """Run Model Analyzer on ``workspace``, showing each configuration it profiles as it begins."""
    progress.line(
        f"tuning {', '.join(plan.targets.values())} with Model Analyzer: {plan.profiles} configurations "
        f"(sweep {plan.sweep.name}); its log: {workspace.log_file}"
    )
    with progress.bar(desc="Model Analyzer", total=plan.profiles, unit="config") as bar:
        watcher = AnalyzerProgress(progress, total=plan.profiles, bar=bar)
        analyzer.run(workspace, timeout_s=timeout_s, on_line=watcher.feed)
