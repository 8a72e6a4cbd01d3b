"""The ``configs`` section of a description: what its generated config.pbtxt files state, once.

Every model Triton serves for a description is generated from it (description/generated_configs.py), with
the project's rules added by description/config_rules.py. The section::

    configs:
      native:                       # the served files (a torch_module states them in ``module``)
        about: EfficientNet-Lite0 ...  # optional, the config's opening comment
        inputs: [{name: PIXELS__0, dtype: FP32, dims: [3, 224, 224]}]
        outputs: [{name: LOGITS__0, dtype: FP32, dims: [1000]}]
        max_batch_size: 64
        dynamic_batching: {max_queue_delay_us: 2000, preferred_batch_sizes: [16, 32, 64]}
        instance_groups: [{kind: KIND_GPU, count: 2}]
        by_format: {onnx: {parameters: {cudnn_conv_algo_search: "1"}}}
      image_preprocessing:          # the Python model named by preprocessing.model
        {resize_shorter_px: 256, mean_rgb: [0.5, 0.5, 0.5], std_rgb: [0.5, 0.5, 0.5],
         preferred_batch_sizes: [8, 16, 32], instances: 2,
         host_cores_reserved: 2}    # optional: on a GPU host, the cores less 2 instances at start-up
      python_models:                # other Python-backend models, stated in full
        - {model: NAME, inputs: [...], outputs: [...], max_batch_size: 64, dynamic_batching: {...},
           instance_groups: [...], parameters: {key: "value"}}
      ensembles:                    # a chain of models, each step's outputs the next one's inputs
        - {model: image_classifier, steps: [image_preprocess, efficientnet_lite0_onnx, image_postprocess]}

An input of a native model may be ragged (``ragged_lengths: NAME``): requests of any length share a
batch, concatenated, and Triton adds the batch input NAME with each request's length. ``by_format``
changes, for one format's twin, its ``max_queue_delay_us`` or adds backend ``parameters``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from description.errors import DescriptionError
from description.module_spec import (
    DTYPES,
    DynamicBatching,
    InstanceGroup,
    ModuleSpec,
    parse_batching,
    parse_instances,
    parse_tensor,
)
from description.reader import Reader, entries
from tritonrepo.tensors import TensorSpec

CONFIG_DTYPES = (*DTYPES, "STRING")
FORMATS = ("onnx", "torchscript")


@dataclass(frozen=True, kw_only=True)
class FormatChanges:
    """What one format's twin sets differently: its queue delay, and backend parameters it adds."""

    max_queue_delay_us: int | None = None
    parameters: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """The tensors, batching and instances of one non-ensemble model."""

    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    max_batch_size: int
    dynamic_batching: DynamicBatching
    instance_groups: tuple[InstanceGroup, ...]
    about: str = ""


@dataclass(frozen=True, kw_only=True)
class NativeSpec(ModelSpec):
    ragged: dict[str, str] = field(default_factory=dict)  # ragged input -> the batch input of its lengths
    by_format: dict[str, FormatChanges] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class PythonSpec(ModelSpec):
    model: str
    parameters: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class ImagePreprocessingSpec:
    resize_shorter_px: int
    mean_rgb: tuple[float, float, float]
    std_rgb: tuple[float, float, float]
    preferred_batch_sizes: tuple[int, ...]
    instances: int
    # On a GPU host the instances follow the server's cores at start-up: all but this many, never fewer
    # than ``instances`` (tritonrepo/host_instances.py); None: ``instances`` everywhere.
    host_cores_reserved: int | None = None
    about: str = ""


@dataclass(frozen=True, kw_only=True)
class EnsembleSpec:
    model: str
    steps: tuple[str, ...]
    about: str = ""


@dataclass(frozen=True, kw_only=True)
class ConfigsSpec:
    native: NativeSpec | None = None
    image_preprocessing: ImagePreprocessingSpec | None = None
    python_models: tuple[PythonSpec, ...] = ()
    ensembles: tuple[EnsembleSpec, ...] = ()


def native_from_module(spec: ModuleSpec) -> NativeSpec:
    """A torch_module's served files, as its ``module`` section states them."""
    return NativeSpec(
        inputs=spec.inputs,
        outputs=spec.outputs,
        max_batch_size=spec.max_batch_size,
        dynamic_batching=spec.dynamic_batching,
        instance_groups=spec.instance_groups,
    )


def parse_configs(data: Any, *, model: str) -> ConfigsSpec:
    """The ``configs`` section of description ``model``; DescriptionError names the field and the fix."""
    section = Reader(model, "configs", data, "; see description/config_spec.py")
    native = section.get("native", None)
    preprocessing = section.get("image_preprocessing", None)
    spec = ConfigsSpec(
        native=None if native is None else _native(model, native),
        image_preprocessing=None if preprocessing is None else _image_preprocessing(model, preprocessing),
        python_models=tuple(
            _python(model, f"configs.python_models[{i}]", entry)
            for i, entry in enumerate(section.get("python_models", []))
        ),
        ensembles=tuple(
            _ensemble(model, f"configs.ensembles[{i}]", entry)
            for i, entry in enumerate(section.get("ensembles", []))
        ),
    )
    section.done()
    return spec


def _model_fields(model: str, where: str, section: Reader, *, ragged: dict[str, str] | None = None) -> dict:
    """The fields every non-ensemble model states; ``ragged`` collects the inputs' ragged_lengths."""
    inputs = []
    for i, data in enumerate(entries(section, "inputs")):
        entry, common = parse_tensor(model, f"{where}.inputs[{i}]", data, dtypes=CONFIG_DTYPES)
        lengths = entry.get("ragged_lengths", None) if ragged is not None else None
        if lengths is not None:
            if not isinstance(lengths, str) or common["dims"] != (-1,):
                raise entry.error(
                    "ragged_lengths", f"{lengths!r} on dims {list(common['dims'])}", "ragged: [-1]"
                )
            ragged = {**ragged, common["name"]: lengths} if ragged is not None else None
        entry.done()
        inputs.append(TensorSpec(**common))
    outputs = []
    for i, data in enumerate(entries(section, "outputs")):
        entry, common = parse_tensor(model, f"{where}.outputs[{i}]", data, dtypes=CONFIG_DTYPES)
        entry.done()
        outputs.append(TensorSpec(**common))
    about = section.get("about", "")
    if not isinstance(about, str):
        raise section.error("about", f"{about!r} is not text", "write a sentence or two")
    return {
        "inputs": tuple(inputs),
        "outputs": tuple(outputs),
        "max_batch_size": section.integer("max_batch_size", minimum=1),
        "dynamic_batching": parse_batching(
            model, f"{where}.dynamic_batching", section.get("dynamic_batching")
        ),
        "instance_groups": tuple(
            parse_instances(model, f"{where}.instance_groups[{i}]", entry)
            for i, entry in enumerate(entries(section, "instance_groups"))
        ),
        "about": about.strip(),
        **({"ragged": ragged} if ragged is not None else {}),
    }


def _native(model: str, data: Any) -> NativeSpec:
    section = Reader(model, "configs.native", data)
    fields = _model_fields(model, "configs.native", section, ragged={})
    by_format = section.get("by_format", {})
    if not isinstance(by_format, dict) or set(by_format) - set(FORMATS):
        raise section.error("by_format", f"{by_format!r}", f"map formats {list(FORMATS)} to their changes")
    changes = {name: _format_changes(model, name, value) for name, value in by_format.items()}
    section.done()
    return NativeSpec(**fields, by_format=changes)


def _format_changes(model: str, name: str, data: Any) -> FormatChanges:
    section = Reader(model, f"configs.native.by_format.{name}", data)
    delay = section.get("max_queue_delay_us", None)
    changes = FormatChanges(
        max_queue_delay_us=None if delay is None else section.integer("max_queue_delay_us"),
        parameters=_parameters(section),
    )
    section.done()
    return changes


def _parameters(section: Reader) -> dict[str, str]:
    parameters = section.get("parameters", {})
    if not isinstance(parameters, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in parameters.items()
    ):
        raise section.error(
            "parameters", f"{parameters!r}", 'map each key to a quoted string, e.g. top_k: "5"'
        )
    return dict(parameters)


def _python(model: str, where: str, data: Any) -> PythonSpec:
    section = Reader(model, where, data)
    name = section.get("model")
    spec = PythonSpec(
        model=str(name), **_model_fields(model, where, section), parameters=_parameters(section)
    )
    if spec.dynamic_batching.latency_budget_ms is not None:
        raise DescriptionError(
            f"model {model!r}: {where}.dynamic_batching.latency_budget_ms: a Python model has no measured "
            "batch-cost curve to choose from; state its preferred_batch_sizes and max_queue_delay_us "
            "(a budget belongs to the served files: configs.native or module)"
        )
    section.done()
    return spec


def _image_preprocessing(model: str, data: Any) -> ImagePreprocessingSpec:
    section = Reader(model, "configs.image_preprocessing", data)
    channels = {key: section.get(key) for key in ("mean_rgb", "std_rgb")}
    for key, values in channels.items():
        if (
            not isinstance(values, list)
            or len(values) != 3
            or not all(isinstance(v, (int, float)) for v in values)
        ):
            raise section.error(key, f"{values!r} is not three numbers", "give one per channel: R, G, B")
    preferred = section.get("preferred_batch_sizes")
    if not isinstance(preferred, list) or preferred != sorted(set(preferred)) or not preferred:
        raise section.error("preferred_batch_sizes", f"{preferred!r}", "list ascending sizes, e.g. [8, 16]")
    spec = ImagePreprocessingSpec(
        resize_shorter_px=section.integer("resize_shorter_px", minimum=1),
        mean_rgb=tuple(float(v) for v in channels["mean_rgb"]),  # type: ignore[arg-type]
        std_rgb=tuple(float(v) for v in channels["std_rgb"]),  # type: ignore[arg-type]
        preferred_batch_sizes=tuple(preferred),
        instances=section.integer("instances", minimum=1),
        host_cores_reserved=(
            section.integer("host_cores_reserved", minimum=0)
            if "host_cores_reserved" in section.data
            else None
        ),
        about=str(section.get("about", "")).strip(),
    )
    section.done()
    return spec


def _ensemble(model: str, where: str, data: Any) -> EnsembleSpec:
    section = Reader(model, where, data)
    steps = section.get("steps")
    if not isinstance(steps, list) or len(steps) < 2 or not all(isinstance(s, str) for s in steps):
        raise section.error("steps", f"{steps!r}", "list the models of the chain in order, at least two")
    spec = EnsembleSpec(
        model=str(section.get("model")), steps=tuple(steps), about=str(section.get("about", "")).strip()
    )
    section.done()
    return spec


def check_configs(
    model: str, spec: ConfigsSpec, *, module: bool, preprocessing: dict[str, str], python_only: bool = False
) -> None:
    """The section fits its description: a native section unless the module states it or nothing is
    exported (a python_model), and an image preprocessing section only for a description whose
    preprocessing names its model."""
    if python_only:
        if spec.native is not None or spec.image_preprocessing is not None:
            raise DescriptionError(
                f"model {model!r}: a python_model exports nothing; state its models in configs.python_models"
            )
        return
    if module == (spec.native is not None):
        raise DescriptionError(
            f"model {model!r}: configs.native "
            + ("repeats the module section; state the tensors there" if module else "is missing")
        )
    if spec.image_preprocessing is not None and "model" not in preprocessing:
        raise DescriptionError(
            f"model {model!r}: configs.image_preprocessing needs preprocessing.model, the model it configures"
        )
