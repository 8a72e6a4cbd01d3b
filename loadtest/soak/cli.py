"""Command line: ``python -m loadtest.soak --minutes 30`` (what it does: :mod:`loadtest.soak.run`).

Its options are SoakConfig's fields, with SoakConfig's defaults.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys

from loadtest.soak import run
from loadtest.soak.config import SoakConfig
from loadtest.soak.progress import SoakProgress
from tritonlocal import LocalTritonServer, ServerConfig
from tritonlocal.errors import TritonLocalError
from tritonrepo.commands import EXIT_FAILED, EXIT_OK, command_parser
from tritonrepo.errors import RepositoryError
from tritonrepo.local import derive_local
from tritonrepo.paths import LOCAL_REPOSITORY
from tritonrepo.progress import Progress

HELP = {  # the SoakConfig fields that are options, and what each means
    "minutes": "soak duration after warm-up (required)",
    "warmup_minutes": "steady load before the soak; not counted in the verdict",
    "fraction": "share of the calibrated capacity sent during warm-up, soak and faults",
    "sample_s": "seconds between samples of memory, throughput and latency",
    "calibrate_s": "seconds of closed-loop load that measure each pipeline's capacity",
    "in_flight": "requests in flight per pipeline during calibration",
    "output": "folder for samples.csv, soak.png, summary.md and the server's log",
    "fault_minutes": "a fault phase after the soak (a stub killed, the server restarted); 0: none",
}


def build_parser() -> argparse.ArgumentParser:
    parser = command_parser(
        "python -m loadtest.soak",
        (run.__doc__ or "").splitlines()[0],
        exit_codes="0 the soak ran and its summary is written (the verdict is in it), "
        "1 the server could not start or the run failed, 2 a usage error",
    )
    for option in dataclasses.fields(SoakConfig):
        if option.name not in HELP:
            continue
        flag = "--" + option.name.replace("_", "-")
        if option.default is dataclasses.MISSING:
            parser.add_argument(
                flag, type=float, required=True, default=argparse.SUPPRESS, help=HELP[option.name]
            )
        else:
            parser.add_argument(
                flag, type=type(option.default), default=option.default, help=HELP[option.name]
            )
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress: the summary and errors only")
    return parser


def soak_config(args: argparse.Namespace) -> SoakConfig:
    return SoakConfig(
        **{f.name: getattr(args, f.name) for f in dataclasses.fields(SoakConfig) if hasattr(args, f.name)}
    )


def main(argv: list[str] | None = None) -> int:
    from loadtest.soak.report import write_report  # plotting pulls in matplotlib: only when running

    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        config = soak_config(args)
    except ValueError as e:
        parser.error(str(e))
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    config.output.mkdir(parents=True, exist_ok=True)
    derived = derive_local()
    missing = [name for name in run.PIPELINES.values() if name not in derived.written]
    if missing:
        print(
            f"error: {', '.join(missing)} not served ({derived.skipped}); run `python -m export` first",
            file=sys.stderr,
        )
        return EXIT_FAILED
    # A short exit timeout: the fault phase restarts the server, which waits that long for idle clients.
    server_config = ServerConfig(
        model_repository=LOCAL_REPOSITORY, log_path=config.output / "server.log", exit_timeout_s=5
    )
    progress = SoakProgress(Progress(quiet=args.quiet), config)
    try:
        with LocalTritonServer(server_config) as server, progress.running():
            result = run.run_soak(config, server, progress=progress)
    except (RepositoryError, TritonLocalError) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_FAILED
    run.write_csv(result["rows"], config.output / "samples.csv")
    command = "python -m loadtest.soak " + " ".join(sys.argv[1:] if argv is None else argv)
    print(write_report(result, config, command=command))
    return EXIT_OK
