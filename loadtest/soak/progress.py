"""What ``python -m loadtest.soak`` shows while it runs: a line per sample with its phase, the time
elapsed and left, and what the sample measured; on a terminal also a bar over the whole soak."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from loadtest.soak.config import SoakConfig
from tritonrepo.progress import Progress, duration


class SoakProgress:
    def __init__(self, progress: Progress, config: SoakConfig) -> None:
        self.progress = progress
        self.phases_s = {
            "warmup": 60 * config.warmup_minutes,
            "soak": 60 * config.minutes,
            "fault": 60 * config.fault_minutes,
        }
        self.total_s = sum(self.phases_s.values())
        self._bar: Any = None

    def plan(self) -> str:
        """The phases and their durations, in the order they run."""
        phases = ", ".join(f"{name} {duration(s)}" for name, s in self.phases_s.items() if s)
        return f"{phases}: {duration(self.total_s)} in all"

    def line(self, text: str) -> None:
        self.progress.line(text)

    @contextlib.contextmanager
    def running(self) -> Iterator[SoakProgress]:
        """The bar over the phases (seconds) while the soak runs."""
        # Seconds of the phases: the rate and the estimate tqdm would add say nothing more than the line.
        layout = "{desc}: {percentage:3.0f}%|{bar}| {n}/{total} s"
        with self.progress.bar(desc="soak", total=round(self.total_s), unit="s", bar_format=layout) as bar:
            self._bar = bar if self.progress.bars else None
            try:
                yield self
            finally:
                self._bar = None

    def sample(self, row: dict) -> None:
        """One sample's line (run.sample_row's keys): phase, elapsed of total, time left, throughput,
        errors, requests shed, resident memory."""
        elapsed = row["time_s"]
        left = max(self.total_s - elapsed, 0.0)
        errors = row["image_errors"] + row["text_errors"]
        self.progress.line(
            f"{row['phase']:<6} {duration(elapsed):>6} of {duration(self.total_s)} ({duration(left)} left)  "
            f"images {row['image_per_s']:6.1f}/s texts {row['text_per_s']:6.1f}/s errors {errors} "
            f"shed {row['image_shed'] + row['text_shed']} rss {row['rss_total_mb']:8.1f} MB"
        )
        if self._bar is not None:  # a sample comes every few seconds: redraw at each
            self._bar.set_description_str(row["phase"], refresh=False)
            self._bar.n = min(round(elapsed), round(self.total_s))
            self._bar.refresh()
