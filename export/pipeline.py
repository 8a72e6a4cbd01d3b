"""The one export pipeline: every model description goes through the same steps, in this order.

A description's configs are generated once (description/generated_configs.py) and handed to each step
that reads one; they are written before its files, once its model has been loaded and checked. For each
served file of a description (description/model.py): let the kind check its config, fingerprint
everything the file depends on and stop there when it is up to date; otherwise
load the model once, export and verify fp32, build the reduced precisions the description allows (and
export/precision/selection.py finds this machine can run), gate them, time the passing ones, serve the
fastest, write the manifest beside the file and the record under build/precision/. Then the kind's support
files. Every step is called from here; the kinds (export/efficientnet_lite/kind.py, export/minilm/kind.py,
export/torch_module/kind.py) only provide them.

Nothing one file does stops the others: a variant that fails is recorded and left out
(export/precision/selection.py), and a file that cannot be written (its config refused, its model not
loadable, no variant passing) is returned as a failed :class:`ExportResult`, with its record saying why, while
the next file and the next model go on.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx
import onnxruntime
import torch

from description.generated_configs import Generated, generate, native_spec, write_configs
from description.model import IMAGE_KIND, PYTHON_KIND, ModelDescription, ServedFile
from export.common import ModelConfig, fingerprint, is_up_to_date, shown, write_manifest
from export.efficientnet_lite import kind as image
from export.kinds import Kind, Parity, Plan, Target
from export.minilm import kind as text
from export.precision import device
from export.precision.records import batching_choice, write_record
from export.precision.selection import (
    Capabilities,
    Selection,
    Variant,
    curve_sizes,
    curve_workload,
    select_and_write,
)
from export.progress import ExportProgress
from export.torch_module import kind as module_kind
from tritonrepo.atomic_files import write_atomically
from tritonrepo.configs import ModelEntry
from tritonrepo.derive import derive_local_config
from tritonrepo.files import exported_file
from tritonrepo.paths import PRECISION_RECORDS

logger = logging.getLogger(__name__)

KINDS: dict[str, Kind] = {
    IMAGE_KIND: image.KIND,
    "sentence_encoder": text.KIND,
    "torch_module": module_kind.KIND,
}


@dataclass(frozen=True, kw_only=True)
class Options:
    repository: Path
    force: bool = False
    precision: str = "auto"  # "auto" serves the fastest variant that passes its gate; a precision pins it
    capabilities: Capabilities
    record_dir: Path = PRECISION_RECORDS
    timing_batches: tuple[int, ...] = ()  # the batch sizes each variant is timed at; (): the curve's
    progress: ExportProgress = field(default_factory=ExportProgress)  # quiet unless the command line asks
    files: frozenset[str] | None = None  # the served files to export (export/needed.py); None: every one


@dataclass(kw_only=True)
class ExportResult:
    """What the export did for one file of the repository."""

    model: str
    path: Path
    written: bool
    seconds: float = 0.0
    parity: Parity | None = None
    selection: Selection | None = None
    failure: str = ""  # why no servable file was written (the old file, if any, is left as it was)

    def __str__(self) -> str:
        if self.failure:
            return f"{self.model}: FAILED, no servable file: {self.failure}"
        if not self.written:
            return f"{self.model}: up to date ({shown(self.path)})"
        if self.selection is None:
            return f"{self.model}: wrote {shown(self.path)}"
        parity = f"; {self.parity}" if self.parity else ""
        served = self.selection.served
        return f"{self.model}: wrote {shown(self.path)} in {self.seconds:.1f} s, serving {served}{parity}"


def export_model(description: ModelDescription, options: Options) -> list[ExportResult]:
    """Every served file of ``description`` (each a no-op when up to date), then its support files. A file
    that fails is returned with its ``failure``; the others are still exported. A python_model has
    only its configs to write."""
    try:  # every config of the description, generated once: written, checked and read from here on
        made = generate(description, options.repository)
    except Exception as e:  # noqa: BLE001 - reported as this model's failure; the next model goes on
        model = description.served[0].model if description.served else description.name
        return [_failed(model, options.repository / model, e)]
    if description.kind == PYTHON_KIND:
        written = write_configs(description, options.repository, made)
        return [ExportResult(model=path.parent.name, path=path, written=True) for path in written]
    kind = KINDS[description.kind]
    prepared = _once(lambda: kind.prepare(description, options.repository, made))
    try:  # the configs are written once its model is loaded and checked
        configs = write_configs(description, options.repository, made, check=prepared)
    except Exception as e:  # noqa: BLE001 - reported as this model's failure; the next model goes on
        model = description.served[0].model
        return [_failed(model, options.repository / model, e)]
    results = [ExportResult(model=path.parent.name, path=path, written=True) for path in configs]
    results += [
        export_file(description, kind, served, prepared, options, made)
        for served in selected_files(description, options)
    ]
    try:
        support = kind.support_files(description, options.repository, made)
    except Exception as e:  # noqa: BLE001 - reported as this model's failure; the next model goes on
        model = description.served[0].model
        return [*results, _failed(model, options.repository / model, e)]
    for destination, source in support.items():
        if options.files is not None and destination.parent.parent.name not in options.files:
            continue
        try:
            results.append(copy_support_file(source, destination, description, options))
        except Exception as e:  # noqa: BLE001
            results.append(_failed(destination.parent.parent.name, destination, e))
    return results


def export_models(descriptions: Sequence[ModelDescription], options: Options) -> list[ExportResult]:
    """Every description in turn (:func:`export_model`), its results written to ``options.progress``; the
    results without a servable file."""
    progress = options.progress
    progress.start({d.name: estimated_variants(d, options) for d in descriptions})
    failed: list[ExportResult] = []
    for description in descriptions:
        started = time.perf_counter()
        progress.model(description.name)
        results = export_model(description, options)
        progress.write(f"{description.name}: done in {time.perf_counter() - started:.1f} s")
        for result in results:
            progress.write(f"  {result}")
        failed += [result for result in results if result.failure]
    progress.step("finished")
    return failed


def selected_files(description: ModelDescription, options: Options) -> list[ServedFile]:
    """The served files of ``description`` this export writes: those in ``options.files``, or every one."""
    return [s for s in description.served if options.files is None or s.model in options.files]


def _once(make: Callable[[], Any]) -> Callable[[], Any]:
    """``make()`` called at most once: its value, or its exception raised again to every later caller."""
    outcome: list[tuple[Any, BaseException | None]] = []

    def get() -> Any:
        if not outcome:
            try:
                outcome.append((make(), None))
            except Exception as e:  # noqa: BLE001 - kept, and raised to each file that needs the model
                outcome.append((None, e))
        value, error = outcome[0]
        if error is not None:
            raise error
        return value

    return get


def _failed(model: str, path: Path, error: BaseException) -> ExportResult:
    failure = f"{type(error).__name__}: {error}"
    logger.error("%s: %s", model, failure)
    return ExportResult(model=model, path=path, written=False, failure=failure)


def copy_support_file(
    source: Path, destination: Path, description: ModelDescription, options: Options
) -> ExportResult:
    """Copy a file another repository model reads (a tokenizer) unless the copy is up to date."""
    model = destination.parent.parent.name
    inputs = fingerprint(files=[source], values={})
    if not options.force and is_up_to_date(destination, inputs):
        return ExportResult(model=model, path=destination, written=False)

    def copy(path: Path) -> None:
        path.write_bytes(source.read_bytes())

    write_atomically(destination, copy)
    write_manifest(destination, inputs, {"model": model, "source": _weights_source(description)})
    return ExportResult(model=model, path=destination, written=True)


def _weights_source(description: ModelDescription) -> str:
    weights = description.weights
    return "" if weights is None else weights.package or weights.path


def export_file(
    description: ModelDescription,
    kind: Kind,
    served: ServedFile,
    prepared: Callable[[], Any],
    options: Options,
    made: dict[str, Generated],
) -> ExportResult:
    """One served file unless it is up to date: every allowed variant gated, the fastest passing served.
    Any failure is returned as the result's ``failure`` and recorded under ``options.record_dir``."""
    try:
        options.progress.step(f"{served.model}: checking whether it is up to date")
        model_dir = options.repository / served.model
        config = made[served.model].config
        kind.check_config(description, options.repository, config, made)
        destination = exported_file(model_dir, config)
        inputs = input_fingerprint(description, kind, served, model_dir, options)
        if not options.force and is_up_to_date(destination, inputs):
            logger.info("%s is up to date", destination)
            _refresh_batching(description, config, options.record_dir)
            options.progress.settle(served.model)
            return ExportResult(model=config.name, path=destination, written=False)
        return _write_file(
            description,
            kind,
            prepared,
            options,
            config=config,
            file_format=served.format,
            destination=destination,
            inputs=inputs,
        )
    except Exception as e:  # noqa: BLE001 - a file that cannot be exported must not stop the others
        options.progress.settle(served.model)
        result = _failed(served.model, options.repository / served.model, e)
        record = Selection(
            model=served.model,
            choice=options.precision,
            capabilities=options.capabilities,
            candidates=[],
            served=None,
            failure=result.failure,
        )
        write_record(record.as_dict(), options.record_dir)
        return result


def _write_file(
    description: ModelDescription,
    kind: Kind,
    prepared: Callable[[], Any],
    options: Options,
    *,
    config: ModelConfig,
    file_format: str,
    destination: Path,
    inputs: str,
) -> ExportResult:
    """Plan the file's variants, serve the fastest that passes, write ``destination``, its manifest
    (``inputs``: its input fingerprint) and its record."""
    started = time.perf_counter()
    model_dir = destination.parent.parent
    destination.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="fp32-onnx-") as scratch:
        options.progress.step(f"{description.name}: loading the model and its check inputs")
        model = prepared()
        options.progress.step(f"{config.name}: planning its variants")
        target = Target(
            config=config, file_format=file_format, capabilities=options.capabilities, scratch=Path(scratch)
        )
        plan = kind.plan(model, target)
        selection = select_and_write(
            model=config.name,
            destination=destination,
            variants=allowed_variants(plan.variants, description),
            gate=plan.gate,
            workload=curve_workload(
                plan.workload, options.timing_batches or curve_sizes(config.max_batch_size)
            ),
            choice=options.precision,
            capabilities=options.capabilities,
            keep_dir=options.record_dir / config.name,
            threads=None if options.capabilities.gpu_serves else local_threads(model_dir, config),
            reference=plan.reference,
            progress=options.progress,
        )
    record = selection.as_dict()
    record["batching"] = _batching(record, description, config)
    write_record(record, options.record_dir)
    if selection.served is None:
        return ExportResult(model=config.name, path=destination, written=False, failure=selection.failure)
    parity = plan.parity[0] if plan.parity else None
    write_manifest(destination, inputs, _manifest(description, config, selection, plan, options))
    logger.info("wrote %s (%s)", destination, selection.served)
    seconds = time.perf_counter() - started
    return ExportResult(
        model=config.name, path=destination, written=True, seconds=seconds, parity=parity, selection=selection
    )


def local_threads(model_dir: Path, config: ModelConfig) -> int:
    """The intra-op threads the local server gives each instance of the model (tritonrepo/derive.py): a
    CPU-served file is built, gated and timed with as many."""
    entry = ModelEntry(name=config.name, path=model_dir, config=config)
    local = derive_local_config(entry, gpu_available=False, intra_op_threads=None)
    return int(local.parameters["intra_op_threads"].string_value)


def _manifest(
    description: ModelDescription, config: ModelConfig, selection: Selection, plan: Plan, options: Options
) -> dict[str, Any]:
    """What the manifest beside a written file records, besides its fingerprint."""
    parity = plan.parity[0] if plan.parity else None
    return {
        "model": config.name,
        "description": description.name,
        "weights": _weights_source(description),
        "torch": torch.__version__,
        "parity": parity.as_dict() if parity else None,
        "precision": selection.as_dict(),
        "gated_on": options.capabilities.gated_on(),
        **plan.details,
    }


def estimated_variants(description: ModelDescription, options: Options) -> dict[str, int]:
    """Per served file, how many variants the export will build: the description's precisions this machine
    runs for the device that serves, as requested. An estimate for the progress shown (a kind's formats
    need not have a variant for each precision); the plan, once known, corrects it."""
    requested = [
        (name, on)
        for on, names in description.precisions.items()
        for name in names
        if options.precision in ("auto", name)
        and device.why_unavailable(name, on, options.capabilities) is None
    ]
    return {served.model: len(requested) for served in selected_files(description, options)}


def allowed_variants(variants: Sequence[Variant], description: ModelDescription) -> list[Variant]:
    """The variants whose precision the description allows on their device; export/precision/selection.py then
    leaves out those this machine cannot run."""
    allowed = [v for v in variants if description.allows(v.precision, v.device)]
    left_out = sorted(v.name for v in variants if v not in allowed)
    if left_out:
        logger.info("%s: variants not allowed by its description: %s", description.name, ", ".join(left_out))
    return allowed


def _batching(record: dict, description: ModelDescription, config: ModelConfig) -> dict | None:
    """What the record's batch-cost curve chooses for the batcher within the description's budget."""
    native = native_spec(description)
    return batching_choice(
        record,
        max_batch_size=config.max_batch_size,
        latency_budget_ms=native.dynamic_batching.latency_budget_ms if native else None,
    )


def _refresh_batching(description: ModelDescription, config: ModelConfig, record_dir: Path) -> None:
    """Choose again from the curve recorded when an up-to-date file was timed: the rule
    (description/batching.py) may have changed since, and the curve is all it needs."""
    path = record_dir / f"{config.name}.json"
    if not path.is_file():
        return
    record = json.loads(path.read_text(encoding="utf-8"))
    if not record.get("candidates"):
        return
    chosen = _batching(record, description, config)
    if chosen != record.get("batching"):
        record["batching"] = chosen
        write_record(record, record_dir)


def input_fingerprint(
    description: ModelDescription, kind: Kind, served: ServedFile, model_dir: Path, options: Options
) -> str:
    """Everything the exported file depends on: weights, code, config, description, versions, and the
    precision choice with the machine's capabilities (they decide which variant is served)."""
    described = dataclasses.asdict(description) | {"folder": None}
    return fingerprint(
        files=[
            *kind.fingerprint_files(description),
            Path(__file__),
            model_dir / "config.pbtxt",
        ],
        values={
            "description": repr(sorted(described.items())),
            "format": served.format,
            "torch": torch.__version__,
            "onnx": onnx.__version__,
            "onnxruntime": onnxruntime.__version__,
            "precision": options.precision,
            "capabilities": repr(sorted(options.capabilities.as_dict().items())),
        },
    )
