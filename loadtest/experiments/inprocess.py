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

import functools
import logging
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from clients import samples
from loadtest.load import payloads
from loadtest.load.pipelines import (
    EncoderRunner,
    ExportedModel,
    ImagePipeline,
    ImagePreprocessor,
    TextPipeline,
    TextTokenizer,
)

logger = logging.getLogger(__name__)


@dataclass(kw_only=True)
class InProcessPoint:
    """One batch size: ``items`` inputs cut into batches of ``batch_size``, items/s and ms per batch of the
    median round, and each round's items/s."""

    pipeline: str
    model: str
    runtime: str
    batch_size: int
    items: int
    items_per_s: float
    ms_per_batch: float
    rounds: list[float]


BATCH_COST_SIZES = (1, 32)


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


def measure(
    encoder: ExportedModel, *, batch_sizes: Sequence[int], items: int, rounds: int
) -> list[InProcessPoint]:
    """``items`` texts or images through the encoder's whole pipeline in batches of each size."""
    run, inputs = _pipeline(encoder, items)
    for size in batch_sizes:  # warm-up: allocators, and torch.jit's first specialisations
        run(inputs[:size])
    seconds: dict[int, list[float]] = {size: [] for size in batch_sizes}
    for _ in range(rounds):
        for size in batch_sizes:
            started = time.perf_counter()
            for start in range(0, len(inputs), size):
                run(inputs[start : start + size])
            seconds[size].append(time.perf_counter() - started)
    points = []
    for size in batch_sizes:
        median_s = statistics.median(seconds[size])
        batches = -(-len(inputs) // size)
        points.append(
            InProcessPoint(
                pipeline=encoder.pipeline,
                model=encoder.model,
                runtime=encoder.runtime,
                batch_size=size,
                items=len(inputs),
                items_per_s=len(inputs) / median_s,
                ms_per_batch=1000.0 * median_s / batches,
                rounds=[len(inputs) / s for s in seconds[size]],
            )
        )
        logger.info(
            "in-process %s %s b=%d: %.1f items/s",
            encoder.model,
            encoder.runtime,
            size,
            points[-1].items_per_s,
        )
    return points


def _pipeline(encoder: ExportedModel, items: int) -> tuple[Callable[[Sequence[Any]], object], Sequence[Any]]:
    """The encoder's served pipeline and ``items`` real inputs for it."""
    repository, model, runtime, threads = encoder.repository, encoder.model, encoder.runtime, encoder.threads
    if encoder.pipeline == "text":
        text = TextPipeline(repository, encoder_model=model, runtime=runtime, threads=threads)
        return text, samples.shuffled_sentences(items, seed=11)
    image = ImagePipeline(repository, classifier_model=model, runtime=runtime, threads=threads)
    return image, payloads.image_variants(items, seed=11)


def alternating_median_ms(calls: Mapping[int, Callable[[], object]], repeats: int) -> dict[int, float]:
    """Median milliseconds of each call over ``repeats`` rounds, the calls alternating within a round
    (1, 32, 1, 32...) so that a burst of background load hits both sizes alike; one warm-up call each."""
    for call in calls.values():
        call()
    samples_ms: dict[int, list[float]] = {key: [] for key in calls}
    for _ in range(repeats):
        for key, call in calls.items():
            started = time.perf_counter()
            call()
            samples_ms[key].append(1000.0 * (time.perf_counter() - started))
    return {key: statistics.median(values) for key, values in samples_ms.items()}


def batch_cost(encoder: ExportedModel, *, repeats: int) -> BatchCost:
    """Forward pass only: one real input repeated to batch 1 and 32 (same shape), median ms per call."""
    runner = EncoderRunner(encoder.file, runtime=encoder.runtime, threads=encoder.threads)
    if encoder.pipeline == "text":
        tokens = TextTokenizer(encoder.repository)([samples.sentences()[0]])
        inputs = list(tokens.arrays)  # a ragged batch: ids back to back, lengths
    else:
        inputs = [ImagePreprocessor(encoder.repository)([samples.photographs()[0]]).astype(np.float32)]
    repeat = np.tile if encoder.pipeline == "text" else lambda a, n: np.repeat(a, n, axis=0)
    calls = {size: functools.partial(runner, *[repeat(a, size) for a in inputs]) for size in BATCH_COST_SIZES}
    timings = alternating_median_ms(calls, repeats)
    return BatchCost(
        model=encoder.model,
        runtime=encoder.runtime,
        where="in-process",
        ms_batch_1=timings[1],
        ms_batch_32=timings[32],
    )
