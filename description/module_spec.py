"""The ``module`` section of a ``torch_module`` description: the user's code and everything Triton serves.

A description of kind ``torch_module`` (model_descriptions/*.yaml) names the user's own code and states,
once, what the served models look like; their config.pbtxt files are generated from it
(description/generated_configs.py). Its section::

    module:
      model: ../src/churn.py:load_model          # called with the weights' path
      check_inputs: ../src/churn.py:check_rows   # called with no arguments (see below)
      script: false                              # true: torch.jit.script instead of tracing
      inputs:
        - {name: FEATURES, dtype: FP32, dims: [12]}
        - {name: PLAN, dtype: INT64, dims: [1], range: [0, 4]}
      outputs:
        - {name: LOGITS, dtype: FP32, dims: [2], metric: max_abs_diff, tolerance: 1.0e-5,
           variant_tolerance: 0.05}
      max_batch_size: 64
      dynamic_batching: {max_queue_delay_us: 500, preferred_batch_sizes: [16, 64]}
      instance_groups: [{kind: KIND_GPU, count: 1}]

A callable is ``path/to/file.py:function`` (relative to the description's folder) or an importable
``package.module:function``. Inputs are the arguments of the model's ``forward`` in order, outputs what
it returns in order; ``dims`` exclude the batch axis and a variable axis is -1. Each is a served tensor
(tritonrepo/tensors.py: ``dtype`` is its ``datatype``), which an input extends with ``range``: it bounds an
integer input (categorical ids inside an embedding's table). Where the description names the model that
prepares the inputs (``preprocessing: {model: NAME}``), ``check_inputs`` is called with that model's
folder (export/torch_module/kind.py). Each output is checked against eager PyTorch with its ``metric``:
``max_abs_diff`` (at most ``tolerance``), ``cosine`` (the lowest row's, at least ``tolerance``) or
``top1_agreement`` (the share of rows whose arg-max agrees, at least ``tolerance``);
``variant_tolerance`` (default: ``tolerance``) gates the reduced precisions. Every error names the
model, the field and what would fix it.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from description.errors import DescriptionError
from description.reader import Reader, entries
from tritonrepo.tensors import TensorSpec

# Triton datatype -> torch dtype name, for each datatype a module's tensors may have (their numpy dtype:
# TensorSpec.numpy_dtype).
DTYPES = {
    "FP32": "float32",
    "FP16": "float16",
    "FP64": "float64",
    "INT64": "int64",
    "INT32": "int32",
    "INT16": "int16",
    "INT8": "int8",
    "UINT8": "uint8",
    "BOOL": "bool",
}
FLOAT_DTYPES = ("FP32", "FP16", "FP64")
INTEGER_DTYPES = ("INT64", "INT32", "INT16", "INT8", "UINT8")
# metric -> True when larger is better (the value must be at least the tolerance)
METRICS = {"max_abs_diff": False, "cosine": True, "top1_agreement": True}
INSTANCE_KINDS = ("KIND_GPU", "KIND_CPU")
DEFAULT_MAX_QUEUE_SIZE = 128
DEFAULT_QUEUE_TIMEOUT_US = 1_000_000
MAX_BUDGET_MS = 60_000  # a minute: beyond it a budget is a typo (seconds meant), not a latency target
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True, kw_only=True)
class InputDecl(TensorSpec):
    value_range: tuple[int, int] | None = None  # inclusive bounds of an integer input


@dataclass(frozen=True, kw_only=True)
class OutputDecl(TensorSpec):
    metric: str
    tolerance: float
    variant_tolerance: float

    def passes(self, value: float, *, variant: bool = False) -> bool:
        limit = self.variant_tolerance if variant else self.tolerance
        return value >= limit if METRICS[self.metric] else value <= limit  # NaN fails both

    def describe_limit(self, *, variant: bool = False) -> str:
        limit = self.variant_tolerance if variant else self.tolerance
        return f"{'at least' if METRICS[self.metric] else 'at most'} {limit:g}"


@dataclass(frozen=True, kw_only=True)
class DynamicBatching:
    max_queue_delay_us: int
    preferred_batch_sizes: tuple[int, ...]
    max_queue_size: int = DEFAULT_MAX_QUEUE_SIZE
    queue_timeout_us: int = DEFAULT_QUEUE_TIMEOUT_US
    # The time a batch may take to compute, from which the derivation chooses the preferred sizes and delay
    # on the export's measured batch-cost curve where no value is stated by hand (description/batching.py);
    # None: the stated values everywhere.
    latency_budget_ms: float | None = None


@dataclass(frozen=True, kw_only=True)
class InstanceGroup:
    kind: str
    count: int


@dataclass(frozen=True, kw_only=True)
class ModuleSpec:
    model: str  # "file.py:function" or "package.module:function", called with the weights' path
    # the same, called with no arguments (or the preprocessing model's folder): {input name: rows}, or a
    # list of those
    check_inputs: str
    script: bool
    inputs: tuple[InputDecl, ...]
    outputs: tuple[OutputDecl, ...]
    max_batch_size: int
    dynamic_batching: DynamicBatching
    instance_groups: tuple[InstanceGroup, ...]


def parse_module(data: Any, *, model: str) -> ModuleSpec:
    """The ``module`` section of description ``model``; DescriptionError names the field and the fix."""
    section = Reader(model, "module", data, "; see docs/your-model-module.md")
    spec = ModuleSpec(
        model=_callable(section, "model"),
        check_inputs=_callable(section, "check_inputs"),
        script=_flag(section, "script"),
        inputs=tuple(_input(model, i, entry) for i, entry in enumerate(entries(section, "inputs"))),
        outputs=tuple(_output(model, i, entry) for i, entry in enumerate(entries(section, "outputs"))),
        max_batch_size=section.integer("max_batch_size", minimum=1),
        dynamic_batching=parse_batching(model, "module.dynamic_batching", section.get("dynamic_batching")),
        instance_groups=tuple(
            parse_instances(model, f"module.instance_groups[{i}]", entry)
            for i, entry in enumerate(entries(section, "instance_groups"))
        ),
    )
    section.done()
    _check_names(model, spec)
    too_large = [size for size in spec.dynamic_batching.preferred_batch_sizes if size > spec.max_batch_size]
    if too_large:
        raise section.error(
            "dynamic_batching.preferred_batch_sizes",
            f"{too_large} exceed max_batch_size {spec.max_batch_size}",
            "prefer sizes up to max_batch_size",
        )
    return spec


def _callable(section: Reader, key: str) -> str:
    value = section.get(key, fix="name a function as path/to/file.py:function or package.module:function")
    target, _, attribute = str(value).rpartition(":")
    if not isinstance(value, str) or not target or not attribute.isidentifier():
        raise section.error(
            key, f"{value!r} is not a callable", "write path/to/file.py:function or package.module:function"
        )
    return value


def _flag(section: Reader, key: str) -> bool:
    value = section.get(key, False)
    if not isinstance(value, bool):
        raise section.error(key, f"{value!r} is not true or false", "write true or false")
    return value


def parse_tensor(
    model: str, where: str, data: Any, *, dtypes: Collection[str] = tuple(DTYPES)
) -> tuple[Reader, dict[str, Any]]:
    """A tensor's name, datatype (one of ``dtypes``) and dims; the caller reads its other keys."""
    entry = Reader(model, where, data)
    name = entry.get("name")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise entry.error(
            "name", f"{name!r} is not a tensor name", "use letters, digits and _, e.g. FEATURES"
        )
    dtype = entry.get("dtype")
    if dtype not in dtypes:
        raise entry.error("dtype", f"{dtype!r} is not a datatype", f"use one of {sorted(dtypes)}")
    dims = entry.get("dims")
    if not isinstance(dims, list) or not dims or any(type(d) is not int or d == 0 or d < -1 for d in dims):
        raise entry.error(
            "dims", f"{dims!r} is not a list of sizes", "list each axis after the batch axis: a size, or -1"
        )
    return entry, {"name": name, "datatype": dtype, "dims": tuple(dims)}


def _input(model: str, index: int, data: Any) -> InputDecl:
    entry, common = parse_tensor(model, f"module.inputs[{index}]", data)
    bounds = entry.get("range", None)
    value_range = None
    if bounds is not None:
        if common["datatype"] not in INTEGER_DTYPES:
            raise entry.error(
                "range", f"{common['name']} is {common['datatype']}", "bound integer inputs only"
            )
        if not (isinstance(bounds, list) and len(bounds) == 2 and all(type(b) is int for b in bounds)) or (
            not bounds[0] <= 0 <= bounds[1]
        ):
            raise entry.error(
                "range",
                f"{bounds!r} is not [low, high] around 0",
                "give the inclusive integer bounds, containing 0 (the warm-up sends zeros)",
            )
        value_range = (bounds[0], bounds[1])
    entry.done()
    return InputDecl(**common, value_range=value_range)


def _output(model: str, index: int, data: Any) -> OutputDecl:
    entry, common = parse_tensor(model, f"module.outputs[{index}]", data)
    metric = entry.get("metric", fix=f"choose one of {sorted(METRICS)}")
    if metric not in METRICS:
        raise entry.error("metric", f"{metric!r} is not a metric", f"choose one of {sorted(METRICS)}")
    if metric != "max_abs_diff" and common["datatype"] not in FLOAT_DTYPES:
        raise entry.error("metric", f"{metric} compares floating-point outputs", "use max_abs_diff")
    tolerance = entry.number("tolerance")
    variant_tolerance = entry.number("variant_tolerance", tolerance)
    larger_is_better = METRICS[metric]
    if tolerance < 0 or (larger_is_better and tolerance > 1):
        raise entry.error("tolerance", f"{tolerance:g} is out of range", _tolerance_fix(metric))
    looser = variant_tolerance <= tolerance if larger_is_better else variant_tolerance >= tolerance
    if not looser or variant_tolerance < 0:
        raise entry.error(
            "variant_tolerance",
            f"{variant_tolerance:g} is stricter than tolerance {tolerance:g}",
            "the reduced precisions' limit must be at least as loose as fp32's",
        )
    entry.done()
    return OutputDecl(**common, metric=metric, tolerance=tolerance, variant_tolerance=variant_tolerance)


def _tolerance_fix(metric: str) -> str:
    if METRICS[metric]:
        return f"{metric} is a share from 0 to 1; fp32 is usually 0.9999 or more"
    return "max_abs_diff is a non-negative difference, such as 1.0e-5"


def parse_batching(model: str, where: str, data: Any) -> DynamicBatching:
    section = Reader(model, where, data)
    preferred = section.get("preferred_batch_sizes", [])
    if (
        not isinstance(preferred, list)
        or any(type(s) is not int or s < 1 for s in preferred)
        or (preferred != sorted(set(preferred)))
    ):
        raise section.error(
            "preferred_batch_sizes",
            f"{preferred!r} is not a list of sizes",
            "list ascending sizes, e.g. [16, 64]",
        )
    batching = DynamicBatching(
        max_queue_delay_us=section.integer("max_queue_delay_us"),
        preferred_batch_sizes=tuple(preferred),
        max_queue_size=section.integer("max_queue_size", DEFAULT_MAX_QUEUE_SIZE, minimum=1),
        queue_timeout_us=section.integer("queue_timeout_us", DEFAULT_QUEUE_TIMEOUT_US, minimum=1),
        latency_budget_ms=_latency_budget(section),
    )
    section.done()
    return batching


def _latency_budget(section: Reader) -> float | None:
    budget = section.get("latency_budget_ms", None)
    if budget is None:
        return None
    if isinstance(budget, bool) or not isinstance(budget, (int, float)) or not 0 < budget <= MAX_BUDGET_MS:
        raise section.error(
            "latency_budget_ms",
            f"{budget!r} is not a number of milliseconds above 0 and at most {MAX_BUDGET_MS}",
            "give the time one batch may take to compute, e.g. 200, or leave it out",
        )
    return float(budget)


def parse_instances(model: str, where: str, data: Any) -> InstanceGroup:
    entry = Reader(model, where, data)
    kind = entry.get("kind")
    if kind not in INSTANCE_KINDS:
        raise entry.error("kind", f"{kind!r} is not an instance kind", f"use one of {list(INSTANCE_KINDS)}")
    group = InstanceGroup(kind=kind, count=entry.integer("count", 1, minimum=1))
    entry.done()
    return group


def _check_names(model: str, spec: ModuleSpec) -> None:
    """Unique names; a ``NAME__<index>`` name (libtorch's convention) must carry its own position."""
    names = [t.name for t in (*spec.inputs, *spec.outputs)]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise DescriptionError(
            f"model {model!r}: module: tensor names {repeated} repeat; give each its own name"
        )
    for role, tensors in (("inputs", spec.inputs), ("outputs", spec.outputs)):
        for position, tensor in enumerate(tensors):
            _, marker, suffix = tensor.name.rpartition("__")
            if marker and suffix.isdigit() and int(suffix) != position:
                raise DescriptionError(
                    f"model {model!r}: module.{role}[{position}].name: {tensor.name} names position "
                    f"{suffix} (libtorch binds NAME__<index> by index); call it NAME__{position} or drop "
                    "the suffix"
                )
