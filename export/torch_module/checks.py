"""What a ``torch_module`` is checked against: the user's check inputs, eager PyTorch, and one metric per
output (description/module_spec.py).

- :func:`check_groups`: the rows ``check_inputs()`` returned, checked against the declared inputs (names,
  datatypes, dims, ranges) and cut into batches of at most ``max_batch_size`` rows;
- :func:`eager`: the model's outputs for a batch, checked against the declared outputs (count, datatype,
  dims, a batch axis);
- :func:`measure` and :func:`gate_result`: each output's metric between eager fp32 and an exported file.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from description.module_spec import DTYPES, InputDecl, ModuleSpec, OutputDecl
from export.common import ExportError
from export.precision.gates import GateResult

Batch = tuple[np.ndarray, ...]  # one array per declared input (or output), in declared order


def torch_dtype(datatype: str) -> torch.dtype:
    return getattr(torch, DTYPES[datatype])


def check_groups(value: Any, spec: ModuleSpec, *, where: str) -> list[Batch]:
    """``check_inputs()``'s result ({name: rows}, or a list of those whose variable axes differ) as
    batches of at most ``max_batch_size`` rows, each checked against the declared inputs."""
    groups = value if isinstance(value, list) else [value]
    batches: list[Batch] = []
    for index, group in enumerate(groups):
        label = f"{where}: check_inputs()" + (f"[{index}]" if isinstance(value, list) else "")
        arrays = _group(group, spec.inputs, label)
        rows = len(arrays[0])
        for start in range(0, rows, spec.max_batch_size):
            batches.append(
                tuple(np.ascontiguousarray(a[start : start + spec.max_batch_size]) for a in arrays)
            )
    if not batches:
        raise ExportError(f"{where}: check_inputs() returned no rows; return real rows of every input")
    return batches


def _group(group: Any, inputs: Sequence[InputDecl], label: str) -> Batch:
    declared = [decl.name for decl in inputs]
    if not isinstance(group, dict) or sorted(group) != sorted(declared):
        found = sorted(group) if isinstance(group, dict) else type(group).__name__
        raise ExportError(
            f"{label} returned {found}; return {{input name: numpy array of rows}} for the declared inputs "
            f"{declared}"
        )
    arrays = []
    for decl in inputs:
        array = np.asarray(group[decl.name])
        if array.dtype != decl.numpy_dtype:
            raise ExportError(
                f"{label}: {decl.name} is {array.dtype}, the description declares {decl.datatype} "
                f"({decl.numpy_dtype}); return {decl.numpy_dtype} rows or declare the "
                "datatype the model takes"
            )
        if not decl.matches(array.shape) or array.shape[0] == 0:
            raise ExportError(
                f"{label}: {decl.name} has shape {list(array.shape)}; the description declares dims "
                f"{list(decl.dims)} after the batch axis; return rows of that shape or correct the dims"
            )
        if decl.value_range is not None and array.size:
            low, high = decl.value_range
            outside = array[(array < low) | (array > high)]
            if outside.size:
                raise ExportError(
                    f"{label}: {decl.name} holds {outside.flat[0]}, outside its range [{low}, {high}]; "
                    "return valid ids or widen module.inputs range"
                )
        arrays.append(array)
    rows = {len(a) for a in arrays}
    if len(rows) != 1:
        raise ExportError(f"{label}: the inputs have different row counts {sorted(rows)}; give each row once")
    return tuple(arrays)


def as_outputs(result: Any, *, what: str) -> tuple[torch.Tensor, ...]:
    """A model's result as a tuple of tensors: a tensor, or a tuple or list of them."""
    if isinstance(result, torch.Tensor):
        return (result,)
    if isinstance(result, (tuple, list)) and result and all(isinstance(t, torch.Tensor) for t in result):
        return tuple(result)
    raise ExportError(
        f"{what} returned a {type(result).__name__}; return a tensor, or a tuple of tensors in the order "
        "of module.outputs"
    )


def eager(model: torch.nn.Module, batch: Batch, spec: ModuleSpec, *, where: str) -> Batch:
    """The model's outputs for ``batch`` (eager float32 PyTorch), checked against the declared outputs."""
    tensors = [torch.from_numpy(array) for array in batch]
    try:
        with torch.no_grad():
            result = model(*tensors)
    except Exception as e:
        raise ExportError(
            f"{where}: the model failed on the check inputs: {type(e).__name__}: {e}; module.inputs must "
            f"be forward's arguments in order ({', '.join(d.name for d in spec.inputs)})"
        ) from e
    outputs = as_outputs(result, what=f"{where}: the model")
    if len(outputs) != len(spec.outputs):
        raise ExportError(
            f"{where}: module.outputs: the model returns {len(outputs)} tensor(s), the description declares "
            f"{len(spec.outputs)} ({', '.join(d.name for d in spec.outputs)}); declare one output per "
            "returned tensor, in order"
        )
    for index, (decl, tensor) in enumerate(zip(spec.outputs, outputs, strict=True)):
        _check_output(f"{where}: module.outputs[{index}]", decl, tensor, rows=len(batch[0]))
    return tuple(t.numpy() for t in outputs)


def _check_output(where: str, decl: OutputDecl, tensor: torch.Tensor, *, rows: int) -> None:
    if tensor.dtype != torch_dtype(decl.datatype):
        raise ExportError(
            f"{where}.dtype: {decl.name} is declared {decl.datatype}, the model returns {tensor.dtype}; "
            f"declare the model's datatype or return {torch_dtype(decl.datatype)}"
        )
    shape = tuple(tensor.shape)
    if not shape or shape[0] != rows:
        raise ExportError(
            f"{where}: {decl.name} has shape {list(shape)} for {rows} input rows; its first axis must be "
            "the batch (one result per row)"
        )
    if not decl.matches(shape):
        raise ExportError(
            f"{where}.dims: {decl.name} is declared {list(decl.dims)}, the model produces "
            f"{list(shape[1:])} after the batch axis; set dims: {list(shape[1:])} (-1: an axis that varies)"
        )


def measure(metric: str, reference: np.ndarray, candidate: np.ndarray) -> float:
    """``metric`` between two arrays of one shape (rows first); NaN when the shapes differ."""
    if reference.shape != candidate.shape:
        return float("nan")
    if reference.size == 0:
        return 0.0 if metric == "max_abs_diff" else 1.0
    a, b = reference.astype(np.float64), candidate.astype(np.float64)
    if metric == "max_abs_diff":
        return float(np.max(np.abs(a - b)))
    if metric == "top1_agreement":
        return float(np.mean(np.argmax(a, axis=-1) == np.argmax(b, axis=-1)))
    a, b = a.reshape(len(a), -1), b.reshape(len(b), -1)
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    both_zero = norms == 0
    cosines = np.where(both_zero, 1.0, (a * b).sum(axis=1) / np.where(both_zero, 1.0, norms))
    return float(cosines.min())


def measure_all(
    outputs: Sequence[OutputDecl], reference: list[Batch], candidate: list[Batch]
) -> dict[str, float]:
    """Each declared output's metric over every check batch; NaN (a failure) for an output the candidate
    did not answer, so that no output passes unseen."""
    measured: dict[str, float] = {}
    for index, decl in enumerate(outputs):
        if any(len(batch) <= index for batch in candidate):
            measured[decl.name] = float("nan")
            continue
        per_batch = [
            (len(expected[index]), measure(decl.metric, expected[index], actual[index]))
            for expected, actual in zip(reference, candidate, strict=True)
        ]
        measured[decl.name] = combined(decl.metric, per_batch)
    return measured


def combined(metric: str, per_batch: Sequence[tuple[int, float]]) -> float:
    """``metric`` over every row, from each batch's (rows, value), measured apart because a variable axis
    may differ from one batch to the next: the largest difference, the lowest cosine, or the share of
    rows that agree. NaN when any batch's is NaN."""
    values = [value for _, value in per_batch]
    if any(np.isnan(values)):
        return float("nan")
    if metric == "max_abs_diff":
        return max(values)
    if metric == "cosine":
        return min(values)
    rows = sum(count for count, _ in per_batch)
    return sum(count * value for count, value in per_batch) / rows


def failures(outputs: Sequence[OutputDecl], measured: dict[str, float], *, variant: bool) -> list[str]:
    """A line for each of ``outputs`` whose measured metric misses its limit."""
    return [
        f"{decl.name} {decl.metric} {measured[decl.name]:.6g}, allowed {decl.describe_limit(variant=variant)}"
        for decl in outputs
        if not decl.passes(measured[decl.name], variant=variant)
    ]


def gate_result(outputs: Sequence[OutputDecl], reference: list[Batch], candidate: list[Batch]) -> GateResult:
    """The reduced-precision gate: every output's metric within its ``variant_tolerance``."""
    measured = measure_all(outputs, reference, candidate)
    by_name = {decl.name: decl for decl in outputs}
    answered = min(len(batch) for batch in candidate)
    missing = [
        f"{decl.name} not answered (the file gave {answered} of {len(outputs)} outputs)"
        for decl in outputs[answered:]
    ]
    return GateResult(
        gate="torch_module: " + ", ".join(f"{d.name} {d.metric}" for d in outputs) + " vs eager fp32",
        samples=sum(len(batch[0]) for batch in reference),
        metrics={f"{name} {by_name[name].metric}": value for name, value in measured.items()},
        thresholds={f"{name} {by_name[name].metric}": by_name[name].variant_tolerance for name in measured},
        failures=missing + failures(outputs[:answered], measured, variant=True),
    )
