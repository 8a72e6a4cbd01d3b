"""The soak's settings, read by the run and by its report."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tritonrepo.paths import REPORTS


@dataclass(frozen=True, kw_only=True)
class SoakConfig:
    minutes: float
    warmup_minutes: float = 3.0
    fraction: float = 0.6
    sample_s: float = 10.0
    calibrate_s: float = 60.0
    in_flight: int = 16
    output: Path = REPORTS / "soak"
    seed: int = 0
    fault_minutes: float = 0.0  # 0: no fault phase

    def __post_init__(self) -> None:
        if not self.minutes > 0 or self.warmup_minutes < 0:
            raise ValueError(
                f"minutes must be positive and warmup_minutes not negative, got {self.minutes} and "
                f"{self.warmup_minutes}"
            )
        if not 0 < self.fraction <= 1:
            raise ValueError(f"fraction of capacity must be in (0, 1], got {self.fraction}")
        if self.fault_minutes < 0:
            raise ValueError(f"fault_minutes must not be negative, got {self.fault_minutes}")
        if self.sample_s <= 0 or self.calibrate_s <= 0 or self.in_flight < 1:
            raise ValueError("sample_s and calibrate_s must be positive and in_flight at least 1")
