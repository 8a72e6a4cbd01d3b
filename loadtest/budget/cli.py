"""Where a service's milliseconds go: ``python -m loadtest.budget``.

For each service at each load, the client's mean round trip split into the client and protocol,
Triton's queue, and each ensemble step's input copy, compute (the model's code, the batching and
tensors around it and the Python stub's share where the server's Python models time themselves) and
output copy, from Triton's statistics before and after the same requests
(:mod:`loadtest.experiments.budget`); beside it the same work in one process. Writes
``<output>/<run id>/``: ``budget.md`` (a table and a stacked-bar plot per service),
``budget.json`` (every budget) and ``raw/`` (each run's round trips and statistics, the server's log).

    python -m loadtest.budget                                   # the four services at 1 and 32 in flight
    python -m loadtest.budget --services image_classifier --in-flight 1 --requests 100
    python -m loadtest.budget --url http://127.0.0.1:8000       # a running server
"""

from __future__ import annotations

import argparse
import json
import logging
import shlex
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from clients.endpoint import server_addresses
from loadtest.experiments.budget_runs import Target
from loadtest.experiments.budget_stage import SERVICES, BudgetPlan, run_budgets
from loadtest.load import environment
from loadtest.report.budget_section import section
from tritonlocal.errors import TritonLocalError
from tritonrepo.commands import EXIT_FAILED, EXIT_OK, EXIT_USAGE, command_parser
from tritonrepo.errors import RepositoryError
from tritonrepo.paths import BUILD, REPORTS, REPOSITORY, ROOT

logger = logging.getLogger(__name__)
PLAN = BudgetPlan()


def build_parser() -> argparse.ArgumentParser:
    parser = command_parser(
        "python -m loadtest.budget",
        (__doc__ or "").splitlines()[0],
        exit_codes="0 every budget measured and written (whether each adds up is in the report), 1 the "
        "server could not start or a run failed, 2 a usage error",
    )
    parser.add_argument("--services", default=",".join(SERVICES), help="comma-separated served models")
    parser.add_argument(
        "--in-flight", default=",".join(map(str, PLAN.in_flight)), help="comma-separated requests in flight"
    )
    parser.add_argument("--requests", type=int, default=PLAN.requests, help="requests measured per load")
    parser.add_argument(
        "--warmup", type=int, default=None, help="requests sent before each load; None: 2 x in flight, >= 8"
    )
    parser.add_argument("--duration-s", type=float, default=PLAN.duration_s, help="the most one load runs")
    parser.add_argument("--protocol", choices=("grpc", "http"), default=PLAN.protocol)
    parser.add_argument(
        "--inprocess-repeats",
        type=int,
        default=PLAN.inprocess_repeats,
        help="calls of the in-process pipeline per load (median); 0: not measured",
    )
    parser.add_argument(
        "--url", default=None, help="a running server (http://HOST:PORT); None: start the local one"
    )
    parser.add_argument("--grpc-url", default=None, help="with --url: HOST:PORT; None: its host, port 8001")
    parser.add_argument("--output", type=Path, default=REPORTS, help="the folder the run's folder goes in")
    parser.add_argument("--run-id", default=None, help="None: the start time, then -budget")
    parser.add_argument(
        "--note", default="", help="a line for the report's header (e.g. the machine's state)"
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log each run's figures")
    return parser


def plan_of(args: argparse.Namespace) -> BudgetPlan:
    """The options as a plan; ValueError naming a bad value."""
    try:
        in_flight = tuple(int(n) for n in args.in_flight.split(",") if n)
    except ValueError as e:
        raise ValueError(
            f"--in-flight takes comma-separated whole numbers, e.g. 1,32; got {args.in_flight!r}"
        ) from e
    return BudgetPlan(
        services=tuple(s for s in args.services.split(",") if s),
        in_flight=in_flight,
        requests=args.requests,
        warmup=args.warmup,
        duration_s=args.duration_s,
        protocol=args.protocol,
        inprocess_repeats=args.inprocess_repeats,
    )


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    try:
        plan = plan_of(args)
        target = _target(args)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    run_id = args.run_id or datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ-budget")
    folder = args.output / run_id
    header = _header(argv, args.note, target)
    started = time.monotonic()
    try:
        budgets = run_budgets(
            plan, repository=REPOSITORY, work=BUILD / "budget" / run_id, raw=folder / "raw", target=target
        )
    except (RepositoryError, TritonLocalError, OSError, ValueError) as e:
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        return EXIT_FAILED
    header["duration_s"] = round(time.monotonic() - started, 1)
    (folder / "budget.json").write_text(
        json.dumps({**header, "budgets": [b.to_dict() for b in budgets]}, indent=1)
    )
    report = folder / "budget.md"
    report.write_text(_title(header) + "\n\n" + section(budgets, folder) + "\n")
    print(f"report: {report}")
    return EXIT_OK


def _target(args: argparse.Namespace) -> Target | None:
    if args.url is None:
        if args.grpc_url:
            raise ValueError("--grpc-url goes with --url")
        return None
    http, grpc = server_addresses(args.url, args.grpc_url)
    return Target(http_url=http, grpc_url=grpc)


def _header(argv: list[str] | None, note: str, target: Target | None) -> dict:
    arguments = sys.argv[1:] if argv is None else argv
    return {
        "command": shlex.join(["python", "-m", "loadtest.budget", *arguments]),
        "started_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "server": f"the running server at {target.http_url}"
        if target
        else "the local tritonserver (started here)",
        "note": note,
        "machine": environment.machine(),
        "load_average_start": environment.load_average(),
        "git": environment.git_commit(ROOT),
    }


def _title(header: dict) -> str:
    machine = header["machine"]
    note = f"\n\n> {header['note']}" if header["note"] else ""
    return (
        f"# Time budget\n\n`{header['command']}`, started {header['started_utc']}, took "
        f"{header.get('duration_s', 0) / 60:.1f} min against {header['server']}. Machine: "
        f"{machine.get('cpu_model')}, {machine.get('logical_cores')} logical cores; load average (1, 5, 15 "
        f"min) at the start {header['load_average_start']}; commit {header['git'].get('commit', '?')}.{note}"
    )
