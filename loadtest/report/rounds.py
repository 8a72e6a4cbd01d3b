"""Experiments measured in alternating rounds, side against side: each side's median rate over its rounds
and the ratio of every round both completed (the `central`, `clients` and `minimal` experiments), and the
ratio text of the report.

Ratios and shares are cut, not rounded, to the digits shown, and figures held against an upper bound
raised: no figure reads as reaching a bound it missed.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class Paired:
    """Two sides measured in alternating rounds: each side's median rate over its rounds, and the ratio
    of the two in each round both completed."""

    first_per_s: float | None
    second_per_s: float | None
    round_ratios: tuple[float, ...]

    @property
    def rounds(self) -> int:
        return len(self.round_ratios)

    def range_text(self) -> str:
        if not self.round_ratios:
            return "no complete round"
        return f"{times_text(min(self.round_ratios))} to {times_text(max(self.round_ratios))}"

    def text(self) -> str:
        """The ratio of the medians, with the rounds' range where there was more than one round."""
        ratio = ratio_text(self.first_per_s, self.second_per_s)
        if self.rounds < 2 or ratio == "not measured":
            return ratio
        return f"{ratio} (medians of {self.rounds} rounds; {self.range_text()} by round)"


def paired(first: dict[int, float], second: dict[int, float]) -> Paired:
    """``first`` and ``second``: round -> rate of each side."""
    complete = sorted(set(first) & set(second))
    return Paired(
        first_per_s=statistics.median(first.values()) if first else None,
        second_per_s=statistics.median(second.values()) if second else None,
        round_ratios=tuple(first[r] / second[r] for r in complete if second[r]),
    )


@dataclass(frozen=True, kw_only=True)
class MinimalComparison(Paired):
    """The `minimal` experiment for one service at one concurrency: Triton first, one deployment of the
    service's simplest alternative (``alternative``, as ``workers`` processes) second."""

    service: str
    model: str
    concurrency: int
    alternative: str
    workers: int

    @property
    def triton_per_s(self) -> float | None:
        return self.first_per_s

    @property
    def alternative_per_s(self) -> float | None:
        return self.second_per_s


def minimal_comparisons(results: dict) -> list[MinimalComparison]:
    """Triton against each deployment of each service's simplest alternative, service by service in the
    order measured, per concurrency, fewest workers first (runs from before services were recorded are
    the text service's; from before rounds were, one round; from before worker counts were, one
    process)."""
    runs = results.get("minimal") or []
    comparisons = []
    for service in dict.fromkeys(run_service(m) for m in runs):
        of_service = [m for m in runs if run_service(m) == service]
        model = next((_served_model(m) for m in of_service if _is_triton(m)), "")
        for concurrency in sorted({m["concurrency"] for m in of_service}):
            here = [m for m in of_service if m["concurrency"] == concurrency]
            triton = {m.get("round", 0): m["requests_per_s"] for m in here if _is_triton(m)}
            arms = {m["label"]: m.get("workers", 1) for m in here if not _is_triton(m)}
            for label, workers in sorted(arms.items(), key=lambda arm: arm[1]):
                alone = {m.get("round", 0): m["requests_per_s"] for m in here if m["label"] == label}
                comparisons.append(
                    MinimalComparison(
                        service=service,
                        model=model,
                        concurrency=concurrency,
                        alternative=label,
                        workers=workers,
                        **vars(paired(triton, alone)),
                    )
                )
    return comparisons


def run_service(run: dict) -> str:
    """The service a `minimal` run measured; a run recorded before services were is the text service's."""
    return str(run.get("service", "text"))


def best_alternative(
    comparisons: list[MinimalComparison], service: str, concurrency: int
) -> MinimalComparison | None:
    """The comparison with the faster deployment of ``service``'s alternative at ``concurrency`` (the
    higher median: one process or one worker process per core), the one a target is held to."""
    here = [c for c in comparisons if (c.service, c.concurrency) == (service, concurrency)]
    return max(here, key=lambda c: c.alternative_per_s or 0.0, default=None)


def _served_model(run: dict) -> str:
    """The model in Triton's label, ``Triton (text_embedder)``."""
    label = str(run["label"])
    return label[label.find("(") + 1 : label.rfind(")")] if "(" in label else ""


def _is_triton(run: dict) -> bool:
    return str(run["label"]).startswith("Triton")


def client_comparison(results: dict) -> Paired:
    """The `clients` experiment: the asyncio client (more than one in flight) against the sequential one, by
    round."""
    rates: dict[bool, dict[int, float]] = {True: {}, False: {}}
    for c in results.get("clients") or []:
        if c["wall_s"]:
            rates[c["in_flight"] > 1][c.get("round", 0)] = c["items"] / c["wall_s"]
    return paired(rates[True], rates[False])


def central_rounds(central: dict) -> list[dict]:
    """The `central` experiment's rounds, each {"server": ..., "pool": ...} (a record from before rounds:
    one)."""
    if "rounds" in central:
        return list(central["rounds"])
    return [{"round": 0, "server": central["server"], "pool": central["pool"]}] if central else []


def central_comparison(results: dict) -> Paired:
    """The `central` experiment: the central server's images/s against the processes that each load the
    model."""
    central = results.get("central") or {}
    rounds = central_rounds(central)
    images = central.get("images", 0)
    return paired(
        {i: images / r["server"]["run"]["wall_s"] for i, r in enumerate(rounds)},
        {i: images / r["pool"]["wall_s"] for i, r in enumerate(rounds)},
    )


def ratio_text(numerator: float | None, denominator: float | None) -> str:
    if not numerator or not denominator:
        return "not measured"
    return times_text(numerator / denominator)


def times_text(ratio: float | None) -> str:
    """A ratio as the report prints it, cut to two decimals: ``1.996`` -> ``1.99x``."""
    return f"{down(ratio):.2f}x"


def down(value: float | None, digits: int = 2) -> float:
    """``value`` cut, not rounded, to ``digits`` decimals: a figure held against a lower bound never reads
    as reaching the bound it missed (84.98% would print as 85%, 1.996x as 2.00x)."""
    return math.floor((value or 0.0) * 10**digits + 1e-9) / 10**digits


def up(value: float | None, digits: int = 0) -> float:
    """``value`` raised to ``digits`` decimals, for figures held against an upper bound."""
    return math.ceil((value or 0.0) * 10**digits - 1e-9) / 10**digits


def share_text(share: float | None) -> str:
    """A fraction held against a lower bound, as a percentage with one decimal, cut down."""
    return f"{down(share, 3):.1%}"


def number_text(value: float | None, spec: str = ".2f") -> str:
    """``value`` formatted with ``spec``, or "-" where it was not measured."""
    return format(value, spec) if value is not None else "-"
