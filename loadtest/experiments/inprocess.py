"""The in-process limit: the exported models run in this process, no server, on batches of 1..64.

Text: the shuffled corpus in arrival order, cut into consecutive batches of B sentences, each batch
tokenised into one ragged batch (what the encoder receives when B requests share an execution),
encoded and pooled inside the exported graph. Images: distinct photograph variants, B per batch,
preprocessed with the served code, classified, softmax + top-k. Each batch size is measured in
``rounds`` rounds interleaved with the other sizes (this machine is noisy) after one warm-up batch per
size; the median round is reported.

:func:`batch_cost` is experiment 6 in-process: the forward pass alone on the same real input repeated
to a batch of 1 and of 32 (one length, so the batch's shape plays no part), median of ``repeats`` runs.
"""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from clients import samples
from loadtest.load import payloads
from loadtest.load.pipelines import (
    EncoderRunner,
    ImagePipeline,
    ImagePreprocessor,
    TextPipeline,
    TextTokenizer,
    exported_file,
)

logger = logging.getLogger(__name__)


@dataclass(kw_only=True)
class InProcessPoint:
    pipeline: str
    model: str
    runtime: str
    batch_size: int
    items: int
    items_per_s: float
    ms_per_batch: float
    rounds: list[float]


@dataclass(kw_only=True)
class BatchCost:
    model: str
    runtime: str
    where: str  # "in-process" or "served"
    ms_batch_1: float
    ms_batch_32: float

    @property
    def ratio(self) -> float:
        return self.ms_batch_32 / self.ms_batch_1 if self.ms_batch_1 else float("nan")

    @property
    def throughput_gain(self) -> float:
        """Items/s at batch 32 over items/s at batch 1."""
        return 32.0 / self.ratio if self.ratio else float("nan")


def measure_text(
    repository: Path,
    *,
    model: str,
    runtime: str,
    batch_sizes: Sequence[int],
    texts: int,
    rounds: int,
    threads: int,
) -> list[InProcessPoint]:
    pipeline = TextPipeline(repository, encoder_model=model, runtime=runtime, threads=threads)
    corpus = samples.shuffled_sentences(texts, seed=11)
    return _measure("text", model, runtime, pipeline, corpus, batch_sizes, rounds)


def measure_image(
    repository: Path,
    *,
    model: str,
    runtime: str,
    batch_sizes: Sequence[int],
    images: int,
    rounds: int,
    threads: int,
) -> list[InProcessPoint]:
    pipeline = ImagePipeline(repository, classifier_model=model, runtime=runtime, threads=threads)
    return _measure(
        "image", model, runtime, pipeline, payloads.image_variants(images, seed=11), batch_sizes, rounds
    )


def _measure(
    kind: str,
    model: str,
    runtime: str,
    run: Callable[[Sequence], object],
    items: Sequence,
    batch_sizes: Sequence[int],
    rounds: int,
) -> list[InProcessPoint]:
    for size in batch_sizes:  # warm-up: allocators, and torch.jit's first specialisations
        run(items[:size])
    seconds: dict[int, list[float]] = {size: [] for size in batch_sizes}
    for _ in range(rounds):
        for size in batch_sizes:
            started = time.perf_counter()
            for start in range(0, len(items), size):
                run(items[start : start + size])
            seconds[size].append(time.perf_counter() - started)
    points = []
    for size in batch_sizes:
        median_s = statistics.median(seconds[size])
        batches = -(-len(items) // size)
        points.append(
            InProcessPoint(
                pipeline=kind,
                model=model,
                runtime=runtime,
                batch_size=size,
                items=len(items),
                items_per_s=len(items) / median_s,
                ms_per_batch=1000.0 * median_s / batches,
                rounds=[len(items) / s for s in seconds[size]],
            )
        )
        logger.info("in-process %s %s b=%d: %.1f items/s", model, runtime, size, points[-1].items_per_s)
    return points


def batch_cost(
    repository: Path, *, model: str, runtime: str, pipeline: str, repeats: int, threads: int
) -> BatchCost:
    """Forward pass only: one real input repeated to batch 1 and 32 (same shape), median ms per call."""
    runner = EncoderRunner(exported_file(repository, model, runtime), runtime=runtime, threads=threads)
    if pipeline == "text":
        tokens = TextTokenizer(repository)([samples.sentences()[0]])
        inputs = list(tokens.arrays)  # a ragged batch: ids back to back, lengths
    else:
        inputs = [ImagePreprocessor(repository)([samples.photographs()[0]]).astype(np.float32)]
    timings = {}
    for size in (1, 32):
        repeat = np.tile if pipeline == "text" else lambda a, n: np.repeat(a, n, axis=0)
        batch = [repeat(array, size) for array in inputs]
        runner(*batch)  # warm-up
        calls_ms = []
        for _ in range(repeats):
            started = time.perf_counter()
            runner(*batch)
            calls_ms.append(1000.0 * (time.perf_counter() - started))
        timings[size] = statistics.median(calls_ms)
    return BatchCost(
        model=model, runtime=runtime, where="in-process", ms_batch_1=timings[1], ms_batch_32=timings[32]
    )
