"""Read Model Analyzer's results and choose each model's winner under the latency budget.

Model Analyzer writes one row per measurement to ``results/metrics-model-inference.csv`` (its
``Satisfies Constraints`` column applies the p99 budget) and each variant's config.pbtxt to its output
model repository; the settings of a row are read from that config with Triton's schema, never from the
CSV's display strings. The winner is the measurement with the highest throughput among those within
the budget, as Model Analyzer ranks them, unless it beats the shipped configuration
(``<model>_config_default``) by less than the plan's ``min_gain``: on a shared machine that is a tie, and a
tie keeps what is shipped.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from tritonclient.grpc.model_config_pb2 import ModelConfig

from tritonrepo.configs import parse_config

RESULTS_CSV = Path("results") / "metrics-model-inference.csv"
SHIPPED_SUFFIX = "_config_default"


@dataclass(frozen=True, kw_only=True)
class Settings:
    """What a tuning varies in a configuration, read from its config.pbtxt with Triton's schema."""

    instances: int
    max_queue_delay_us: int
    preferred_batch_sizes: tuple[int, ...]
    max_batch_size: int

    @classmethod
    def of(cls, config: ModelConfig) -> Settings:
        return cls(
            instances=sum(max(1, group.count) for group in config.instance_group) or 1,
            max_queue_delay_us=int(config.dynamic_batching.max_queue_delay_microseconds),
            preferred_batch_sizes=tuple(config.dynamic_batching.preferred_batch_size),
            max_batch_size=int(config.max_batch_size),
        )

    def __str__(self) -> str:
        preferred = ",".join(str(s) for s in self.preferred_batch_sizes) or "-"
        return (
            f"{self.instances} instance(s), queue delay {self.max_queue_delay_us} us, "
            f"preferred batch {preferred}, max batch {self.max_batch_size}"
        )


@dataclass(frozen=True, kw_only=True)
class Measurement:
    """One perf_analyzer measurement of one configuration, with the settings that configuration has."""

    model: str
    variant: str
    concurrency: int
    throughput_per_s: float
    p99_ms: float
    within_budget: bool
    settings: Settings

    @property
    def shipped(self) -> bool:
        return self.variant.endswith(SHIPPED_SUFFIX)


@dataclass(frozen=True, kw_only=True)
class ModelOutcome:
    model: str
    measurements: list[Measurement]
    fastest: Measurement | None  # the fastest within the budget; None: no configuration met it
    winner: Measurement | None  # fastest, or the shipped one when fastest gains less than min_gain
    shipped: Measurement | None  # None: the shipped configuration was not measured

    @property
    def tie(self) -> bool:
        """The fastest variant gained too little over the shipped configuration to replace it."""
        return self.fastest is not None and self.winner is not None and self.fastest is not self.winner

    @property
    def ratio(self) -> float | None:
        """Winner's throughput over the shipped configuration's (1.0 when the shipped one wins)."""
        if self.winner is None or self.shipped is None or self.shipped.throughput_per_s <= 0:
            return None
        return self.winner.throughput_per_s / self.shipped.throughput_per_s


def read_measurements(export: Path, output_repository: Path) -> list[Measurement]:
    """Every row of Model Analyzer's inference table, with its variant's settings."""
    path = Path(export) / RESULTS_CSV
    if not path.is_file():
        raise FileNotFoundError(f"Model Analyzer wrote no results table at {path}; see its log")
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    measurements = []
    for row in rows:
        variant = row["Model Config Path"]
        config = parse_config(Path(output_repository) / variant / "config.pbtxt")
        measurements.append(
            Measurement(
                model=row["Model"],
                variant=variant,
                concurrency=int(row["Concurrency"]),
                throughput_per_s=float(row["Throughput (infer/sec)"]),
                p99_ms=float(row["p99 Latency (ms)"]),
                within_budget=row["Satisfies Constraints"].strip().lower() == "yes",
                settings=Settings.of(config),
            )
        )
    return measurements


def outcomes(measurements: list[Measurement], models: list[str], *, min_gain: float) -> list[ModelOutcome]:
    """Each model's winner within the budget and its shipped configuration's best measurement."""
    result = []
    for model in models:
        rows = [m for m in measurements if m.model == model]
        within = [m for m in rows if m.within_budget]
        shipped_rows = [m for m in rows if m.shipped]
        shipped_within = [m for m in shipped_rows if m.within_budget]
        fastest = max(within, key=_rank) if within else None
        winner = fastest
        if fastest is not None and shipped_within:
            shipped_best = max(shipped_within, key=_rank)
            if fastest.throughput_per_s < shipped_best.throughput_per_s * (1 + min_gain):
                winner = shipped_best
        result.append(
            ModelOutcome(
                model=model,
                measurements=sorted(rows, key=lambda m: -m.throughput_per_s),
                fastest=fastest,
                winner=winner,
                shipped=max(shipped_within or shipped_rows, key=_rank) if shipped_rows else None,
            )
        )
    return result


def _rank(measurement: Measurement) -> tuple[float, bool]:
    # Highest throughput; on an exact tie, the shipped configuration (no change without a gain).
    return (measurement.throughput_per_s, measurement.shipped)
