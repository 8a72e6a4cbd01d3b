"""The time budget of a service at one load: the client's mean round trip split into where it went.

The split is arithmetic on what was measured for the same requests: the client's round trip of each
request, and Triton's statistics (``/v2/models/<model>/stats``) read before and after them, subtracted
(:meth:`clients.ModelStatistics.since`) and divided by their counts. Triton's semantics, which the parts
follow:

- ``success`` of the service (an ensemble or a single model) counts its requests and sums the time from
  the request's arrival in Triton's core to its response: the server's request time. The round trip
  minus it is the client's and the protocol's share (serialising, the network, Triton's HTTP/gRPC
  front end).
- ``queue``, ``compute_input``, ``compute_infer`` and ``compute_output`` of each model count requests,
  not executions: a request batched with others is charged its whole execution. Divided by their counts
  they are the time one request of that step waited and was computed. An ensemble's steps each see one
  request per service request, in sequence (the project's ensembles are chains), so the steps' parts
  add up inside the service's request time; what is left of it is Triton's own work around and between
  the steps (the ensemble's hand-offs, the response), which no counter measures: the remainder.
- An ensemble's own ``compute_input``, ``compute_infer`` and ``compute_output`` are the sums of its
  steps' (Triton 2.51 adds each step's to the ensemble's), and its ``queue`` is its own scheduling only:
  the budget reads every step's counters and the ensemble's ``success`` alone.
- A Python-backend step counts its output copy until its responses are sent, and sending hands them to
  the next step, which may start meanwhile: the steps' parts can overlap by up to that copy, and the
  remainder is then negative.
- ``execution_count`` and ``batch_stats`` count executions: they give each step's average batch and its
  time per execution, context beside the per-request parts.
- A Python-backend step that wrote its timings (:mod:`loadtest.load.stub_timings`) has its compute time
  split three ways: the model's own code (its prepare, run and finish callables); the rest of its
  ``execute()``, the batching and tensors around that code (reading the inputs, gathering and splitting
  the batch, wrapping the outputs in responses), which the model's Python can change; and the rest of the
  compute time, the Python stub's share: the Python backend's message to and from the stub process.

The budget adds up when the remainder is within :data:`TOLERANCE` of the mean round trip; the report
names the remainder either way.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from clients import ModelStatistics
from clients.stats import parse_statistics
from loadtest.load.quantiles import quantile
from loadtest.load.stub_timings import StubTimes, stub_times_since

TOLERANCE = 0.10
# The kinds of part, in the order a request meets them; the plot stacks them in this order.
CLIENT, QUEUE, INPUT, COMPUTE, MODEL_CODE, WRAPPER, STUB, OUTPUT, REMAINDER = (
    "client and protocol",
    "queue",
    "input copy",
    "compute",
    "model code",
    "batching and tensors",
    "Python stub",
    "output copy",
    "not accounted for",
)
KINDS = (CLIENT, QUEUE, INPUT, COMPUTE, MODEL_CODE, WRAPPER, STUB, OUTPUT, REMAINDER)
REMAINDER_MEANING = (
    "in Triton around and between the steps (ensemble hand-offs, the response); negative where the steps' "
    "counted times overlap (a step's output copy still counted while the next step has begun)"
)


@dataclass(kw_only=True)
class Part:
    """One share of the mean round trip, in ms per request."""

    kind: str  # one of KINDS
    ms: float
    step: str = ""  # the model it was spent in; "" for the client's share and the remainder

    @property
    def label(self) -> str:
        return f"{self.step}: {self.kind}" if self.step else self.kind


@dataclass(kw_only=True)
class StepFacts:
    """What one step's executions looked like: how many requests and executions, the average batch and
    the compute time of one execution (batch_stats)."""

    model: str
    requests: int
    executions: int
    average_batch: float
    ms_per_execution: float


@dataclass(kw_only=True)
class InProcessTime:
    """The same work in one process: ``batch_size`` items through the service's pipeline, ms per call."""

    batch_size: int
    ms_per_batch: float
    what: str  # what ran, e.g. "image_preprocess's code, efficientnet_lite0_onnx (onnxruntime), softmax"


@dataclass(kw_only=True)
class Budget:
    """Where the mean round trip of ``requests`` requests to ``service`` at ``in_flight`` went."""

    service: str
    in_flight: int
    requests: int
    mean_ms: float
    server_ms: float
    parts: list[Part]
    steps: list[StepFacts]
    protocol: str = "grpc"
    failures: int = 0
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    throughput_per_s: float = 0.0
    inprocess: InProcessTime | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def remainder_ms(self) -> float:
        return sum(p.ms for p in self.parts if p.kind == REMAINDER)

    @property
    def accounted_ms(self) -> float:
        return sum(p.ms for p in self.parts if p.kind != REMAINDER)

    @property
    def adds_up(self) -> bool:
        """The parts that counters measured make the mean round trip within :data:`TOLERANCE`."""
        return abs(self.remainder_ms) <= TOLERANCE * self.mean_ms

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(remainder_ms=self.remainder_ms, accounted_ms=self.accounted_ms, adds_up=self.adds_up)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Budget:
        known = {k: v for k, v in data.items() if k not in ("remainder_ms", "accounted_ms", "adds_up")}
        inprocess = known.pop("inprocess", None)
        return cls(
            **{k: v for k, v in known.items() if k not in ("parts", "steps")},
            parts=[Part(**p) for p in known["parts"]],
            steps=[StepFacts(**s) for s in known["steps"]],
            inprocess=InProcessTime(**inprocess) if inprocess else None,
        )


def from_record(record: dict[str, Any]) -> Budget:
    """The budget of one recorded run (:func:`loadtest.experiments.budget_runs.measure` writes it):
    the service, its steps, the load, each answered request's round trip, the statistics payloads of
    ``/v2/models/stats`` before and after, and the Python models' timings before and after (None where
    the server wrote none)."""
    before = {s.model: s for s in parse_statistics(record["statistics_before"])}
    after = {s.model: s for s in parse_statistics(record["statistics_after"])}
    deltas = {name: now.since(before[name]) if name in before else now for name, now in after.items()}
    stub = None
    if record.get("stub_after") is not None:
        stub = stub_times_since(
            {m: StubTimes(**t) for m, t in (record.get("stub_before") or {}).items()},
            {m: StubTimes(**t) for m, t in record["stub_after"].items()},
        )
    budget = split(
        record["service"],
        list(record["steps"]),
        deltas,
        list(record["latencies_ms"]),
        in_flight=int(record["in_flight"]),
        stub_times=stub,
    )
    budget.protocol = str(record.get("protocol", budget.protocol))
    budget.failures = int(record.get("failures", 0))
    wall_s = float(record.get("wall_s", 0.0))
    budget.throughput_per_s = budget.requests / wall_s if wall_s else 0.0
    if budget.failures:
        budget.notes.append(f"{budget.failures} of the client's requests failed; the budget is of the others")
    if stub is None:
        budget.notes.append(
            "the server wrote no Python-model timings (started without PYBACKEND_TIMINGS_DIR): each step's "
            "compute is left whole"
        )
    return budget


def split(
    service: str,
    steps: list[str],
    deltas: dict[str, ModelStatistics],
    latencies_ms: list[float],
    *,
    in_flight: int,
    stub_times: dict[str, StubTimes] | None = None,
) -> Budget:
    """The budget of ``service`` from the round trips of its requests (``latencies_ms``, ms) and the
    statistics ``deltas`` of the service and its ``steps`` over the same requests ([] for a single
    model: the service is its own step). ``stub_times``: model -> :class:`~loadtest.load.stub_timings.
    StubTimes` over the same requests, for the Python-backend steps that wrote them."""
    if not latencies_ms:
        raise ValueError(f"{service}: no request was answered, so there is no round trip to split")
    if service not in deltas:
        raise ValueError(f"{service}: Triton's statistics have no entry for it; is it served?")
    top = deltas[service]
    mean_ms = sum(latencies_ms) / len(latencies_ms)
    server_ms = _per_request_ms(top.success.total_ns, top.success.count)
    notes = _count_notes(service, steps or [service], deltas, len(latencies_ms))
    parts = [Part(kind=CLIENT, ms=mean_ms - server_ms)]
    facts = []
    for step in steps or [service]:
        if step not in deltas:
            notes.append(f"{step}: no statistics over the run; its time is in the remainder")
            continue
        step_parts, note = _step_parts(step, deltas[step], (stub_times or {}).get(step))
        parts += step_parts
        notes += [note] if note else []
        facts.append(_facts(step, deltas[step]))
    inside = sum(p.ms for p in parts if p.kind != CLIENT)
    parts.append(Part(kind=REMAINDER, ms=server_ms - inside))
    return Budget(
        service=service,
        in_flight=in_flight,
        requests=len(latencies_ms),
        mean_ms=mean_ms,
        server_ms=server_ms,
        parts=parts,
        steps=facts,
        p50_ms=quantile(latencies_ms, 0.5),
        p99_ms=quantile(latencies_ms, 0.99),
        notes=notes,
    )


def _step_parts(step: str, delta: ModelStatistics, stub: StubTimes | None) -> tuple[list[Part], str]:
    """One step's queue, input copy, compute (or model code and stub) and output copy per request."""

    def average(duration: str) -> float:
        measured = getattr(delta, duration)
        return _per_request_ms(measured.total_ns, measured.count)

    compute_ms = average("compute_infer")
    compute = [Part(kind=COMPUTE, ms=compute_ms, step=step)]
    note = ""
    if stub is not None and stub.requests:
        if stub.requests == delta.compute_infer.count:
            compute = [
                Part(kind=MODEL_CODE, ms=stub.model_ms, step=step),
                Part(kind=WRAPPER, ms=stub.execute_ms - stub.model_ms, step=step),
                Part(kind=STUB, ms=compute_ms - stub.execute_ms, step=step),
            ]
        else:
            note = (
                f"{step}: its timings counted {stub.requests} requests and Triton "
                f"{delta.compute_infer.count}; its compute is left whole"
            )
    return [
        Part(kind=QUEUE, ms=average("queue"), step=step),
        Part(kind=INPUT, ms=average("compute_input"), step=step),
        *compute,
        Part(kind=OUTPUT, ms=average("compute_output"), step=step),
    ], note


def _facts(step: str, delta: ModelStatistics) -> StepFacts:
    return StepFacts(
        model=step,
        requests=delta.success.count,
        executions=delta.executions,
        average_batch=delta.average_batch_size,
        ms_per_execution=_per_request_ms(delta.execution_compute.total_ns, delta.execution_compute.count),
    )


def _count_notes(
    service: str, steps: list[str], deltas: dict[str, ModelStatistics], answered: int
) -> list[str]:
    """What the counters say that the budget's reader must know: other traffic, failures."""
    notes = []
    for model in dict.fromkeys([service, *steps]):
        if model not in deltas:
            continue
        delta = deltas[model]
        if delta.success.count != answered:
            notes.append(
                f"{model}: Triton counted {delta.success.count} successful requests for the {answered} "
                "answered here (other traffic, or failures): its averages are over Triton's count"
            )
        if delta.fail.count:
            notes.append(f"{model}: {delta.fail.count} requests failed during the run")
    return notes


def _per_request_ms(total_ns: int, count: int) -> float:
    return total_ns / count / 1e6 if count else 0.0
