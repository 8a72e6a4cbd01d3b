"""Precision variants of an exported model: what this machine can run, gated, timed, the fastest served.

A pipeline (export/efficientnet_lite/kind.py, export/minilm/kind.py) lists its :class:`Variant` s per served
file, each on a device: for CPU serving fp32, bf16 where the CPU has bf16 instructions and int8 through
onnxruntime's quantization; for GPU serving float32 (as the backend runs it: an ONNX file TF32 or strict by
its config, a TorchScript file with libtorch's TF32 convolutions, export/precision/cuda_runtime.py), fp16 and
from compute capability 8.0 bf16 on the GPU, never int8 (:func:`export.precision.device.why_unavailable`).
:func:`select_and_write` builds each variant offered beside the destination, gates it against eager fp32
on real inputs (:mod:`export.precision.gates`), times every variant that passed in-process at each batch size
of the pipeline's workload (:mod:`export.precision.timing`: warmed up, on the server's threads; interleaved
rounds, best round kept: this machine is shared and noisy), and moves the fastest onto the served file. A
variant that fails its gate, or raises, is reported and never served. ``--precision fp32`` (or any one
precision) pins the choice.

Each variant is timed on a batch-cost curve (:func:`curve_sizes`: the powers of two from 1 up to the
config's max_batch_size or 32, whichever is smaller), from which the derivation chooses the dynamic
batcher's settings (description/batching.py); ``--timing-batches`` measures other sizes instead. The
sizes the pipeline brings its own batches for (1 and a full batch) keep them; the others are formed from
its batch-1 items (:func:`curve_workload`). "Fastest" is the geometric mean of items/s over the measured
sizes, so a variant must be quick for a lone request, for a full batch and between. Every
decision, with each gate's numbers and each timing, is returned as a :class:`Selection`, recorded beside
the file (the manifest) and under ``build/precision/<model>.json`` (the fp32 file kept beside it when
another precision is served) by :mod:`export.precision.records`, which reads them back for the benchmark.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from export.common import ExportError
from export.precision import device, serving_runtime, timing
from export.precision.cuda_runtime import Tf32Mode
from export.precision.device import Capabilities
from export.precision.gates import GateResult
from export.precision.records import RECORD_FORMAT
from export.progress import ExportProgress

logger = logging.getLogger(__name__)

PRECISIONS = ("fp32", "tf32", "bf16", "fp16", "int8")
CHOICES = ("auto", *PRECISIONS)
DEVICES = ("cpu", "cuda")
TIMING_RULE = (
    f"after warm-up, the median over at least {timing.TIMING_MIN_S} s of calls of each call's items/s; "
    f"the best of {timing.TIMING_ROUNDS} interleaved rounds"
)
KEPT_PRECISIONS = ("fp32",)  # the benchmark compares the served file with the fp32 one

Runner = timing.Runner
Batch = timing.Batch  # (runner input, number of items in it)


CURVE_LARGEST = 32  # beyond it a batch's gain is small and each call at that size costs the export seconds
# The batches formed for a size the pipeline brings none of. Timing calls at least a quarter of a size's
# batches each round, and grouping all 264 check photographs in twos made 132 batches, 34 calls a round:
# a curve's point needs a few distinct batches, not every item.
CURVE_BATCHES = 4


def curve_sizes(max_batch_size: int) -> tuple[int, ...]:
    """The batch sizes every variant is timed at by default: the powers of two from 1 up to the smaller of
    ``max_batch_size`` and CURVE_LARGEST, and that largest size itself."""
    largest = max(1, min(max_batch_size, CURVE_LARGEST))
    return tuple(sorted({1 << k for k in range(largest.bit_length()) if 1 << k <= largest} | {largest}))


def curve_workload(workload: Mapping[int, list[Batch]], sizes: Sequence[int]) -> dict[int, list[Batch]]:
    """The workload at each of ``sizes``: the pipeline's own batches where it has that size (a text
    batch sorted by length, a slice of the gate set), otherwise CURVE_BATCHES of its batch-1 items grouped
    (:func:`resized_workload`)."""
    missing = [size for size in sizes if size not in workload]
    formed = resized_workload(workload, missing) if missing else {}
    resized = {size: batches[:CURVE_BATCHES] for size, batches in formed.items()}
    return {size: workload[size] if size in workload else resized[size] for size in sorted(set(sizes))}


def resized_workload(workload: Mapping[int, list[Batch]], sizes: Sequence[int]) -> dict[int, list[Batch]]:
    """The workload's batch-1 items grouped into batches of each of ``sizes``, consecutive items taken in
    turn (cycling where a size is larger than the items there are). A runner input is an array or a tuple
    of arrays, each concatenated on its first axis: images, a model's declared inputs and a ragged text
    batch (token ids and lengths) alike."""
    if not sizes or min(sizes) < 1:
        raise ValueError(f"timing batch sizes must be positive, got {list(sizes)}")
    singles = [item for item, count in workload.get(1, []) if count == 1]
    if not singles:
        raise ValueError(
            f"the workload has no batch-1 items to form other sizes from (sizes {list(workload)})"
        )
    resized = {}
    for size in sorted(set(sizes)):
        count = max(1, -(-len(singles) // size))  # every item at least once
        groups = [[singles[(start * size + k) % len(singles)] for k in range(size)] for start in range(count)]
        resized[size] = [(_concatenated(group), size) for group in groups]
    return resized


def _concatenated(items: Sequence[Any]) -> Any:
    if isinstance(items[0], tuple):
        return tuple(np.concatenate(parts) for parts in zip(*items, strict=True))
    return np.concatenate(items)


def offered(variants: Sequence[Variant], capabilities: Capabilities) -> list[str]:
    """The names of the variants an export for ``capabilities`` builds and gates (under --precision auto)."""
    return [v.name for v in variants if device.why_unavailable(v.precision, v.device, capabilities) is None]


@dataclass(frozen=True, kw_only=True)
class Variant:
    """One way to write a served file. ``build(path)`` writes it and returns a runner on the written file."""

    name: str
    precision: str
    device: str
    build: Callable[[Path], Runner]
    # An ONNX file's runner input as onnxruntime's feed: the file is gated again in the serving runtime.
    feed: Callable[[Any], dict[str, Any]] | None = None
    # An ONNX file for CUDA: the CUDA provider options its sessions get (the config's, as served).
    cuda_options: Mapping[str, str] | None = None
    # On CUDA: the float32 work it runs as TF32, as the serving backend runs it
    # (export/precision/cuda_runtime.py).
    tf32: Tf32Mode | None = None

    @property
    def runtime(self) -> dict[str, Any]:
        """How a CUDA runtime runs this variant (recorded with its gate): TF32, the provider options."""
        if self.device != "cuda":
            return {}
        mode = self.tf32.as_dict() if self.tf32 is not None else {}
        return {**mode, "cuda_options": dict(self.cuda_options or {}) or None}

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS or self.device not in DEVICES:
            raise ValueError(
                f"variant {self.name!r}: precision must be one of {PRECISIONS} and device one of "
                f"{DEVICES}, got {self.precision!r} on {self.device!r}"
            )


@dataclass(kw_only=True)
class Candidate:
    """What happened to one variant."""

    variant: str
    precision: str
    device: str
    # served | passed | failed gate | error (an exception while building, gating or timing: the reason
    # says which) | not runnable here | not requested
    status: str
    reason: str = ""
    gate: GateResult | None = None
    serving_gate: GateResult | None = None  # the same gate, the file run by the serving onnxruntime
    items_per_s: dict[int, float] = field(default_factory=dict)
    kept_file: str | None = None  # name of this variant's file kept beside the record (not served)
    runtime: dict[str, Any] = field(default_factory=dict)  # Variant.runtime: how it was gated and timed

    @property
    def score(self) -> float:
        """Geometric mean of items/s over the batch sizes measured (0 when untimed)."""
        rates = list(self.items_per_s.values())
        if not rates or min(rates) <= 0:
            return 0.0
        return math.exp(sum(math.log(r) for r in rates) / len(rates))

    def as_dict(self) -> dict:
        return {
            "variant": self.variant,
            "precision": self.precision,
            "device": self.device,
            "status": self.status,
            "reason": self.reason,
            "gate": self.gate.as_dict() if self.gate else None,
            "serving_gate": self.serving_gate.as_dict() if self.serving_gate else None,
            "items_per_s": {str(size): rate for size, rate in self.items_per_s.items()},
            "kept_file": self.kept_file,
            "runtime": self.runtime,
        }


@dataclass(kw_only=True)
class Selection:
    model: str
    choice: str
    capabilities: Capabilities
    candidates: list[Candidate]
    served: str | None  # None: nothing passed (``failure`` says why) and the old file, if any, is kept
    reference: GateResult | None = None  # the gate applied to fp32 itself (a noise floor), for reading
    failure: str = ""
    threads: int | None = None  # the intra-op threads every variant was timed with (None: the process's)

    def as_dict(self) -> dict:
        return {
            "format": RECORD_FORMAT,
            "model": self.model,
            "choice": self.choice,
            "rule": "fastest passing variant by geometric mean of in-process items/s over the batch sizes",
            "timing": {"threads": self.threads, "items_per_s": TIMING_RULE},
            "capabilities": self.capabilities.as_dict(),
            "served": self.served,
            "candidates": [candidate.as_dict() for candidate in self.candidates],
            "reference": self.reference.as_dict() if self.reference else None,
            "failure": self.failure or None,
        }


def select_and_write(
    *,
    model: str,
    destination: Path,
    variants: Sequence[Variant],
    gate: Callable[[Runner], GateResult],
    workload: dict[int, list[Batch]],
    choice: str,
    capabilities: Capabilities,
    keep_dir: Path | None = None,
    timing_min_s: float = timing.TIMING_MIN_S,
    threads: int | None = None,
    reference: GateResult | None = None,
    progress: ExportProgress | None = None,
) -> Selection:
    """Build, gate and time ``variants``; move the fastest passing one onto ``destination``.

    ``reference``: the gate's numbers for fp32 itself under a perturbation (a noise floor), recorded and
    listed beside the variants so that a reader can tell a gate no variant could pass from a bad variant.
    A variant that raises while it is built, gated or timed is recorded as an error with the exception and
    left out; the others go on. When another precision is served, the passing fp32 file is kept in
    ``keep_dir`` (as ``<variant><suffix>``) so that the benchmark can serve it beside the chosen one
    (:func:`export.precision.records.kept_file`). When no requested variant passes, ``destination`` is left
    untouched and the selection serves nothing (``served`` None, ``failure`` saying why). ``threads``:
    the intra-op threads the server gives the file (None: the process's), which every variant is built,
    gated and timed with (export/precision/timing.py).
    """
    if choice not in CHOICES:
        raise ExportError(f"precision {choice!r} is not one of {CHOICES}; use --precision auto to measure")
    progress = progress or ExportProgress()
    selection = Selection(
        model=model, choice=choice, capabilities=capabilities, candidates=[], served=None, reference=reference
    )
    selection.threads = threads
    built: dict[str, tuple[Path, Runner]] = {}
    try:
        with timing.serving_threads(threads):
            selection.candidates = _build_all(
                model, variants, destination, gate, choice, capabilities, built, progress
            )
            candidates = selection.candidates
            runners = {name: runner for name, (_, runner) in built.items()}
            _time(candidates, runners, workload, timing_min_s, progress=progress, model=model)
        passing = [c for c in candidates if c.status == "passed"]
        if not passing:
            selection.failure = nothing_passed(choice, candidates)
            logger.error("%s: %s\n%s", model, selection.failure, format_table(candidates, reference))
            return selection
        best = max(passing, key=lambda c: c.score)
        best.status, selection.served = "served", best.variant
        logger.info("%s: serving %s\n%s", model, best.variant, format_table(candidates, reference))
        _move(built.pop(best.variant)[0], destination)
        if keep_dir is not None:
            _keep(passing, built, keep_dir, destination.suffix)
    finally:
        for path, _ in built.values():
            path.unlink(missing_ok=True)
    return selection


def _build_all(
    model: str,
    variants: Sequence[Variant],
    destination: Path,
    gate: Callable[[Runner], GateResult],
    choice: str,
    capabilities: Capabilities,
    built: dict[str, tuple[Path, Runner]],
    progress: ExportProgress,
) -> list[Candidate]:
    """Each variant's candidate; the files of those that passed go into ``built`` (name -> file, runner)."""
    to_build = [v for v in variants if _skipped(v, choice, capabilities) is None]
    progress.expect(model, len(to_build))
    candidates = []
    for variant in variants:
        step = functools.partial(_step, progress, f"{model} {variant.name}")
        candidate, outcome = _build_and_gate(variant, destination, gate, choice, capabilities, step)
        candidates.append(candidate)
        if outcome is not None:
            built[variant.name] = outcome
        if variant in to_build:
            progress.variant_done(model)
    return candidates


def nothing_passed(choice: str, candidates: Sequence[Candidate]) -> str:
    """Why no variant can be served: each tried variant's status and reason."""
    tried = [c for c in candidates if c.status not in ("not requested", "not runnable here")]
    why = "; ".join(f"{c.variant}: {c.status} ({c.reason})" for c in tried)
    return (
        f"no variant passed for --precision {choice} ({why or 'none of them is runnable here'}); "
        "the old file, if any, is kept"
    )


def _move(path: Path, destination: Path) -> None:
    os.replace(path, destination)
    os.chmod(destination, 0o644)  # mkstemp makes 0600; the server (maybe another user) must read it


def _keep(passing: list[Candidate], built: dict[str, tuple[Path, Runner]], folder: Path, suffix: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob(f"*{suffix}"):
        old.unlink()  # files kept by an earlier export: they describe other weights or code
    for candidate in passing:
        if candidate.precision in KEPT_PRECISIONS and candidate.variant in built:
            name = f"{candidate.variant}{suffix}"
            _move(built.pop(candidate.variant)[0], folder / name)
            candidate.kept_file = name


def _build_and_gate(
    variant: Variant,
    destination: Path,
    gate: Callable[[Runner], GateResult],
    choice: str,
    capabilities: Capabilities,
    step: Callable[[str], None],
) -> tuple[Candidate, tuple[Path, Runner] | None]:
    candidate = Candidate(
        variant=variant.name,
        precision=variant.precision,
        device=variant.device,
        status="",
        runtime=variant.runtime,
    )
    skipped = _skipped(variant, choice, capabilities)
    if skipped is not None:
        candidate.status, candidate.reason = skipped
        return candidate, None
    handle, name = tempfile.mkstemp(
        prefix=f".{destination.name}.{variant.name}.", suffix=".tmp", dir=destination.parent
    )
    os.close(handle)
    path = Path(name)
    stage = "building"
    try:
        step(stage)
        runner = variant.build(path)
        stage = "gating"
        step(stage)
        candidate.gate = gate(runner)
        if candidate.gate.passed and variant.feed is not None:  # an ONNX file: the serving runtime too
            stage = f"gating with {serving_runtime.LABEL}"
            step(stage)
            candidate.serving_gate = serving_runtime.serving_gate(
                path, variant.device, variant.feed, gate, cuda_options=variant.cuda_options
            )
    except Exception as e:  # noqa: BLE001 - any failure of one variant is recorded; the others go on
        path.unlink(missing_ok=True)
        candidate.status, candidate.reason = "error", f"{stage}: {type(e).__name__}: {e}"
        logger.warning("%s: %s", variant.name, candidate.reason)
        return candidate, None
    logger.info("%s: %s", variant.name, candidate.gate.summary())
    if candidate.serving_gate is not None:
        logger.info("%s, %s: %s", variant.name, serving_runtime.LABEL, candidate.serving_gate.summary())
    serving_failures = (candidate.serving_gate or candidate.gate).failures
    failures = candidate.gate.failures or [f"{serving_runtime.LABEL}: {f}" for f in serving_failures]
    if failures:
        path.unlink(missing_ok=True)
        candidate.status, candidate.reason = "failed gate", "; ".join(failures)
        return candidate, None
    candidate.status = "passed"
    return candidate, (path, runner)


def _step(progress: ExportProgress, what: str, stage: str) -> None:
    progress.step(f"{what}: {stage}")


def _skipped(variant: Variant, choice: str, capabilities: Capabilities) -> tuple[str, str] | None:
    """(status, reason) of a variant this export does not build, or None when it builds it."""
    if choice not in ("auto", variant.precision):
        return "not requested", f"--precision {choice}"
    reason = device.why_unavailable(variant.precision, variant.device, capabilities)
    return None if reason is None else ("not runnable here", reason)


def _time(
    candidates: list[Candidate],
    runners: dict[str, Runner],
    workload: dict[int, list[Batch]],
    min_s: float,
    *,
    progress: ExportProgress,
    model: str = "",
) -> None:
    """Items/s of each passing candidate at each batch size (export/precision/timing.py): interleaved rounds,
    each size warmed up in the first, the best round kept. Batch 1 and the largest size are timed for
    ``min_s`` per round, the sizes between (the rest of the curve) for at most timing.CURVE_MIN_S; every
    size in every round, so that the curve compares them alike. A candidate whose runner raises becomes an
    error (and is no longer timed)."""
    ends = {min(workload), max(workload)} if workload else set()
    for round_ in range(1, timing.TIMING_ROUNDS + 1):
        for candidate in candidates:
            if candidate.status != "passed":
                continue
            progress.step(f"{model} {candidate.variant}: timing, round {round_} of {timing.TIMING_ROUNDS}")
            try:
                for size, batches in workload.items():
                    runner = runners[candidate.variant]
                    size_s = min_s if size in ends else min(min_s, timing.CURVE_MIN_S)
                    rate = timing.items_per_second(runner, batches, min_s=size_s, warm=round_ > 1)
                    candidate.items_per_s[size] = max(rate, candidate.items_per_s.get(size, 0.0))
            except Exception as e:  # noqa: BLE001 - recorded; the other candidates are still timed
                candidate.status, candidate.reason = "error", f"timing: {type(e).__name__}: {e}"
                candidate.items_per_s = {}
                logger.warning("%s: %s", candidate.variant, candidate.reason)


def format_table(candidates: Sequence[Candidate], reference: GateResult | None = None) -> str:
    """A plain-text table of every candidate: status, gate numbers, items/s; then the reference, if any."""
    lines = []
    for c in candidates:
        speed = ", ".join(f"b{size} {rate:.0f}/s" for size, rate in c.items_per_s.items())
        gate = c.gate.summary() if c.gate else ""
        serving = f"{serving_runtime.LABEL}: {c.serving_gate.summary()}" if c.serving_gate else ""
        detail = " | ".join(part for part in (speed, gate, serving, c.reason if not c.gate else "") if part)
        lines.append(f"    {c.variant:<28} {c.status:<18} {detail}")
    if reference is not None:
        lines.append(f"    reference ({reference.gate}): {reference.summary()}")
    return "\n".join(lines)
