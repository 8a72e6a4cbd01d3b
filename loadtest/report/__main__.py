"""Re-render a recorded run: ``python -m loadtest.report reports/<run id>`` writes its report.md and plots."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from loadtest.report.markdown import write_report
from tritonrepo.commands import EXIT_OK, command_parser


def build_parser() -> argparse.ArgumentParser:
    parser = command_parser(
        "python -m loadtest.report",
        __doc__,
        exit_codes="0 written, 1 the report could not be rendered, 2 a usage error "
        "(no run's results.json in the folder)",
    )
    parser.add_argument("run", type=Path, help="a run's folder, holding its results.json (reports/<run id>)")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not (args.run / "results.json").is_file():
        parser.error(
            f"{args.run} holds no results.json; give the folder of a run of `python -m loadtest.bench` "
            "(reports/<run id>)"
        )
    print(write_report(args.run))
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
