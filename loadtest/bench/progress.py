"""What ``python -m loadtest.bench`` shows while it runs: a header per stage ("stage 2 of 4: central"),
the points measured so far, and the time left, estimated from the seconds each experiment is declared
to take (EXPECTED_S) less the time already spent.

A point is one measurement an experiment logs as it completes it (a perf_analyzer run, an in-process
batch size); the loggers of POINT_LOGGERS write one INFO record per point. The experiments that log no
points (the alternative, the clients, Locust, central, profiles) still advance the time left.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

from loadtest.experiments import registry
from tritonrepo.progress import Progress, duration

# Seconds each experiment takes on 2 cores, by mode, and the served stage's own start (the clones'
# repository, the server loading them). Quick: the wall time of the recorded quick run's points and
# stages (docs/reports/quick-example), `minimal` from a quiet run of its three services
# (docs/measurements.md) scaled to the plan's requests; full: its documented "about 45 minutes" spread in
# the same proportions, scaled by what its plan measures more. Estimates for the time left only: a run
# never waits for them or stops at them.
EXPECTED_S: dict[str, dict[str, float]] = {
    "quick": {
        "served_start": 40,
        "batching": 110,
        "instances": 45,
        "ragged": 175,
        "minimal": 300,
        "sweeps": 55,
        "clients": 10,
        "batchcost": 10,
        "locust": 20,
        "budget": 90,
        "central": 25,
        "inprocess": 40,
        "profile": 5,
    },
    "full": {
        "served_start": 40,
        "batching": 220,
        "instances": 180,
        "ragged": 500,
        "minimal": 950,
        "sweeps": 720,
        "clients": 50,
        "batchcost": 15,
        "locust": 150,
        "budget": 300,
        "central": 170,
        "inprocess": 320,
        "profile": 15,
    },
}
# The loggers that write one INFO record per point measured.
POINT_LOGGERS = ("loadtest.experiments.served", "loadtest.experiments.inprocess")
PLAIN_HEARTBEAT_S = 60.0  # without a point for this long, a plain line says the run is alive
TICK_S = 1.0


def expected_stage_s(mode: str, skip: tuple[str, ...]) -> dict[str, float]:
    """The stages that run (registry order) and the seconds each is expected to take, for ``mode``
    with the experiments of ``skip`` left out."""
    table = EXPECTED_S[mode]
    stages = {}
    for stage in registry.STAGES:
        keys = registry.in_stage(stage, skip)
        if keys:
            start = table["served_start"] if stage == "served" else 0.0
            stages[stage] = start + sum(table[key] for key in keys)
    return stages


class _PointCounter(logging.Handler):
    """Counts the INFO records of POINT_LOGGERS while attached."""

    def __init__(self) -> None:
        super().__init__(level=logging.INFO)
        self.points = 0

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno == logging.INFO:
            self.points += 1

    @contextlib.contextmanager
    def attached(self) -> Iterator[None]:
        loggers = [logging.getLogger(name) for name in POINT_LOGGERS]
        for logger in loggers:
            logger.addHandler(self)
        try:
            yield
        finally:
            for logger in loggers:
                logger.removeHandler(self)


class BenchProgress:
    """The progress of one run over ``stages`` (stage -> expected seconds, in the order they run)."""

    def __init__(self, progress: Progress, stages: dict[str, float]) -> None:
        self.progress = progress
        self.stages = stages

    def time_left_s(self, stage: str, elapsed_s: float) -> float:
        """The run's expected time left: the rest of ``stage`` (none once past its estimate) and every
        later stage."""
        names = list(self.stages)
        later = names[names.index(stage) + 1 :]
        return max(self.stages[stage] - elapsed_s, 0.0) + sum(self.stages[name] for name in later)

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Show ``name`` running: its header, its points and the time left, then how long it took."""
        number, count = list(self.stages).index(name) + 1, len(self.stages)
        self.progress.line(
            f"stage {number} of {count}: {name} (expected about {duration(self.stages[name])}; "
            f"about {duration(self.time_left_s(name, 0.0))} left in the run)"
        )
        counter, done = _PointCounter(), threading.Event()
        started = time.monotonic()
        with self.progress.bar(desc=f"stage {number}/{count} {name}", total=None, unit="point") as bar:
            status = _Status(self, name, f"stage {number} of {count}: {name}", counter, started)
            ticker = threading.Thread(target=status.follow, args=(bar, done), name="bench-progress")
            ticker.start()
            try:
                with counter.attached():
                    yield
            finally:
                done.set()
                ticker.join()
        self.progress.line(
            f"stage {number} of {count}: {name} done in {duration(time.monotonic() - started)}, "
            f"{_points(counter.points)}"
        )


class _Status:
    """Renders a stage's state: the bar's count and the time left on a terminal; elsewhere a plain line
    when points came since the last tick, or after PLAIN_HEARTBEAT_S without one."""

    def __init__(
        self, run: BenchProgress, stage: str, label: str, counter: _PointCounter, started: float
    ) -> None:
        self.run, self.stage, self.label, self.counter, self.started = run, stage, label, counter, started
        self.shown, self.last_line = 0, started

    def follow(self, bar: Any, done: threading.Event) -> None:
        while not done.wait(TICK_S):
            self.tick(bar, time.monotonic())

    def tick(self, bar: Any, now: float) -> None:
        points, elapsed = self.counter.points, now - self.started
        left = f"about {duration(self.run.time_left_s(self.stage, elapsed))} left in the run"
        if self.run.progress.bars:
            bar.update(points - self.shown)
            bar.set_postfix_str(left)
            self.shown = points
        elif points != self.shown or now - self.last_line >= PLAIN_HEARTBEAT_S:
            self.run.progress.line(f"{self.label}: {_points(points)}, {duration(elapsed)} in, {left}")
            self.shown, self.last_line = points, now


def _points(count: int) -> str:
    return f"{count} point{'' if count == 1 else 's'}"
