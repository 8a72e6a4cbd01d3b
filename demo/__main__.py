"""The main job: serve the real models locally, send real requests, show what batching buys.

    .venv/bin/python -m demo            # or: make demo

1. exports the files the image and text ensembles serve, and nothing else (export/needed.py: the
   EfficientNet-Lite0 and MiniLM ONNX files, each kept when up to date; ``make export`` exports every
   described model), and writes build/demo_repository from model_repository: the two ensembles as
   shipped, each beside a clone with dynamic batching turned off;
2. starts a real tritonserver on free loopback ports;
3. classifies the real photos shipped in scikit-image and embeds a few sentences;
4. sends the same workload (the six photos; realistic mixed-length sentences) one request at a time, then
   with many requests in flight to the clone without batching and to the shipped ensemble, split into
   alternating rounds, and prints the throughput of each and the average batch size the server formed
   (from Triton's statistics API).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

from clients.sync_client import TritonClient
from demo.batching import ENSEMBLES, NOBATCH, build_demo_repository, compare, print_comparison
from export.needed import export_needed, needed_files
from export.progress import ExportProgress
from samples import photograph_paths, shuffled_sentences
from tritonlocal import LocalTritonServer, ServerConfig
from tritonrepo.commands import command_parser
from tritonrepo.configs import load_repository
from tritonrepo.derive import why_files_missing
from tritonrepo.paths import BUILD, REPOSITORY, ROOT
from tritonrepo.progress import Progress

DEMO_REPOSITORY = BUILD / "demo_repository"
SENTENCES = (
    "A cat is sleeping on the warm windowsill.",
    "The kitten naps in the sun by the window.",
    "Quarterly revenue grew by twelve percent despite supply problems.",
    "Wie spät ist es in Zürich?",
    "Triton batches concurrent requests so the accelerator does more work per pass.",
    "Dynamic batching groups requests that arrive close together into one forward pass.",
)


def main(argv: list[str] | None = None) -> int:
    parser = command_parser(
        "python -m demo",
        __doc__.splitlines()[0],
        exit_codes="0 shown, 1 the server or a request failed, 2 a usage error",
    )
    parser.add_argument("--requests", type=int, default=192, help="requests per arm")
    parser.add_argument(
        "--in-flight", type=int, default=32, help="requests in flight with batching off and on"
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=2,
        help="alternating rounds the batching off and on arms send their requests in",
    )
    args = parser.parse_args(argv)
    for name in ("requests", "in_flight", "rounds"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if args.rounds > args.requests:
        parser.error(f"--rounds must be at most --requests ({args.requests}), got {args.rounds}")

    if not exported():
        return 1
    served = build_demo_repository(DEMO_REPOSITORY, cores=os.cpu_count() or 1)
    print(
        f"serving {len(served)} models from {DEMO_REPOSITORY.relative_to(ROOT)}: {' and '.join(ENSEMBLES)} "
        f"with their steps, each beside a clone without dynamic batching (*{NOBATCH})\n"
    )
    with LocalTritonServer(ServerConfig(model_repository=DEMO_REPOSITORY)) as server:
        print(f"tritonserver 2.51 ready on http://{server.http_url} and grpc {server.grpc_url}\n")
        url = f"http://{server.http_url}"
        images = photograph_paths(check_set=True)
        show_classifications(url, images)
        show_embeddings(url)
        print(
            "What batching buys at the same load (one server, the same requests; avg batch: the exported\n"
            "model's inferences per execution, from Triton's statistics; 1-minute load average "
            f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)\n"
        )
        loads: dict[str, tuple[Sequence, str]] = {
            "image_classifier": (images, "the six photographs"),
            "text_embedder": (shuffled_sentences(args.requests), "mixed-length sentences, one per request"),
        }
        for ensemble, (items, what) in loads.items():
            results = compare(
                url, ensemble, items, requests=args.requests, in_flight=args.in_flight, rounds=args.rounds
            )
            print_comparison(ensemble, results, what=f"{what}, {args.requests} requests", rounds=args.rounds)
            print()
    print("The full, repeated measurement with plots: make bench (see docs/benchmarks.md).")
    return 0


def exported() -> bool:
    """Export what the ensembles serve (each file kept when up to date); whether every file they load is
    there, each one that is not named on standard error."""
    failures = export_needed(ENSEMBLES, REPOSITORY, progress=ExportProgress(Progress()))
    for model, why in failures.items():
        print(f"not exported: {model}: {why}", file=sys.stderr)
    entries = load_repository(REPOSITORY)
    missing = {  # a file that failed its export is named once, above
        name: reason
        for name in sorted(needed_files(ENSEMBLES, REPOSITORY) - failures.keys())
        if (reason := why_files_missing(entries[name]))
    }
    for name, reason in missing.items():
        print(f"cannot serve {name}: {reason}", file=sys.stderr)
    return not failures and not missing


def show_classifications(url: str, images: list[Path]) -> None:
    with TritonClient(url) as client:
        results = client.classify(images)
    print("Image classification (image_classifier: decode -> EfficientNet-Lite0 ONNX -> top-5 labels)")
    for path, result in zip(images, results, strict=True):
        top = ", ".join(
            f"{label.split(',')[0]} {score:.2f}"
            for label, score in zip(result.labels[:3], result.scores[:3], strict=True)
        )
        print(f"  {path.name:<22} {top}")
    print()


def show_embeddings(url: str) -> None:
    with TritonClient(url) as client:
        vectors = client.embed(list(SENTENCES))
    similarity = vectors @ vectors.T
    print(
        "Text embeddings (text_embedder: tokenize -> MiniLM-L6 ONNX, ragged batches, pooled), "
        f"{vectors.shape[1]} floats each"
    )
    for i, j in ((0, 1), (0, 2), (4, 5)):
        print(f"  cos({SENTENCES[i][:38]!r:<42}, {SENTENCES[j][:38]!r:<42}) = {similarity[i, j]:.3f}")
    print()


if __name__ == "__main__":
    raise SystemExit(main())
