"""The ``torch_module`` kind of the export pipeline: any ``torch.nn.Module`` the user's own code returns.

Its description (description/module_spec.py) names a function that returns the model, in eval mode with its
weights loaded (called with the weights' path), and a function that returns real check inputs. Before
anything is written (:meth:`TorchModuleKind.prepare`), the model is loaded and run on the check inputs,
and every declared input and output is checked against what it takes and returns (names, count,
datatypes, dims), and the served module is traced (or scripted) and compared with eager PyTorch: an error
names the model, the field and the fix. Its configs are generated from the description
(description/generated_configs.py). A description may name the Python model that prepares its inputs
(``preprocessing: {model: NAME}``, the image preprocessing for a classifier): that model's outputs must
be the module's inputs (count, datatypes, dims, in order), and ``check_inputs`` is called with its folder,
to make the check rows with the served code and parameters. Each fp32 file is verified against eager
PyTorch on every check row and at batch sizes 1 and ``max_batch_size`` with each output's metric and
tolerance; the reduced precisions (export/torch_module/variants.py) are gated with the same metrics and their
``variant_tolerance``, timed, and the fastest that passes is served (export/precision/selection.py).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from tritonclient.grpc.model_config_pb2 import DataType

from description import (
    config_rules,
    config_spec,
    generated_configs,
    module_code,
    module_spec,
    produced_weights,
)
from description.model import ModelDescription
from description.module_spec import ModuleSpec
from export.common import ExportError, ModelConfig
from export.kinds import Made, Parity, Plan, Target
from export.precision import cuda_runtime
from export.precision.gates import GateResult
from export.precision.selection import Runner
from export.torch_module import checks as module_checks
from export.torch_module import variants as module_variants
from export.torch_module.checks import Batch, eager, measure
from tritonrepo.atomic_files import sha256_file
from tritonrepo.configs import load_model_config
from tritonrepo.errors import RepositoryError

TIMING_BATCH = 32
EXAMPLE_ROWS = 2  # the rows a trace is recorded on: more than one, so no size-1 axis is specialised


@dataclass(kw_only=True)
class Prepared:
    """The user's model in eval mode, its check batches and eager fp32's outputs for each."""

    name: str
    spec: ModuleSpec
    model: nn.Module
    batches: list[Batch]
    reference: list[Batch]
    weights_sha256: str

    @property
    def example(self) -> Batch:
        return tuple(array[:EXAMPLE_ROWS] for array in self.batches[0])


def _where(description: ModelDescription) -> str:
    return f"model {description.name!r}"


def _spec(description: ModelDescription) -> ModuleSpec:
    if description.module is None:
        raise ExportError(f"{_where(description)}: kind torch_module needs a module section")
    return description.module


def _call(function: Callable[..., Any], *args: Any, where: str) -> Any:
    try:
        return function(*args)
    except Exception as e:
        raise ExportError(
            f"{where}: {module_code.describe_call(function)} raised {type(e).__name__}: {e}; fix the function"
        ) from e


def load_model(description: ModelDescription) -> nn.Module:
    """The model the description's ``module.model`` returns for its weights, checked to be servable."""
    spec, where = _spec(description), f"{_where(description)}: module.model"
    function = module_code.load_callable(spec.model, description.folder, where=where)
    model = _call(function, description.weights_path(), where=where)
    if not isinstance(model, nn.Module):
        raise ExportError(f"{where}: returned a {type(model).__name__}; return the torch.nn.Module itself")
    if model.training:
        raise ExportError(
            f"{where}: returned a module in training mode (dropout and batch norm would differ from "
            "serving); return model.eval()"
        )
    return model


def preprocessing_model(description: ModelDescription, repository: Path) -> Path | None:
    """The folder of the model that prepares the module's inputs (``preprocessing.model``), checked to
    produce exactly the declared inputs; None when the description names none."""
    if not description.preprocessing:
        return None
    where = f"{_where(description)}: preprocessing"
    if set(description.preprocessing) != {"model"}:
        raise ExportError(
            f"{where}: keys {sorted(description.preprocessing)}; a {description.kind} names the repository "
            "model that prepares its inputs as preprocessing: {model: NAME}"
        )
    folder = Path(repository) / description.preprocessing["model"]
    try:
        config = load_model_config(folder)
    except RepositoryError as e:
        raise ExportError(f"{where}.model: {e}; name a model of the repository") from e
    produced = [
        (o.name, DataType.Name(o.data_type).removeprefix("TYPE_"), list(o.dims)) for o in config.output
    ]
    declared = [(d.name, d.datatype, list(d.dims)) for d in _spec(description).inputs]
    if [p[1:] for p in produced] != [d[1:] for d in declared]:
        raise ExportError(
            f"{where}.model: {folder.name} outputs {produced}, module.inputs declares {declared}; its "
            "outputs feed the module's inputs in order: make the datatypes and dims agree"
        )
    return folder


def check_batches(description: ModelDescription, repository: Path) -> list[Batch]:
    spec, where = _spec(description), f"{_where(description)}: module.check_inputs"
    function = module_code.load_callable(spec.check_inputs, description.folder, where=where)
    preprocessing = preprocessing_model(description, repository)
    arguments = () if preprocessing is None else (preprocessing,)
    return module_checks.check_groups(
        _call(function, *arguments, where=where), spec, where=_where(description)
    )


def check_trace(prepared: Prepared) -> None:
    """The served module traces (or scripts) without the tracer's warnings and gives eager's outputs on
    every check batch; ExportError naming the fix otherwise."""
    spec, where = prepared.spec, f"model {prepared.name!r}: module"
    how = "torch.jit.script" if spec.script else "torch.jit.trace"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", torch.jit.TracerWarning)
        try:
            traced = module_variants.trace(
                prepared.model, spec, prepared.example, dtype=torch.float32, device="cpu"
            )
        except Exception as e:
            first_line = str(e).strip().splitlines()[0] if str(e).strip() else ""
            fix = (
                "make forward TorchScript-compatible or trace it (script: false)"
                if spec.script
                else ("make forward take and return tensors, or set module.script: true")
            )
            raise ExportError(f"{where}: {how} failed: {type(e).__name__}: {first_line}; {fix}") from e
    _check_argument_order(traced, spec, where)
    tracer = [w for w in caught if issubclass(w.category, torch.jit.TracerWarning)]
    if tracer:
        raise ExportError(
            f"{where}: the trace may not be faithful: {str(tracer[0].message).splitlines()[0]}; set "
            "module.script: true (torch.jit.script keeps control flow) or compute with tensor operations"
        )
    for batch, expected in zip(prepared.batches, prepared.reference, strict=True):
        with torch.no_grad():
            actual = tuple(t.numpy() for t in traced(*(torch.from_numpy(a) for a in batch)))
        for decl, want, got in zip(spec.outputs, expected, actual, strict=True):
            value = measure(decl.metric, want, got)
            if not decl.passes(value):
                raise ExportError(
                    f"{where}: the {how} output {decl.name} differs from eager PyTorch on {len(batch[0])} "
                    f"check rows ({decl.metric} {value:.6g}, allowed {decl.describe_limit()}): the module "
                    "depends on its input values in Python; set module.script: true"
                )


def _check_argument_order(traced: Any, spec: ModuleSpec, where: str) -> None:
    """Inputs named as forward's arguments must come in its order: libtorch binds such names by name,
    everything else here (and libtorch for other names) by position."""
    arguments = [argument.name for argument in traced.forward.schema.arguments[1:]]
    declared = [decl.name for decl in spec.inputs]
    if sorted(arguments) == sorted(declared) and arguments != declared:
        raise ExportError(
            f"{where}.inputs: declared in the order {declared}, forward takes {arguments}; list them in "
            "forward's order (libtorch binds inputs named as forward's arguments by name)"
        )


def verify(runner: Runner, prepared: Prepared, *, what: str) -> Parity:
    """``runner`` against eager PyTorch on every check batch and on the first cycled to batch sizes 1 and
    ``max_batch_size``, with each output's metric and fp32 tolerance; ExportError on any miss."""
    first = prepared.batches[0]
    sizes = sorted({1, prepared.spec.max_batch_size})
    cycled = [tuple(np.ascontiguousarray(a[np.arange(size) % len(a)]) for a in first) for size in sizes]
    cases = list(zip(prepared.batches, prepared.reference, strict=True))
    cases += [(batch, eager(prepared.model, batch, prepared.spec, where=what)) for batch in cycled]
    worst: dict[str, float] = {}
    for batch, expected in cases:
        actual = _outputs(runner(batch))
        if len(actual) != len(prepared.spec.outputs):
            names = [decl.name for decl in prepared.spec.outputs]
            raise ExportError(
                f"{what}: the file answered {len(actual)} of the {len(names)} declared outputs {names}; "
                "every output is compared with eager PyTorch"
            )
        for decl, want, got in zip(prepared.spec.outputs, expected, actual, strict=True):
            value = measure(decl.metric, want, got)
            if not decl.passes(value):
                raise ExportError(
                    f"{what}: batch of {len(batch[0])}: {decl.name} {decl.metric} {value:.6g} vs eager "
                    f"PyTorch, allowed {decl.describe_limit()}"
                )
            worst[decl.name] = _worse(decl.metric, worst.get(decl.name, value), value)
    return _parity(prepared.spec, worst, sizes)


def _worse(metric: str, a: float, b: float) -> float:
    return min(a, b) if module_spec.METRICS[metric] else max(a, b)


def _parity(spec: ModuleSpec, worst: dict[str, float], sizes: list[int]) -> Parity:
    first, *others = spec.outputs
    detail = "".join(f"; {d.name} {d.metric} {worst[d.name]:.7g} (tolerance {d.tolerance:g})" for d in others)
    return Parity(
        metric=f"{first.name} {first.metric}",
        value=worst[first.name],
        tolerance=first.tolerance,
        detail=f"{detail}, every check row and batch sizes {sizes}",
    )


def _outputs(result: Any) -> Batch:
    """A runner's outputs as a tuple (a runner of a one-output file answers its array)."""
    return tuple(result) if isinstance(result, (tuple, list)) else (result,)


def timing_workload(prepared: Prepared) -> dict[int, list[tuple[Batch, int]]]:
    """Batch 1: the first check rows one at a time; a full batch: each check batch cycled to its size."""
    size = min(TIMING_BATCH, prepared.spec.max_batch_size)
    first = prepared.batches[0]
    singles = [(tuple(a[i : i + 1] for a in first), 1) for i in range(min(TIMING_BATCH, len(first[0])))]
    full = [
        (tuple(np.ascontiguousarray(a[np.arange(size) % len(a)]) for a in batch), size)
        for batch in prepared.batches
    ]
    return {1: singles, size: full} if size > 1 else {1: singles}


class TorchModuleKind:
    """Any torch.nn.Module, served as it is, with generated configs (export/kinds.py)."""

    def check_config(
        self, description: ModelDescription, repository: Path, config: ModelConfig, made: Made
    ) -> None:
        preprocessing_model(description, repository)

    def fingerprint_files(self, description: ModelDescription) -> list[Path]:
        spec, folder = _spec(description), description.folder
        weights = description.weights_path()
        # A weights folder inside an installed package: its files, not the bytecode Python caches beside them.
        files = (
            sorted(
                p
                for p in weights.rglob("*")
                if p.is_file() and "__pycache__" not in p.relative_to(weights).parts
            )
            if weights.is_dir()
            else [weights]
        )
        files += [
            module_code.code_file(spec.model, folder, where=f"{_where(description)}: module.model"),
            module_code.code_file(
                spec.check_inputs, folder, where=f"{_where(description)}: module.check_inputs"
            ),
        ]
        if description.weights is not None and description.weights.produced_by:
            files.append(folder / description.weights.produced_by)
        modules = (
            *(config_rules, config_spec, cuda_runtime, generated_configs),
            *(module_checks, module_code, module_spec, module_variants, produced_weights),
        )
        return [*files, Path(__file__), *(Path(m.__file__ or "") for m in modules)]

    def prepare(self, description: ModelDescription, repository: Path, made: Made) -> Prepared:
        spec = _spec(description)
        model = load_model(description)
        batches = check_batches(description, repository)
        weights = description.weights_path()
        prepared = Prepared(
            name=description.name,
            spec=spec,
            model=model,
            batches=batches,
            reference=[eager(model, batch, spec, where=_where(description)) for batch in batches],
            weights_sha256=sha256_file(weights) if weights.is_file() else "",
        )
        check_trace(prepared)
        return prepared

    def plan(self, prepared: Prepared, target: Target) -> Plan:
        config = target.config
        spec = prepared.spec

        def fp32(path: Path) -> Runner:
            if target.file_format == "onnx":
                runner = module_variants.onnx_file(prepared.model, spec, prepared.example, path)
            else:
                runner = module_variants.torchscript_file(
                    prepared.model, spec, prepared.example, path, dtype=torch.float32, device="cpu"
                )
            plan.parity.append(verify(runner, prepared, what=f"{config.name} ({path.name})"))
            return runner

        def gate(runner: Runner) -> GateResult:
            candidate = [_outputs(runner(batch)) for batch in prepared.batches]
            return module_checks.gate_result(spec.outputs, prepared.reference, candidate)

        bounds = {d.name: list(d.value_range) for d in spec.inputs if d.value_range is not None}
        plan = Plan(
            variants=module_variants.variants(
                target.file_format,
                model=prepared.model,
                spec=spec,
                example=prepared.example,
                fp32=fp32,
                cuda_options=cuda_runtime.provider_options(config),
                capabilities=target.capabilities,
            ),
            gate=gate,
            workload=timing_workload(prepared),
            details={"input_bounds": bounds, "weights_sha256": prepared.weights_sha256, "module": spec.model},
        )
        return plan

    def support_files(self, description: ModelDescription, repository: Path, made: Made) -> dict[Path, Path]:
        return {}


KIND = TorchModuleKind()
