"""The `classext` experiment's summary: each arm's median and range over the rounds, and its ratios to the
shipped arm and to the simplest server, taken round by round inside the run.

A record is one arm's run of one round (:class:`loadtest.experiments.clients.ClientRun` as a dict, with
``images_per_s`` and ``top1``); the first arm of a concurrency's records is the reference ("vs first").
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import numpy as np


@dataclass(kw_only=True, frozen=True)
class Spread:
    median: float
    low: float
    high: float

    @classmethod
    def of(cls, values: list[float]) -> Spread:
        if not values:
            raise ValueError("a spread needs at least one value, got none")
        return cls(median=statistics.median(values), low=min(values), high=max(values))

    def text(self, digits: int = 1, unit: str = "") -> str:
        return f"{self.median:.{digits}f}{unit} ({self.low:.{digits}f}-{self.high:.{digits}f})"


@dataclass(kw_only=True, frozen=True)
class ArmSummary:
    label: str
    in_flight: int
    rounds: int
    images_per_s: Spread
    p99_ms: Spread
    vs_first: Spread  # images/s over the first arm's, round by round
    vs_last: Spread  # images/s over the last arm's (the simplest server), round by round
    failures: int
    top1_agreement: float  # share of requests whose top-1 class equals the first arm's for that request


def p99_ms(latencies_ms: list[float]) -> float:
    return float(np.percentile(latencies_ms, 99)) if latencies_ms else float("nan")


def summarise(records: list[dict]) -> list[ArmSummary]:
    """One summary per (concurrency, arm), in the records' order; only rounds every arm completed."""
    summaries = []
    for in_flight in dict.fromkeys(r["in_flight"] for r in records):
        at = [r for r in records if r["in_flight"] == in_flight and r["round"] >= 0]
        labels = list(dict.fromkeys(r["label"] for r in at))
        by = {(r["label"], r["round"]): r for r in at}
        rounds = sorted(n for n in {r["round"] for r in at} if all((label, n) in by for label in labels))
        if not rounds:
            raise ValueError(
                f"no round at {in_flight} in flight has a run of every arm ({', '.join(labels)})"
            )
        first, last = labels[0], labels[-1]
        for label in labels:
            mine = [by[label, n] for n in rounds]
            summaries.append(
                ArmSummary(
                    label=label,
                    in_flight=in_flight,
                    rounds=len(rounds),
                    images_per_s=Spread.of([r["images_per_s"] for r in mine]),
                    p99_ms=Spread.of([p99_ms(r["latencies_ms"]) for r in mine]),
                    vs_first=Spread.of([_ratio(by[label, n], by[first, n]) for n in rounds]),
                    vs_last=Spread.of([_ratio(by[label, n], by[last, n]) for n in rounds]),
                    failures=sum(r["failures"] for r in mine),
                    top1_agreement=_agreement([by[label, n] for n in rounds], [by[first, n] for n in rounds]),
                )
            )
    return summaries


def _ratio(mine: dict, reference: dict) -> float:
    return mine["images_per_s"] / reference["images_per_s"] if reference["images_per_s"] else float("nan")


def _agreement(mine: list[dict], reference: list[dict]) -> float:
    pairs = [
        (a, b)
        for m, r in zip(mine, reference, strict=True)
        for a, b in zip(m["top1"], r["top1"], strict=False)
    ]
    answered = [(a, b) for a, b in pairs if a >= 0 and b >= 0]
    return sum(a == b for a, b in answered) / len(answered) if answered else float("nan")


def markdown(records: list[dict], *, command: str) -> str:
    """The report: the command, then a table per concurrency."""
    summaries = summarise(records)
    lines = [
        "# Triton's classification extension against the Python top-5 step and the simplest server",
        "",
        f"Command: `{command}`",
        "",
        "Images/s and p99 (ms): median over the rounds (lowest-highest). Ratios: this arm's images/s",
        "over the first arm's (A) and over the last (C), taken round by round; median (lowest-highest).",
        "B's scores are logits, not softmax probabilities. Top-1 as A: requests whose top class is A's.",
        "",
    ]
    for in_flight in dict.fromkeys(s.in_flight for s in summaries):
        lines += [
            f"## {in_flight} in flight",
            "",
            "| arm | rounds | images/s | p99 ms | vs A | vs C | failures | top-1 as A |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for s in (s for s in summaries if s.in_flight == in_flight):
            ratios = f"{s.vs_first.text(2, 'x')} | {s.vs_last.text(2, 'x')}"
            lines.append(
                f"| {s.label} | {s.rounds} | {s.images_per_s.text()} | {s.p99_ms.text()} | {ratios} | "
                f"{s.failures} | {s.top1_agreement:.3f} |"
            )
        lines.append("")
    return "\n".join(lines)
