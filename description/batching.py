"""The dynamic batcher's settings chosen from a measured batch-cost curve.

The export times each served file in process at several batch sizes (``build/precision/<model>.json``,
each candidate's ``items_per_s``). :func:`choose_batching` turns such a curve, the model's max_batch_size
and the latency budget its description states (``dynamic_batching.latency_budget_ms``) into the preferred
batch sizes and the queue delay, each with a one-line reason; ``python -m tritonrepo derive`` writes them
into the derived config.pbtxt beside those reasons, unless a value was stated by hand. A pure function:
no file, no clock, no torch.

- A batch's own compute time is ``b / rate(b)``; only sizes whose batch fits in the budget count.
- The peak is the size of highest throughput among those. Under load Triton's dynamic batcher cuts a batch
  at the largest preferred size, so the peak is the largest preferred size: the batches the curve says are
  worth forming, and no larger.
- A batch pays when the peak serves at least :data:`PAYING_RATIO` times what one item alone does. Where
  it does not, the preferred sizes stay small (:data:`UNPAID_LARGEST_BATCH`), and stop below a size whose
  throughput falls under a share (:data:`UNPAID_LEVEL`) of the best small size's: under load the batches
  form at the largest preferred size, so each of their items would cost more than in a smaller one.
- The queue delay is 0 either way. Under load the requests that queue while an instance computes leave
  together, so the batches form without a wait; a wait holds back only a request that arrives alone.
  Every delay measured in this project lost at 1 in flight and gained nothing at 8 to 64 in flight
  (docs/measurements.md: MobileNetV2 on the CPU, the image service on an H200, the text encoder's
  tuning). A delay stated by hand still wins.
- max_batch_size is the clients' contract (how many items one request may carry), never changed here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

# Rounds of in-process timing on a shared machine differ by up to about a tenth, so a peak that gains less
# than 15% over one item alone is not told apart from a flat curve: such a batch does not pay.
PAYING_RATIO = 1.15
# Where a batch does not pay, batching still shares the server's per-call work (one execute() round trip
# per batch), which a handful of requests already shares out; a larger batch holds every request in it
# for the whole batch's compute and buys nothing more.
UNPAID_LARGEST_BATCH = 8
# Among those small sizes, one whose throughput is at least this share of the best of them counts as level
# with it, and the largest level size caps the batches: it shares the most per-call work, which the curve
# (timed in process) does not hold. A size below it makes each item of its batches cost more: with
# efficientnet_lite0_torchscript's curve on the 2-core CPU (73 items/s at 4, 62 at 8), batches capped at 8
# served 0.93x of batching off at 32 in flight, capped at 4 1.08x (docs/measurements.md).
UNPAID_LEVEL = 0.95
MIN_CURVE_SIZES = 3  # a batch 1, a peak and a size beyond it: fewer cannot show where throughput peaks
NO_WAIT = (
    "no waiting: under load the requests that queue while an instance computes leave together up to the "
    "largest preferred size; a wait only holds back a request that arrives alone (docs/measurements.md)"
)


@dataclass(frozen=True, kw_only=True)
class BatchingChoice:
    """The batcher's settings and, for each number, why."""

    preferred_batch_sizes: tuple[int, ...]
    max_queue_delay_us: int
    max_batch_size: int
    preferred_reason: str
    delay_reason: str
    max_batch_size_reason: str

    def as_dict(self) -> dict:
        return {
            "preferred_batch_sizes": list(self.preferred_batch_sizes),
            "max_queue_delay_us": self.max_queue_delay_us,
            "max_batch_size": self.max_batch_size,
            "reasons": {
                "preferred_batch_sizes": self.preferred_reason,
                "max_queue_delay_us": self.delay_reason,
                "max_batch_size": self.max_batch_size_reason,
            },
        }


def check_curve(curve: Mapping[int, float], max_batch_size: int) -> dict[int, float]:
    """``curve`` by increasing size; ValueError naming what is wrong unless it holds batch 1 and at least
    MIN_CURVE_SIZES positive rates, each at a size from 1 to ``max_batch_size``."""
    rates = dict(sorted((int(size), float(rate)) for size, rate in curve.items()))
    bad = {size: rate for size, rate in rates.items() if not 1 <= size <= max_batch_size or not rate > 0}
    if bad or 1 not in rates or len(rates) < MIN_CURVE_SIZES:
        raise ValueError(
            f"a batch-cost curve needs items/s > 0 at batch 1 and at {MIN_CURVE_SIZES - 1} more sizes up to "
            f"max_batch_size {max_batch_size}; got {rates} (wrong: {bad or 'too few sizes'}); time the "
            "model at more sizes: `python -m export --timing-batches 1,2,4,8,16,32`"
        )
    return rates


def choose_batching(
    curve: Mapping[int, float], *, max_batch_size: int, latency_budget_ms: float
) -> BatchingChoice:
    """The preferred sizes and queue delay that ``curve`` ({batch size: items/s}) calls for within
    ``latency_budget_ms``; max_batch_size stays as it is (see the module's docstring)."""
    if isinstance(latency_budget_ms, bool) or not latency_budget_ms > 0:
        raise ValueError(
            f"latency_budget_ms must be a positive number of milliseconds, got {latency_budget_ms!r}"
        )
    rates = check_curve(curve, max_batch_size)
    compute_ms = {size: 1000.0 * size / rate for size, rate in rates.items()}
    fits = [size for size in rates if compute_ms[size] <= latency_budget_ms]
    if not fits:
        preferred: tuple[int, ...] = (1,)
        delay_us = 0
        preferred_reason = (
            f"one item alone computes in {compute_ms[1]:.1f} ms, over the {latency_budget_ms:g} ms budget: "
            "no batch fits, batches of 1"
        )
        delay_reason = "no waiting: one item alone already exceeds the budget"
    else:
        peak = max(fits, key=lambda size: (rates[size], -size))
        gain = rates[peak] / rates[1]
        if gain < PAYING_RATIO:
            preferred, preferred_reason = _unpaid(rates, fits, peak)
            delay_us, delay_reason = (
                0,
                f"no waiting: a batch does not pay ({gain:.2f}x batch 1's rate at best)",
            )
        else:
            preferred, preferred_reason = _peak_capped(rates, fits, peak, compute_ms[peak], latency_budget_ms)
            delay_us, delay_reason = 0, NO_WAIT
    return BatchingChoice(
        preferred_batch_sizes=preferred,
        max_queue_delay_us=delay_us,
        max_batch_size=max_batch_size,
        preferred_reason=preferred_reason,
        delay_reason=delay_reason,
        max_batch_size_reason=(
            "the clients' contract (the items one request may carry), kept as stated; the preferred sizes "
            "bound the batches"
        ),
    )


def _unpaid(rates: dict[int, float], fits: list[int], peak: int) -> tuple[tuple[int, ...], str]:
    small = [size for size in fits if size <= UNPAID_LARGEST_BATCH]
    best = max(rates[size] for size in small)
    cap = max(size for size in small if rates[size] >= UNPAID_LEVEL * best)
    gain = rates[peak] / rates[1]
    reason = (
        f"a batch does not pay (at best {rates[peak]:.0f} items/s at {peak}, {gain:.2f}x batch 1's "
        f"{rates[1]:.0f}, under {PAYING_RATIO}x): small batches, up to {cap}, share only the per-call work"
    )
    slower = [size for size in small if size > cap]
    if slower:
        reason += (
            f"; a batch of {slower[0]} runs at {rates[slower[0]] / best:.2f}x the best rate up to "
            f"{UNPAID_LARGEST_BATCH} ({best:.0f} items/s), so each of its items would cost more"
        )
    return tuple(size for size in fits if cap / 2 <= size <= cap), reason


def _peak_capped(
    rates: dict[int, float], fits: list[int], peak: int, peak_ms: float, budget_ms: float
) -> tuple[tuple[int, ...], str]:
    beyond = [size for size in rates if size > peak]
    if not beyond:
        why = "the largest size timed"
    elif beyond[0] not in fits:
        why = f"a batch of {beyond[0]} would exceed the budget"
    else:
        why = "throughput falls beyond it"
    reason = (
        f"throughput peaks at {peak} ({rates[peak]:.0f} items/s, {rates[peak] / rates[1]:.2f}x batch 1; the "
        f"batch computes in {peak_ms:.3g} ms of the {budget_ms:g} ms budget; {why}): the largest "
        "preferred size"
    )
    return tuple(size for size in fits if peak / 2 <= size <= peak), reason
