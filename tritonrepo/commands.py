"""The conventions every command line of the project follows, in one place.

Each ``--help`` shows every option's default and ends with what each exit code means; the codes are
the same everywhere: 0 the work is done, 1 the work failed (a stage crashed, a tool or the server
failed), 2 a usage error (a bad option or value: argparse's own code).
"""

from __future__ import annotations

import argparse

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Each option's default shown after its help, once: a help that states its default itself ("(default:
    all)", for an option whose default is no value) gets no second one."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if "default" in (action.help or "").lower():
            return action.help
        return super()._get_help_string(action)


def command_parser(prog: str, description: str | None, *, exit_codes: str) -> argparse.ArgumentParser:
    """A parser for ``prog`` whose help shows each default and ends with ``exit codes: <exit_codes>``."""
    return argparse.ArgumentParser(
        prog=prog,
        description=description,
        epilog=f"exit codes: {exit_codes}",
        formatter_class=HelpFormatter,
    )


def subcommand(subparsers: argparse._SubParsersAction, name: str, *, help: str, exit_codes: str):  # noqa: A002
    """A subcommand of a :func:`command_parser`, under the same conventions."""
    return subparsers.add_parser(
        name, help=help, description=help, epilog=f"exit codes: {exit_codes}", formatter_class=HelpFormatter
    )


def positive_int(text: str) -> int:
    """An option's value that must be a whole number of at least 1 (argparse's ``type``: a usage error)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return value
