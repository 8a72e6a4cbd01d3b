"""The main job: serve the real models locally, send real requests, show what batching achieved.

    python -m demo            # or: make demo

1. derives build/local_repository from model_repository (the exported models must exist: make export);
2. starts a real tritonserver on free loopback ports;
3. classifies the real photos shipped in scikit-image and embeds a few sentences;
4. sends the same workload (the six photos; realistic mixed-length sentences) one request at a time and
   then with many requests in flight, and prints the throughput of each and the average batch size the
   server formed (from Triton's statistics API).
"""

from __future__ import annotations

import argparse
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import skimage

from clients.sync_client import TritonClient
from samples import shuffled_sentences
from tritonlocal import LocalTritonServer, ServerConfig
from tritonrepo.configs import exported_step, load_repository
from tritonrepo.local import derive_local
from tritonrepo.paths import LOCAL_REPOSITORY, REPOSITORY

IMAGES = ("chelsea.png", "coffee.png", "astronaut.png", "rocket.jpg", "motorcycle_left.png", "horse.png")
SENTENCES = (
    "A cat is sleeping on the warm windowsill.",
    "The kitten naps in the sun by the window.",
    "Quarterly revenue grew by twelve percent despite supply problems.",
    "Wie spät ist es in Zürich?",
    "Triton batches concurrent requests so the accelerator does more work per pass.",
    "Dynamic batching groups requests that arrive close together into one forward pass.",
)


@dataclass(frozen=True, kw_only=True)
class LoadResult:
    label: str
    requests: int
    seconds: float
    batch_size: float

    @property
    def throughput(self) -> float:
        return self.requests / self.seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m demo",
        description=__doc__.splitlines()[0],
        epilog="exit codes: 0 shown, 1 the server or a request failed, 2 a usage error",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--requests", type=int, default=192, help="requests per load phase")
    parser.add_argument("--in-flight", type=int, default=32, help="concurrent requests in the batched phase")
    args = parser.parse_args(argv)

    result = derive_local()
    if result.skipped:
        for name, reason in result.skipped.items():
            print(f"not served: {name}: {reason}")
    print(
        f"serving {len(result.written)} models from {LOCAL_REPOSITORY}: {', '.join(sorted(result.written))}\n"
    )
    with LocalTritonServer(ServerConfig(model_repository=LOCAL_REPOSITORY)) as server:
        print(f"tritonserver 2.51 ready on http://{server.http_url} and grpc {server.grpc_url}\n")
        url = f"http://{server.http_url}"
        images = [Path(skimage.__file__).parent / "data" / name for name in IMAGES]
        show_classifications(url, images)
        show_embeddings(url)
        rows = [
            *compare_batching(url, "image_classifier", images, args, kind="images"),
            *compare_batching(url, "text_embedder", shuffled_sentences(args.requests), args, kind="texts"),
        ]
    print_batching(rows)
    return 0


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


def compare_batching(
    url: str, ensemble: str, items: list, args: argparse.Namespace, *, kind: str
) -> list[LoadResult]:
    model = exported_step(load_repository(REPOSITORY), ensemble)  # whose batches the statistics count
    workload = list(itertools.islice(itertools.cycle(items), args.requests))
    rows = []
    for label, in_flight in (
        ("one request at a time", 1),
        (f"{args.in_flight} requests in flight", args.in_flight),
    ):
        with TritonClient(url, max_in_flight=in_flight) as client:
            call: Callable = client.classify if kind == "images" else client.embed
            call(workload[:in_flight], model=ensemble)  # warm-up, not measured
            before = client.statistics(model)
            start = time.perf_counter()
            call(workload, model=ensemble)
            seconds = time.perf_counter() - start
            delta = client.statistics(model).since(before)
        rows.append(
            LoadResult(
                label=f"{ensemble:<17} {label}",
                requests=len(workload),
                seconds=seconds,
                batch_size=delta.average_batch_size,
            )
        )
    return rows


def print_batching(rows: list[LoadResult]) -> None:
    print("What batching achieved (same requests, same server; batch size from Triton's statistics)")
    print(f"  {'workload':<48} {'requests/s':>10} {'avg batch':>9}")
    for row in rows:
        print(f"  {row.label:<48} {row.throughput:>10.1f} {row.batch_size:>9.2f}")
    for sequential, batched in zip(rows[::2], rows[1::2], strict=True):
        ratio = batched.throughput / sequential.throughput
        print(f"  -> {batched.label.split()[0]}: {ratio:.2f}x the throughput of one request at a time")
    print("\nThe full, repeated measurement with plots: make bench (see docs/benchmarks.md).")


if __name__ == "__main__":
    raise SystemExit(main())
