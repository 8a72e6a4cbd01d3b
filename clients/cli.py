"""Command line for people and scripts: ``python -m clients COMMAND``.

    python -m clients health
    python -m clients models
    python -m clients classify cat.jpg dog.png --top-k 3
    python -m clients embed "a sentence" "another one"      (or --file lines.txt)
    python -m clients stats [MODEL]
    python -m clients infer image_classifier --input IMAGE_BYTES=@cat.png   (any model: clients/infer.py)
    python -m clients --url grpc://127.0.0.1:8001 --json stats image_preprocess

Exit codes: 0 success; 1 the server answered with an error (bad input, unknown model, timeout...) or
the server is not ready; 2 usage error (bad arguments, a missing or malformed input file); 3 the server
cannot be reached; 4 the model cannot take the request now: its queue is full or it is restarting or
not ready (the server's words are printed; retry later).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from clients import infer, tables
from clients.errors import ClientError, ModelRestartingError, ServerOverloadedError, ServerUnavailableError
from clients.options import DEFAULT_CLASSIFIER, DEFAULT_EMBEDDER
from clients.retry import RetryPolicy
from clients.sync_client import TritonClient
from tritonrepo.access import ADMIN_HEADER

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNREACHABLE, EXIT_BUSY = 0, 1, 2, 3, 4
EXIT_CODES_HELP = (
    "exit codes: 0 ok, 1 request or server error, 2 usage error, 3 server unreachable, 4 the model is "
    "overloaded (queue full) or restarting: retry later"
)
DEFAULT_URL = "http://127.0.0.1:8000"


class UsageError(Exception):
    """Bad arguments found after parsing (a missing file, no texts); exit code 2."""


# The exit code of each failure the commands report, the most specific first.
EXIT_CODES: tuple[tuple[type[Exception], int], ...] = (
    (UsageError, EXIT_USAGE),
    (ValueError, EXIT_USAGE),
    (ServerOverloadedError, EXIT_BUSY),
    (ModelRestartingError, EXIT_BUSY),
    (ServerUnavailableError, EXIT_UNREACHABLE),
    (ClientError, EXIT_FAILED),
)
FAILURES = tuple(kind for kind, _ in EXIT_CODES)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(message)s"
    )
    try:
        with make_client(args) as client:
            return int(args.handler(client, args))
    except FAILURES as e:
        return report_failure(e, args.url)


def report_failure(error: Exception, url: str) -> int:
    """Print ``error`` as ``error: ...`` on stderr and return its exit code (the first of EXIT_CODES)."""
    code, message = exit_code(error), str(error)
    tries = f"{error.attempts} attempt(s)" if isinstance(error, ClientError) else ""
    if code == EXIT_BUSY:
        message = f"the model cannot take the request now, retry later ({tries}); the server said: {error}"
    elif code == EXIT_UNREACHABLE:
        message = f"server {url} unreachable after {tries}: {error}"
    print(f"error: {message}", file=sys.stderr)
    return code


def exit_code(error: Exception) -> int:
    """The exit code of ``error``: the first of EXIT_CODES it is an instance of."""
    return next(code for kind, code in EXIT_CODES if isinstance(error, kind))


def make_client(args: argparse.Namespace) -> TritonClient:
    headers = admin_headers_from_environment()
    headers.update(parse_header(h) for h in args.header)
    return TritonClient(
        args.url,
        protocol=args.protocol,
        timeout_s=args.timeout_s,
        headers=headers,
        retry=RetryPolicy(max_attempts=args.attempts),
        use_shared_memory=args.shared_memory,
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m clients",
        description="Talk to a Triton server.",
        epilog=EXIT_CODES_HELP,
    )
    _add_common(parser, defaults=True)
    common = argparse.ArgumentParser(add_help=False)
    _add_common(common, defaults=False)  # the same options after the command, e.g. `stats --json`
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    classify = sub.add_parser(
        "classify", parents=[common], epilog=EXIT_CODES_HELP, help="top classes of images"
    )
    classify.add_argument("images", nargs="+", type=Path, metavar="IMAGE", help="image files to classify")
    classify.add_argument(
        "--model", default=DEFAULT_CLASSIFIER, help="the classifier to call (default: %(default)s)"
    )
    classify.add_argument(
        "--top-k", type=int, default=None, help="classes per image (default: every class the model returns)"
    )
    classify.add_argument("--batch", action="store_true", help="one batched request instead of one per image")
    classify.set_defaults(handler=_classify)

    embed = sub.add_parser(
        "embed", parents=[common], epilog=EXIT_CODES_HELP, help="sentence embeddings of texts"
    )
    embed.add_argument("texts", nargs="*", metavar="TEXT", help="texts to embed (and/or --file)")
    embed.add_argument(
        "--file", type=Path, help="a file of texts, one per line, blank lines skipped (default: none)"
    )
    embed.add_argument(
        "--model", default=DEFAULT_EMBEDDER, help="the embedder to call (default: %(default)s)"
    )
    embed.add_argument("--batch", action="store_true", help="one batched request instead of one per text")
    embed.set_defaults(handler=_embed)

    sub.add_parser(
        "health", parents=[common], epilog=EXIT_CODES_HELP, help="is the server live and ready"
    ).set_defaults(handler=_health)
    sub.add_parser(
        "models", parents=[common], epilog=EXIT_CODES_HELP, help="the repository index"
    ).set_defaults(handler=_models)
    stats = sub.add_parser(
        "stats", parents=[common], epilog=EXIT_CODES_HELP, help="per-model requests, batching and timing"
    )
    stats.add_argument("model", nargs="?", help="one model (default: every model)")
    stats.set_defaults(handler=_stats)
    infer.add_command(sub, common, epilog=EXIT_CODES_HELP)
    return parser


def _add_common(parser: argparse.ArgumentParser, *, defaults: bool) -> None:
    def default(value: Any) -> Any:
        return value if defaults else argparse.SUPPRESS

    parser.add_argument(
        "--url",
        default=default(os.environ.get("TRITON_URL", DEFAULT_URL)),
        help=f"http://host:port or grpc://host:port (default: $TRITON_URL or {DEFAULT_URL})",
    )
    parser.add_argument(
        "--protocol",
        choices=["http", "grpc"],
        default=default(None),
        help="for a --url without scheme (default: http)",
    )
    parser.add_argument("--timeout-s", type=float, default=default(30.0), help="per call (default: 30)")
    parser.add_argument(
        "--attempts", type=int, default=default(3), help="tries per call for retryable failures (default: 3)"
    )
    parser.add_argument(
        "--header",
        action="append",
        default=default([]),
        metavar="KEY=VALUE",
        help=f"extra header on every call, e.g. {ADMIN_HEADER}=... (repeatable; "
        "$TRITON_ADMIN_KEY sets that one; default: none)",
    )
    parser.add_argument(
        "--shared-memory",
        action="store_true",
        default=default(False),
        help="pass tensors through system shared memory (same host only)",
    )
    parser.add_argument("--json", action="store_true", default=default(False), help="JSON output for scripts")
    parser.add_argument(
        "-v", "--verbose", action="store_true", default=default(False), help="log retries and fallbacks too"
    )


def _classify(client: TritonClient, args: argparse.Namespace) -> int:
    missing = [str(p) for p in args.images if not p.is_file()]
    if missing:
        raise UsageError(f"no such image file: {', '.join(missing)}")
    results = client.classify(
        args.images, args.model, top_k=args.top_k, per_request=not args.batch, errors="return"
    )
    names = [str(p) for p in args.images]
    records = [
        {"input": name, **_result(r, lambda c: c.to_dict())} for name, r in zip(names, results, strict=True)
    ]
    _emit(args, records, lambda: tables.classifications(names, results))
    return _status(results)


def _embed(client: TritonClient, args: argparse.Namespace) -> int:
    texts = list(args.texts)
    if args.file is not None:
        try:
            texts += [line for line in args.file.read_text(encoding="utf-8").splitlines() if line.strip()]
        except OSError as e:
            raise UsageError(f"cannot read --file {args.file}: {e.strerror or e}") from e
    if not texts:
        raise UsageError("give texts as arguments or --file lines.txt")
    results = client.embed(texts, args.model, per_request=not args.batch, errors="return")
    records = [
        {"input": t, **_result(r, lambda v: {"embedding": [float(x) for x in v]})}
        for t, r in zip(texts, results, strict=True)
    ]
    _emit(args, records, lambda: tables.embeddings(texts, results))
    return _status(results)


def _health(client: TritonClient, args: argparse.Namespace) -> int:
    try:
        health = client.health()
    except ServerUnavailableError as e:
        reason = str(e)
        _emit(
            args,
            {"url": client.endpoint.url, "live": False, "ready": False, "error": reason},
            lambda: f"{client.endpoint.url}: unreachable ({reason})",
        )
        return EXIT_UNREACHABLE
    _emit(
        args,
        {"url": client.endpoint.url, "live": health.live, "ready": health.ready},
        lambda: (
            f"{client.endpoint.url}: {'live' if health.live else 'not live'}, "
            f"{'ready' if health.ready else 'not ready'}"
        ),
    )
    return EXIT_OK if health.live and health.ready else EXIT_FAILED


def _models(client: TritonClient, args: argparse.Namespace) -> int:
    states = client.models()
    _emit(args, [vars(s) | {"ready": s.ready} for s in states], lambda: tables.model_states(states))
    return EXIT_OK


def _stats(client: TritonClient, args: argparse.Namespace) -> int:
    stats = [client.statistics(args.model)] if args.model else client.all_statistics()
    _emit(args, [s.to_dict() for s in stats], lambda: tables.statistics(stats))
    return EXIT_OK


def _emit(args: argparse.Namespace, data: Any, text: Callable[[], str]) -> None:
    print(json.dumps(data, indent=2) if args.json else text())


def _result(result: Any, encode: Callable[[Any], dict[str, Any]]) -> dict[str, Any]:
    return {"error": result.to_dict()} if isinstance(result, ClientError) else encode(result)


def _status(results: Sequence[Any]) -> int:
    """Of several inputs' results: 3 when the server could not be reached for one, else 4 when the model
    could not take one now, else 1 when one failed, else 0."""
    codes = {exit_code(r) for r in results if isinstance(r, ClientError)}
    return next((code for code in (EXIT_UNREACHABLE, EXIT_BUSY, EXIT_FAILED) if code in codes), EXIT_OK)


def admin_headers_from_environment() -> dict[str, str]:
    """``$TRITON_ADMIN_KEY`` as the restricted-API header (`tritonlocal serve` prints the key)."""
    key = os.environ.get("TRITON_ADMIN_KEY", "").strip()
    return {ADMIN_HEADER: key} if key else {}


def parse_header(text: str) -> tuple[str, str]:
    """One ``--header KEY=VALUE`` as (key, value)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise UsageError(f"--header must be KEY=VALUE, got {text!r}")
    return key.strip(), value
