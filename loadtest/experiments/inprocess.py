"""The in-process limit: the exported models run in this process, no server, on batches of 1..64.

Text: the shuffled corpus in arrival order (and, as the best case, sorted by length), cut into
consecutive batches of B sentences, each batch tokenised into one ragged batch (what the encoder
receives when B requests share an execution), encoded and pooled inside the exported graph. A third
text order repeats one of the sentences of their mean token count, so that every batch is of one
length: what batching buys the file when nothing is ragged, the control for the two others. Images:
distinct photograph variants, B per batch, preprocessed with the served code, classified, softmax +
top-k. Two layouts (:class:`Arm`): one pipeline using every core's thread, and one single-thread
pipeline per core taking batches from one queue, as the local configs run one instance per core. Each
arm and batch size is measured in ``rounds`` rounds interleaved with the others (this machine is noisy)
after one warm-up batch per size; the median round is reported.

:func:`batch_cost` is the `batchcost` experiment in-process: the forward pass alone on a batch of 1 and of 32
of one shape (corpus sentences of its most common length; a photograph repeated), median of ``repeats`` runs.
"""

from __future__ import annotations

import functools
import logging
import statistics
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

import samples
from loadtest.baselines.pipelines import ExportedEncoder, ExportedModel, ImagePipeline, TextPipeline
from loadtest.load import payloads
from loadtest.load.preprocessing import ImagePreprocessor, TextTokenizer

logger = logging.getLogger(__name__)


ARRIVAL, LENGTH_SORTED, ONE_LENGTH = "arrival", "length-sorted", "one length"
TEXT_ORDERS = (LENGTH_SORTED, ONE_LENGTH)


@dataclass(kw_only=True)
class InProcessPoint:
    """One arm and batch size: ``items`` inputs cut into batches of ``batch_size``, items/s and ms per
    batch of the median round, and each round's items/s."""

    pipeline: str
    model: str
    runtime: str
    layout: str  # "1 x 2 threads": one pipeline with every thread; "2 x 1 thread": one per core, as served
    order: str  # "arrival", or for text "length-sorted" or "one length" (a sentence of mean length repeated)
    batch_size: int
    items: int
    items_per_s: float
    ms_per_batch: float
    rounds: list[float]


@dataclass(frozen=True)
class Arm:
    """How the in-process limit runs: ``workers`` pipelines of ``threads`` threads each take batches
    from one queue; the inputs in arrival order or, for text, sorted by length first, or every one the
    one sentence of their mean length."""

    workers: int
    threads: int
    order: str = ARRIVAL

    @property
    def layout(self) -> str:
        return f"{self.workers} x {self.threads} thread{'s' if self.threads > 1 else ''}"


def arms_for(pipeline: str, cores: int) -> list[Arm]:
    """One pipeline with every core's thread, and one single-thread pipeline per core (the local configs'
    layout: one instance per core); text also length-sorted in the served layout, the best case, and in
    one length, the control."""
    arms = [Arm(workers=1, threads=cores)]
    if cores > 1:
        arms.append(Arm(workers=cores, threads=1))
    if pipeline == "text":
        arms.extend(replace(arms[-1], order=order) for order in (LENGTH_SORTED, ONE_LENGTH))
    return arms


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
    encoder: ExportedModel, *, batch_sizes: Sequence[int], items: int, rounds: int, arms: Sequence[Arm]
) -> list[InProcessPoint]:
    """``items`` texts or images through the encoder's whole pipeline in batches of each size, for each
    arm; every arm and size is measured once per round, interleaved."""
    inputs = _inputs(encoder, items)
    runners = {arm: _runners(encoder, arm) for arm in arms}
    arranged = {arm: ordered(encoder, inputs, arm.order) for arm in arms}
    cells = [(arm, size) for arm in arms for size in batch_sizes]
    with ThreadPoolExecutor(max_workers=max(arm.workers for arm in arms)) as pool:

        def run(arm: Arm, size: int) -> float:
            batches = [arranged[arm][i : i + size] for i in range(0, len(inputs), size)]
            started = time.perf_counter()
            run_batches(runners[arm], batches, pool)
            return time.perf_counter() - started

        for arm, size in cells:  # warm-up: allocators, and torch.jit's first specialisations
            for runner in runners[arm]:
                runner(arranged[arm][:size])
        seconds: dict[tuple[Arm, int], list[float]] = {cell: [] for cell in cells}
        for _ in range(rounds):
            for cell in cells:
                seconds[cell].append(run(*cell))
    points = []
    for (arm, size), measured in seconds.items():
        median_s = statistics.median(measured)
        points.append(
            InProcessPoint(
                pipeline=encoder.pipeline,
                model=encoder.model,
                runtime=encoder.runtime,
                layout=arm.layout,
                order=arm.order,
                batch_size=size,
                items=len(inputs),
                items_per_s=len(inputs) / median_s,
                ms_per_batch=1000.0 * median_s / -(-len(inputs) // size),
                rounds=[len(inputs) / s for s in measured],
            )
        )
        logger.info(
            "in-process %s %s %s %s b=%d: %.1f items/s",
            encoder.model,
            encoder.runtime,
            arm.layout,
            arm.order,
            size,
            points[-1].items_per_s,
        )
    return points


def run_batches(
    runners: Sequence[Callable[[Sequence[Any]], object]], batches: Sequence[Sequence[Any]], pool: Executor
) -> None:
    """Every batch through one of ``runners``: in turn by a lone runner, else each runner (on ``pool``)
    takes the next batch from one queue as soon as it is free, as model instances take executions."""
    if len(runners) == 1:
        for batch in batches:
            runners[0](batch)
        return
    queue = iter(batches)  # next() on a list iterator is atomic under the GIL

    def drain(runner: Callable[[Sequence[Any]], object]) -> None:
        for batch in queue:
            runner(batch)

    list(pool.map(drain, runners))


def _runners(encoder: ExportedModel, arm: Arm) -> list[Callable[[Sequence[Any]], object]]:
    """One pipeline per worker, each with its own runtime session of ``arm.threads`` threads."""

    def make() -> Callable[[Sequence[Any]], object]:
        repository, model, runtime = encoder.repository, encoder.model, encoder.runtime
        if encoder.pipeline == "text":
            return TextPipeline(repository, encoder_model=model, runtime=runtime, threads=arm.threads)
        return ImagePipeline(repository, classifier_model=model, runtime=runtime, threads=arm.threads)

    return [make() for _ in range(arm.workers)]


def _inputs(encoder: ExportedModel, items: int) -> list[Any]:
    if encoder.pipeline == "text":
        return samples.shuffled_sentences(items, seed=11)
    return payloads.image_variants(items, seed=11)


def ordered(encoder: ExportedModel, inputs: list[Any], order: str) -> list[Any]:
    """``inputs`` in the arm's order: as they came, by token count, or a mean-length sentence repeated."""
    if order == ARRIVAL:
        return inputs
    if order not in TEXT_ORDERS or encoder.pipeline != "text":
        raise ValueError(f"order {order!r} is not one of {ARRIVAL}, {', '.join(TEXT_ORDERS)} (text)")
    lengths = TextTokenizer(encoder.repository).lengths(inputs)
    if order == ONE_LENGTH:  # as many tokens per sentence as the traffic has on average
        mean = sum(lengths) / len(lengths)
        nearest = min(range(len(inputs)), key=lambda i: abs(lengths[i] - mean))
        return [inputs[nearest]] * len(inputs)
    return [text for _, text in sorted(zip(lengths, inputs, strict=True), key=lambda pair: pair[0])]


def alternating_median_ms(
    calls: Mapping[int, Callable[[], object]], repeats: int, clock: Callable[[], float] = time.perf_counter
) -> dict[int, float]:
    """Median milliseconds of each call over ``repeats`` rounds, the calls alternating within a round
    (1, 32, 1, 32...) so that a burst of background load hits both sizes alike; one warm-up call each.
    ``clock``: seconds, monotonic."""
    for call in calls.values():
        call()
    samples_ms: dict[int, list[float]] = {key: [] for key in calls}
    for _ in range(repeats):
        for key, call in calls.items():
            started = clock()
            call()
            samples_ms[key].append(1000.0 * (clock() - started))
    return {key: statistics.median(values) for key, values in samples_ms.items()}


def same_length_texts(repository: Path, count: int = max(BATCH_COST_SIZES)) -> list[str]:
    """``count`` corpus sentences of its most common token count (distinct while there are enough), so
    that a batch of them has one shape: the `batchcost` experiment's text, in-process and served alike."""
    texts = samples.sentences()
    lengths = TextTokenizer(repository).lengths(texts)
    common = Counter(lengths).most_common(1)[0][0]
    same = [text for text, length in zip(texts, lengths, strict=True) if length == common]
    return [same[i % len(same)] for i in range(count)]


def batch_cost(encoder: ExportedModel, *, repeats: int) -> BatchCost:
    """Forward pass only: a batch of 1 and of 32 of one shape (text: sentences of the corpus's most common
    length; images: one photograph repeated), median ms per call."""
    runner = ExportedEncoder(encoder.file, runtime=encoder.runtime, threads=encoder.threads)
    batches: dict[int, tuple[np.ndarray, ...]]
    if encoder.pipeline == "text":
        tokenize = TextTokenizer(encoder.repository)
        texts = same_length_texts(encoder.repository)
        batches = {size: tokenize(texts[:size]).arrays for size in BATCH_COST_SIZES}  # ids, lengths
    else:
        image = ImagePreprocessor(encoder.repository)([samples.photographs()[0]]).astype(np.float32)
        batches = {size: (np.repeat(image, size, axis=0),) for size in BATCH_COST_SIZES}
    calls = {size: functools.partial(runner, *arrays) for size, arrays in batches.items()}
    timings = alternating_median_ms(calls, repeats)
    return BatchCost(
        model=encoder.model,
        runtime=encoder.runtime,
        where="in-process",
        ms_batch_1=timings[1],
        ms_batch_32=timings[32],
    )
