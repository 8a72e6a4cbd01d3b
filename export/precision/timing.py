"""Steady-state timing of an exported file in the export's own process, as the server will run it.

Every variant that passes its gate is timed (export/precision/selection.py) to choose the one served, and the
benchmark compares the server with these figures; so they must be the file's steady speed at the
server's thread count, whatever ran just before (docs/measurements.md, "Steady-state timing in the
export", has the case that called for it):

- Warm-up is not counted (:func:`warm_up`). A runtime's first calls do one-off work: onnxruntime plans
  its memory for each new shape, and TorchScript's profiling executor records the graph on its first
  call and optimises it on the next ones. The calls go on until their time per item stops falling.
- The threads are the server's (:func:`serving_threads`): the intra-op threads the local server gives each
  instance (tritonrepo/derive.py: the cores divided between the instances), for torch and for every
  onnxruntime session the export opens while they are set (export/precision/onnx_graph.py). A thread count is
  a property of the speed: on cores that other processes also use, each of torch's OpenMP parallel
  regions waits until all its threads are scheduled again, so a file timed on more threads than it is
  served with can read many times slower (or faster) than it serves.
- The figure is the median over the timed calls of each call's items per second (:func:`items_per_second`),
  which a call stalled by another process moves less than a mean would.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

from export.precision import onnx_graph

TIMING_ROUNDS = 3
TIMING_MIN_S = 0.5
# The sizes between batch 1 and the largest are timed for less per round: they shape the batch-cost curve
# the derivation reads (description/batching.py), while the two ends decide most of the choice of variant;
# timed as long as the ends, the curve would more than double the timing of every variant. Each still
# takes the best of the interleaved rounds, as the ends do: a curve's sizes are compared with each other.
CURVE_MIN_S = 0.2
WARMUP_MIN_CALLS = 3  # the profiling executor's recording and optimising calls, and one settled call
WARMUP_MAX_CALLS = 30
SETTLED_CALLS = 2  # calls in a row no longer falling: warm
SETTLED_RATIO = 0.9  # a call is still falling when it takes less than this share of the one before

Runner = Callable[[Any], Any]
Batch = tuple[Any, int]  # (runner input, number of items in it)


@contextmanager
def serving_threads(threads: int | None) -> Iterator[None]:
    """While inside, torch computes on ``threads`` intra-op threads and every onnxruntime session the export
    opens gets as many (one inter-op thread); None leaves both as they are."""
    if threads is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with onnx_graph.intra_op_threads(threads):
            yield
    finally:
        torch.set_num_threads(before)


def _seconds_per_item(runner: Runner, batch: Batch) -> float:
    inputs, count = batch
    started = time.perf_counter()
    runner(inputs)
    return max(time.perf_counter() - started, 1e-9) / count


def warm_up(runner: Runner, batches: list[Batch]) -> int:
    """Call ``runner`` on ``batches`` in turn until warm: at least WARMUP_MIN_CALLS calls, then until
    SETTLED_CALLS calls in a row are no faster per item than SETTLED_RATIO of the call before, at most
    WARMUP_MAX_CALLS; the number of calls made."""
    if not batches:
        raise ValueError("a timing workload needs at least one batch")
    times: list[float] = []
    settled = 0
    while len(times) < WARMUP_MAX_CALLS:
        times.append(_seconds_per_item(runner, batches[len(times) % len(batches)]))
        settled = settled + 1 if len(times) > 1 and times[-1] >= SETTLED_RATIO * times[-2] else 0
        if len(times) >= WARMUP_MIN_CALLS and settled >= SETTLED_CALLS:
            break
    return len(times)


def items_per_second(runner: Runner, batches: list[Batch], *, min_s: float, warm: bool = False) -> float:
    """Items per second of ``runner`` on ``batches`` in turn: the median over calls made for at least
    ``min_s`` (and over a quarter of the batches at least) of each call's items per second. ``warm``: the
    runner has run these batches already (one call before timing); otherwise :func:`warm_up` first."""
    if not batches:
        raise ValueError("a timing workload needs at least one batch")
    index = 1 if warm else warm_up(runner, batches)
    if warm:
        runner(batches[0][0])
    rates: list[float] = []
    started = time.perf_counter()
    while time.perf_counter() - started < min_s or len(rates) < len(batches) // 4 + 1:
        rates.append(1.0 / _seconds_per_item(runner, batches[index % len(batches)]))
        index += 1
    return statistics.median(rates)
