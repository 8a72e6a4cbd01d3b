"""``python -m clients.batch``: classify a folder (or glob) of images, or embed a file of text lines.

    python -m clients.batch --images photos/ --output build/photos.jsonl
    python -m clients.batch --images 'photos/**/*.jpg' --output out.jsonl --in-flight 32
    python -m clients.batch --texts sentences.txt --output build/embeddings.jsonl --url grpc://127.0.0.1:8001

Re-running with the same --output resumes: inputs that already have a result are skipped, inputs that
failed are tried again. Exit codes: 0 every input has a result; 1 some inputs failed (see their
records) or remain (--limit); 2 usage error; 3 the server cannot be reached.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from clients.batch.inputs import image_inputs, text_inputs
from clients.batch.job import JobConfig, JobSummary, run_job
from clients.cli import DEFAULT_URL, EXIT_FAILED, EXIT_OK, FAILURES, parse_header, report_failure
from clients.retry import RetryPolicy
from clients.tables import table

EXIT_INTERRUPTED = 130


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(message)s"
    )
    try:
        inputs = image_inputs(args.images) if args.images else text_inputs(args.texts)
        config = JobConfig(
            **{f.name: getattr(args, f.name) for f in dataclasses.fields(JobConfig) if hasattr(args, f.name)},
            headers=dict(parse_header(h) for h in args.header),
            progress=False if args.no_progress else None,
        )
        summary = asyncio.run(run_job(inputs, args.output, config))
    except FAILURES as e:
        return report_failure(e, args.url)
    except KeyboardInterrupt:
        print(f"interrupted; results so far are in {args.output}; re-run to resume", file=sys.stderr)
        return EXIT_INTERRUPTED
    print(json.dumps(summary.to_dict(), indent=2) if args.json else render(summary, args.output))
    return EXIT_OK if summary.errors == 0 and summary.remaining == 0 else EXIT_FAILED


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m clients.batch",
        description=__doc__.split("\n\n")[0],
        epilog="exit codes: 0 all done, 1 failures or inputs left, 2 usage, 3 server unreachable, "
        "130 interrupted (run the same command again to resume)",
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--images",
        metavar="FOLDER_OR_GLOB",
        help="a folder of images or a glob pattern (this or --texts is required)",
    )
    source.add_argument(
        "--texts",
        type=Path,
        metavar="FILE",
        help="a UTF-8 file, one text per line (this or --images is required)",
    )
    parser.add_argument(
        "--output", type=Path, required=True, help="JSON-lines results, appended; resumable (required)"
    )
    parser.add_argument(
        "--url",
        default=os.environ.get("TRITON_URL", DEFAULT_URL),
        help="http://host:port or grpc://host:port (default: $TRITON_URL or %(default)s)",
    )
    parser.add_argument(
        "--protocol",
        choices=["http", "grpc"],
        default=None,
        help="for a --url without scheme (default: http)",
    )
    parser.add_argument(
        "--model", default=None, help="the model to call (default: image_classifier or text_embedder)"
    )
    parser.add_argument(
        "--in-flight", type=int, default=16, help="requests outstanding at once (default: 16)"
    )
    parser.add_argument("--timeout-s", type=float, default=30.0, help="per request (default: %(default)s)")
    parser.add_argument(
        "--retry-deadline-s",
        type=float,
        default=RetryPolicy.deadline_s,
        help="retry a request that failed for a retryable reason (model restarting, server unreachable or "
        "full) until this many seconds after its first try (default: %(default)s)",
    )
    parser.add_argument(
        "--attempts", type=int, default=None, help="also cap the tries per request (default: none)"
    )
    _add_output_options(parser)
    return parser


def _add_output_options(parser: argparse.ArgumentParser) -> None:
    """What the job keeps of each answer and what it prints."""
    parser.add_argument(
        "--top-k", type=int, default=None, help="classes per image (default: every class the model returns)"
    )
    parser.add_argument(
        "--limit", type=int, default=None, help="process at most N pending inputs, then stop (default: all)"
    )
    parser.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra header on every request, repeatable (default: none)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar or progress lines")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument("-v", "--verbose", action="store_true", help="log retries and fallbacks too")


def render(summary: JobSummary, output: Path) -> str:
    lines = [
        f"inputs: {summary.total}  processed: {summary.processed} "
        f"({summary.ok} ok, {summary.errors} errors)  skipped (done before): {summary.skipped}  "
        f"remaining: {summary.remaining}",
        f"time: {summary.elapsed_s:.2f} s  throughput: {summary.throughput_per_s:.1f} inputs/s",
        f"results: {output}",
    ]
    if summary.server:
        rows = [
            [
                s.model,
                s.inferences,
                s.executions,
                f"{s.average_batch_size:.2f}",
                f"{s.queue_us:.0f}",
                f"{s.compute_infer_us:.0f}",
            ]
            for s in summary.server
        ]
        lines += [
            "",
            "server batching during the job (statistics deltas):",
            table(
                ["model", "inferences", "executions", "avg batch", "queue us", "infer us"],
                rows,
                right=[1, 2, 3, 4, 5],
            ),
        ]
    return "\n".join(lines)
