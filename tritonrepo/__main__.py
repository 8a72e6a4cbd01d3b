"""Command line of the repository toolkit: the repositories derived from model_repository/.

python -m tritonrepo derive              # -> build/local_repository, for the pip wheel's tritonserver
python -m tritonrepo cpu-copy            # -> build/cpu_repository, for NVIDIA's container on a CPU host
python -m tritonrepo check model_repository  # each config against its files, no server (exit 1: errors)

Exit codes: 0 done, 1 the repository is malformed or a file is missing, 2 a usage error.
``variant --kind cpu``, the CPU copy's former name, is refused with the new one (exit 2).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from tritonrepo.commands import EXIT_FAILED, EXIT_OK, EXIT_USAGE, command_parser, positive_int, subcommand
from tritonrepo.container_cpu import write_cpu_copy
from tritonrepo.contract import check_repository
from tritonrepo.contract.release_notes import pinned_tag
from tritonrepo.derive import derive_repository, gpu_is_available
from tritonrepo.errors import RepositoryError
from tritonrepo.paths import CPU_REPOSITORY, LOCAL_REPOSITORY, PRECISION_RECORDS, REPOSITORY

EXIT_CODES = "0 done, 1 the repository is malformed or a file is missing, 2 a usage error"
# The CPU copy's former command: refused with a pointer to the new one for one release.
FORMER_CPU_COPY = "variant"
CHECK_EXIT_CODES = (
    "0 no errors (warnings and notes may be printed), 1 errors found or no repository, 2 a usage error"
)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == [FORMER_CPU_COPY]:
        print(
            "error: `python -m tritonrepo variant --kind cpu` is now `python -m tritonrepo cpu-copy` "
            "(the same --source, --target and --cores; no --kind: the copy is for a CPU host); run that",
            file=sys.stderr,
        )
        return EXIT_USAGE
    parser = _parser()
    args = parser.parse_args(argv)
    if getattr(args, "cores", 0) < 0:
        parser.error(f"--cores must be 0 (this machine's) or a positive count, got {args.cores}")
    try:
        return int(args.handler(args))
    except RepositoryError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_FAILED


def _parser() -> argparse.ArgumentParser:
    parser = command_parser(
        "python -m tritonrepo",
        "Write the repositories derived from the deployable one.",
        exit_codes=EXIT_CODES,
    )
    sub = parser.add_subparsers(required=True)
    derive = _derived_command(
        sub,
        "derive",
        "write the local repository (Python-backend runners) for the pip wheel's tritonserver",
        target=LOCAL_REPOSITORY,
        handler=_derive,
    )
    derive.add_argument(
        "--threads",
        type=positive_int,
        default=None,
        help="intra-op threads per model instance (default: an adopted tuning's, else the cores divided "
        "between the instances)",
    )
    derive.add_argument(
        "--records",
        type=Path,
        default=PRECISION_RECORDS,
        help="the export's records, whose batching chosen from each measured curve is served where no value "
        "is stated by hand",
    )
    cpu_copy = _derived_command(
        sub,
        "cpu-copy",
        "copy the deployable repository for NVIDIA's container on a host without a GPU (native "
        "backends on KIND_CPU)",
        target=CPU_REPOSITORY,
        handler=_cpu_copy,
    )
    cpu_copy.add_argument(
        "--cores",
        type=int,
        default=0,
        help="CPU cores the server will have, divided between each native model's instances "
        "(0: this machine's)",
    )
    check = subcommand(
        sub,
        "check",
        help="check each config against its exported files and the models it names, offline (no server)",
        exit_codes=CHECK_EXIT_CODES,
    )
    check.add_argument("repository", type=Path, nargs="?", default=REPOSITORY, help="the repository to check")
    check.add_argument(
        "--triton",
        default=pinned_tag(),
        help="the Triton container release (a tag as deploy/versions.env's TRITON_TAG) that will serve it, "
        "for its release notes",
    )
    check.set_defaults(handler=_check)
    return parser


def _derived_command(
    sub: argparse._SubParsersAction,
    name: str,
    summary: str,
    *,
    target: Path,
    handler: Callable[[argparse.Namespace], int],
) -> argparse.ArgumentParser:
    """A subcommand that writes a repository derived from --source (the deployable one) into --target."""
    command = subcommand(sub, name, help=summary, exit_codes=EXIT_CODES)
    command.add_argument("--source", type=Path, default=REPOSITORY, help="the deployable repository")
    command.add_argument("--target", type=Path, default=target, help="where to write it")
    command.set_defaults(handler=handler)
    return command


def _derive(args: argparse.Namespace) -> int:
    result = derive_repository(
        args.source,
        args.target,
        gpu_available=gpu_is_available(),
        intra_op_threads=args.threads,
        records=args.records,
    )
    print(f"wrote {args.target} with {len(result.written)} models: {', '.join(result.written)}")
    for name, reason in result.skipped.items():
        print(f"skipped {name}: {reason}")
    return EXIT_OK


def _cpu_copy(args: argparse.Namespace) -> int:
    try:
        result = write_cpu_copy(args.source, args.target, cores=args.cores or None)
    except ValueError as e:  # the target is the source
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    moved = ", ".join(result.moved_to_cpu) or "none"
    print(f"wrote {args.target} with {len(result.written)} models; moved to the CPU: {moved}")
    return EXIT_OK


def _check(args: argparse.Namespace) -> int:
    try:
        report = check_repository(args.repository, triton=args.triton)
    except ValueError as e:  # a --triton that is not a release
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    for finding in report.findings:
        print(finding.line())
    counts = ", ".join(f"{report.count(s)} {s}s" for s in ("error", "warning", "note"))
    print(f"checked {len(report.models)} models in {args.repository}: {counts}")
    return EXIT_FAILED if report.count("error") else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
