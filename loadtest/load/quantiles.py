"""The one quantile of latencies that every load and report states (p50, p95, p99).

``quantile(values, q)`` is the value at index ``int(q * n)`` of the ``n`` values in order (the largest
for q = 1): no interpolation, so every figure is a latency a request really had.
"""

from __future__ import annotations

from collections.abc import Iterable


def quantile(values: Iterable[float], q: float) -> float:
    """The ``q`` quantile (0 to 1) of ``values``, one of them; 0.0 where there are none."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0
