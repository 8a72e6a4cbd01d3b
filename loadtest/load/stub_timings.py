"""What the Python-backend models' own code took, read from the timings files their batcher writes.

A server started with ``PYBACKEND_TIMINGS_DIR`` naming a folder (:func:`server_environment`) has every
Python-backend model instance (``RequestBatcher`` of model_repository/pybackend_batching.py, the runner of
the exported files included) rewrite ``<model>.<pid>.json`` there after each execution: its cumulative
execute() time and the time in the model's own callables, each weighted by the execution's requests as
Triton weights an execution's compute time. :func:`read_stub_times` sums a model's instances;
:meth:`StubTimes.since` gives what happened between two reads. A server without the variable (NVIDIA's
container, a server started elsewhere) writes nothing, and the time budget then leaves Triton's compute
time of each step whole.
"""

from __future__ import annotations

import functools
import json
import logging
import types
from dataclasses import dataclass
from pathlib import Path

from tritonrepo.paths import REPOSITORY
from tritonrepo.served_code import load_served_module

logger = logging.getLogger(__name__)


@functools.cache
def _batching_helper() -> types.ModuleType:
    """The served batching helper, read for the names it writes under (its environment variable)."""
    return load_served_module(REPOSITORY / "pybackend_batching.py", name="_pybackend_batching_timings")


def server_environment(folder: Path) -> dict[str, str]:
    """The environment variable that makes a server's Python models write their timings into ``folder``."""
    return {_batching_helper().TIMINGS_ENV: str(Path(folder).resolve())}


@dataclass(frozen=True, kw_only=True)
class StubTimes:
    """One model's cumulative counters over its instances: executions, requests, and nanoseconds of
    execute() and of the model's own callables, each summed over requests (an execution's time counts
    once per request it answered)."""

    executions: int = 0
    requests: int = 0
    execute_ns: int = 0
    model_ns: int = 0

    def since(self, earlier: StubTimes) -> StubTimes:
        return StubTimes(
            executions=self.executions - earlier.executions,
            requests=self.requests - earlier.requests,
            execute_ns=self.execute_ns - earlier.execute_ns,
            model_ns=self.model_ns - earlier.model_ns,
        )

    @property
    def execute_ms(self) -> float:
        """execute()'s time per request, in ms (0 without requests)."""
        return self.execute_ns / self.requests / 1e6 if self.requests else 0.0

    @property
    def model_ms(self) -> float:
        """The model's own callables' time per request, in ms (0 without requests)."""
        return self.model_ns / self.requests / 1e6 if self.requests else 0.0


def read_stub_times(folder: Path) -> dict[str, StubTimes]:
    """Every model's counters in ``folder``, summed over its instances (its files); {} where none."""
    totals: dict[str, StubTimes] = {}
    for path in sorted(Path(folder).glob("*.json")):
        record = _read_record(path)
        if record is None:
            continue
        model = str(record["model"])
        earlier = totals.get(model, StubTimes())
        totals[model] = StubTimes(
            executions=earlier.executions + int(record["executions"]),
            requests=earlier.requests + int(record["requests"]),
            execute_ns=earlier.execute_ns + int(record["execute_ns"]),
            model_ns=earlier.model_ns + int(record["model_ns"]),
        )
    return totals


def stub_times_since(before: dict[str, StubTimes], after: dict[str, StubTimes]) -> dict[str, StubTimes]:
    """Each model's counters between two reads of the same folder; models that did not run are left out."""
    return {
        model: now.since(before.get(model, StubTimes()))
        for model, now in after.items()
        if now.requests != before.get(model, StubTimes()).requests
    }


def _read_record(path: Path, attempts: int = 3) -> dict | None:
    """One instance's record (None for an instance that has not executed yet); a file caught mid-write is
    read again (None after ``attempts``)."""
    for _ in range(attempts):
        try:
            text = path.read_text().strip()
            return dict(json.loads(text)) if text else None
        except (OSError, ValueError):
            pass
    logger.warning("could not read the timings file %s", path)
    return None
