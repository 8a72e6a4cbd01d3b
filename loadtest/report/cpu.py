"""What each request cost in CPU during served runs, by process, against the in-process rate per core.

A served run samples the CPU time of every process of the server (each Python-backend stub under the
model it serves, the server process under its name) and of the whole machine, and reads from Triton's
statistics how many requests the served model answered in the same interval. :func:`cpu_per_item`
divides the one by the other: milliseconds of CPU per request for each model the pipeline called, for
the server process (with the idle stubs of the models it did not call) and for everything outside the
server (the load generator and any other process). Per request, and not per second, because the sampled
interval includes perf_analyzer's start and end, which its measurement windows leave out.

From it :func:`per_core_line` sets the models' own rate, requests per CPU-second of their processes,
against the in-process rate per core of the same file: near 100% means serving costs the model code
little, and a served figure below the in-process one comes from the CPU the rest took.
"""

from __future__ import annotations

from dataclasses import dataclass

from loadtest.report.records import ServedRun


@dataclass(kw_only=True, frozen=True)
class CpuPerItem:
    """Milliseconds of CPU per request answered, over the runs (rounds) of one arm."""

    runs: int
    items: int
    throughput_per_s: float  # perf_analyzer's, mean over the runs
    models: dict[str, float]  # the models the pipeline called, largest first
    server: float  # the server process, and the stubs of models the run did not call
    outside: float | None  # every other process on the machine (the load generator among them)

    @property
    def model_ms(self) -> float:
        return sum(self.models.values())

    @property
    def total_ms(self) -> float:
        return self.model_ms + self.server + (self.outside or 0.0)


def cpu_per_item(runs: list[ServedRun]) -> CpuPerItem | None:
    """Pooled over ``runs``; None when no run has a per-process record or a request count."""
    measured = [run for run in runs if run.measured and run.cpu_s_by_process and _items(run)]
    if not measured:
        return None
    models: dict[str, float] = {}
    server = outside = 0.0
    have_machine = all(run.machine_cpu_s is not None for run in measured)
    for run in measured:
        called = set(run.server) - {run.served_model}  # the steps Triton's statistics saw run
        for label, cpu_s in run.cpu_s_by_process.items():
            if label in called:
                models[label] = models.get(label, 0.0) + cpu_s
            else:
                server += cpu_s
        if have_machine:
            outside += max(float(run.machine_cpu_s or 0.0) - sum(run.cpu_s_by_process.values()), 0.0)
    items = sum(_items(run) for run in measured)
    per_item = 1000.0 / items
    return CpuPerItem(
        runs=len(measured),
        items=items,
        throughput_per_s=sum(run.perf.throughput_per_s for run in measured) / len(measured),
        models={name: cpu_s * per_item for name, cpu_s in sorted(models.items(), key=lambda item: -item[1])},
        server=server * per_item,
        outside=outside * per_item if have_machine else None,
    )


def _items(run: ServedRun) -> int:
    stats = run.server.get(run.served_model)
    return stats.inferences if stats else 0


def busy_cores(cost: CpuPerItem) -> float:
    """The cores the measured throughput kept busy at this CPU per request."""
    return cost.throughput_per_s * cost.total_ms / 1000.0


def cost_line(cost: CpuPerItem, cores: int, what: str, unit: str) -> str:
    """One sentence: CPU per request by model, server process and outside the server; the cores that
    kept busy at the measured rate, and the rate with no core idle."""
    parts = [f"{name} {ms:.2f}" for name, ms in cost.models.items()]
    parts.append(f"the server process {cost.server:.2f}")
    if cost.outside is not None:
        parts.append(f"outside the server (the load generator, other processes) {cost.outside:.2f}")
    rounds = f", {cost.runs} rounds" if cost.runs > 1 else ""
    return (
        f"CPU per request in ms ({what}{rounds}): " + ", ".join(parts) + f"; {cost.total_ms:.2f} in all. "
        f"At the measured {cost.throughput_per_s:.1f} {unit} that keeps {busy_cores(cost):.2f} of the "
        f"{cores} cores busy; with none idle it would be {1000.0 * cores / cost.total_ms:.0f} {unit}."
    )


def per_core(cost: CpuPerItem, inprocess_per_s: float, cores: int) -> float | None:
    """Requests per CPU-second of the models' processes, as a share of the in-process items/s per core."""
    if not cost.model_ms or not inprocess_per_s:
        return None
    return (1000.0 / cost.model_ms) / (inprocess_per_s / cores)


def per_core_line(cost: CpuPerItem, inprocess_per_s: float, cores: int, unit: str) -> str | None:
    """One sentence: the models' rate per CPU-second against the in-process rate per core, and what the
    served figure loses to the server process, the processes outside it and idle cores."""
    share = per_core(cost, inprocess_per_s, cores)
    if share is None:
        return None
    idle = max(1.0 - busy_cores(cost) / cores, 0.0)
    used = 1.0 - idle
    losses = [f"the server process {used * cost.server / cost.total_ms:.0%}"]
    if cost.outside is not None:
        losses.append(f"the load generator and other processes {used * cost.outside / cost.total_ms:.0%}")
    losses.append(f"idle time {idle:.0%}")
    return (
        f"Per CPU-second of the models' processes the pipeline served {1000.0 / cost.model_ms:.1f} {unit}, "
        f"{share:.0%} of the in-process rate per core ({inprocess_per_s / cores:.1f}; "
        f"{inprocess_per_s:.1f} on {cores} cores). Of the {cores} cores during the run the rest went to "
        + ", ".join(losses)
        + "."
    )
