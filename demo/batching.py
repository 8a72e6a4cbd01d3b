"""What dynamic batching buys at the same load: each ensemble served twice in one server, as shipped and as
a clone with ``dynamic_batching`` removed from every step (:mod:`tritonrepo.clones`), both sent the same
requests with the same number in flight; one request at a time beside them for scale.

The two arms at the same load send their requests in alternating rounds, so that background load on a
shared machine lands on both alike; each arm's figures are over all its requests.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from clients.sync_client import TritonClient
from tritonrepo.clones import Clone, build_repository
from tritonrepo.configs import exported_step, load_repository
from tritonrepo.derive import gpu_is_available
from tritonrepo.paths import REPOSITORY

NOBATCH = "__nobatch"
ENSEMBLES = ("image_classifier", "text_embedder")


@dataclass(frozen=True, kw_only=True)
class Arm:
    """One way of sending the workload: to ``model`` with ``in_flight`` requests outstanding."""

    label: str
    model: str
    in_flight: int


@dataclass(frozen=True, kw_only=True)
class ArmResult:
    arm: Arm
    requests_per_s: float
    batch_size: float  # inferences per execution of the ensemble's exported model (Triton's statistics)


@dataclass(frozen=True, kw_only=True)
class Pass:
    """One pass of requests: how many, how long, and what the encoder ran for them."""

    requests: int
    seconds: float
    inferences: int
    executions: int


def build_demo_repository(target: Path, cores: int) -> list[str]:
    """Write ``target`` with each ensemble of :data:`ENSEMBLES` and its no-batching clone; the served
    model names, sorted."""
    clones = [
        clone
        for ensemble in ENSEMBLES
        for clone in (Clone(model=ensemble), Clone(model=ensemble, suffix=NOBATCH, batching=False))
    ]
    served = build_repository(
        REPOSITORY, target, clones, total_threads=cores, gpu_available=gpu_is_available()
    )
    return sorted(served)


def arms(ensemble: str, in_flight: int) -> tuple[Arm, Arm, Arm]:
    """One request at a time (batching on, nothing to batch), then the same load with batching off and on."""
    return (
        Arm(label="one request at a time", model=ensemble, in_flight=1),
        Arm(label=f"{in_flight} in flight, batching off", model=ensemble + NOBATCH, in_flight=in_flight),
        Arm(label=f"{in_flight} in flight, batching on", model=ensemble, in_flight=in_flight),
    )


def compare(
    url: str, ensemble: str, items: Sequence, *, requests: int, in_flight: int, rounds: int
) -> list[ArmResult]:
    """Each arm of :func:`arms` on ``requests`` requests cycled from ``items``; the two arms at
    ``in_flight`` send theirs in ``rounds`` alternating rounds."""
    encoder = exported_step(load_repository(REPOSITORY), ensemble)  # whose batches the statistics count
    workload = list(itertools.islice(itertools.cycle(items), requests))
    lone, off, on = arms(ensemble, in_flight)
    passes: dict[Arm, list[Pass]] = {lone: [_run(url, lone, encoder, workload, ensemble)], off: [], on: []}
    share = -(-len(workload) // rounds)
    for start in range(0, len(workload), share):
        for arm in (off, on):
            sent = workload[start : start + share]
            passes[arm].append(_run(url, arm, encoder, sent, ensemble, warm_up=start == 0))
    return [
        ArmResult(
            arm=arm,
            requests_per_s=sum(p.requests for p in runs) / sum(p.seconds for p in runs),
            batch_size=sum(p.inferences for p in runs) / max(1, sum(p.executions for p in runs)),
        )
        for arm, runs in passes.items()
    ]


def _run(url: str, arm: Arm, encoder: str, workload: list, ensemble: str, *, warm_up: bool = True) -> Pass:
    """``workload`` sent as ``arm`` says, after a warm-up of ``arm.in_flight`` requests where ``warm_up``
    (not measured)."""
    suffix = arm.model.removeprefix(ensemble)
    with TritonClient(url, max_in_flight=arm.in_flight) as client:
        call: Callable = client.classify if ensemble.startswith("image") else client.embed
        if warm_up:
            call(workload[: arm.in_flight], model=arm.model)
        before = client.statistics(encoder + suffix)
        start = time.perf_counter()
        call(workload, model=arm.model)
        seconds = time.perf_counter() - start
        delta = client.statistics(encoder + suffix).since(before)
    return Pass(
        requests=len(workload), seconds=seconds, inferences=delta.inferences, executions=delta.executions
    )


def print_comparison(ensemble: str, results: list[ArmResult], *, what: str, rounds: int) -> None:
    lone, off, on = results
    print(f"{ensemble} ({what})")
    print(f"  {'':<32} {'requests/s':>10} {'avg batch':>9}")
    for result in results:
        print(f"  {result.arm.label:<32} {result.requests_per_s:>10.1f} {result.batch_size:>9.2f}")
    print(
        f"  -> batching on / off, both {on.arm.in_flight} in flight: "
        f"{on.requests_per_s / off.requests_per_s:.2f}x (in {rounds} alternating rounds)"
    )
    print(
        f"  -> {on.arm.in_flight} in flight with batching / one at a time: "
        f"{on.requests_per_s / lone.requests_per_s:.2f}x (concurrency and batching together)"
    )
