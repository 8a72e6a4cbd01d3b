"""A ``torch_module``'s scaffold: any ``torch.nn.Module`` of yours, from the command line to a description.

``python -m export.scaffold torch_module NAME --model FILE.py:FN --check-inputs FILE.py:FN --weights-path W
--input NAME:DTYPE:DIMS ... --output NAME:DTYPE:DIMS[:METRIC] ... [--preprocess MODEL] [--postprocess MODEL]``
writes, and never overwrites:

- ``model_descriptions/NAME.yaml``: a ``torch_module`` description (description/module_spec.py) naming your
  two functions (relative to the description, as it reads them) and stating your tensors once, each output
  compared with eager PyTorch by its metric (``max_abs_diff`` unless named) at fp32's usual tolerance;
  batches of up to 64, fp32 only, served as ONNX (``NAME_onnx``) and TorchScript (``NAME_torchscript``);
- the config.pbtxt of every model it generates, by the generator of every shipped config.

``--preprocess MODEL`` puts the module behind a preprocessing model, in the ensemble ``NAME_ensemble``
(MODEL -> NAME_onnx). A model configured by a description's ``configs.image_preprocessing`` (the shipped
``image_preprocess`` and its configured copies) gets a copy of its own, ``NAME_preprocess``: that section,
its crop the module's input size, its model.py linked to the same code. Any other repository model is
shared as it is, and must produce the module's inputs. ``--postprocess MODEL`` ends the ensemble with a
repository model that takes the module's outputs (``image_postprocess``: ImageNet's top-5 labels). The
ensemble's version folder and the links are created (export/scaffold/files.py), as every scaffold does.

``--configs-only`` takes a description written by hand instead: it (re)writes the configs it generates and
creates the same folders and links.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tritonclient.grpc import model_config_pb2
from tritonclient.grpc.model_config_pb2 import DataType

from description.generated_configs import config_path, generate, model_config, refresh_command, write_configs
from description.model import (
    MODULE_KIND,
    ModelDescription,
    load_description,
    parse_description,
    raw_description,
)
from description.module_spec import METRICS
from export.common import ExportError, shown
from export.scaffold.files import (
    BATCHING,
    check_name,
    code_origin,
    lay_out,
    parse_tensor,
    print_written,
    refuse_existing,
    relative,
    write_description,
)
from export.torch_module.kind import preprocessing_model
from tritonrepo.configs import load_model_config
from tritonrepo.errors import RepositoryError
from tritonrepo.tensors import TensorSpec

# fp32's usual limit per metric: exported files agree with eager PyTorch to float rounding.
TOLERANCES = {"max_abs_diff": 1.0e-4, "cosine": 0.9999, "top1_agreement": 1.0}
IMAGE_CODE = "image_preprocess"  # the model holding the code every configs.image_preprocessing model runs
CROP_MARGIN_PX = 32  # resize the shorter side to the crop + 32 px, as Google's and torchvision's evaluation
HEADER = (
    "# Scaffolded by `python -m export.scaffold torch_module`; yours to edit. module names your code and\n"
    "# states what Triton serves, once: each config.pbtxt is generated from this file by\n"
    "# `{command}`.\n"
    "# Each output's tolerance is fp32's limit against eager PyTorch; once fp32 serves, add bf16 (cpu) or\n"
    "# fp16 (cuda) to precisions and a variant_tolerance.\n"
)


@dataclass(frozen=True, kw_only=True)
class ModuleRequest:
    name: str
    model: str  # FILE.py:FN or package.module:FN, as the description names it
    check_inputs: str
    weights: dict[str, str]
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[tuple[TensorSpec, str], ...]  # each output and its metric
    repository: Path
    models_dir: Path
    preprocess: str = ""  # the repository model that prepares the inputs; "" for none
    postprocess: str = ""  # the repository model that takes the outputs; "" for none
    max_batch_size: int = 64

    def __post_init__(self) -> None:
        check_name(self.name)

    @property
    def ensemble(self) -> str:
        return f"{self.name}_ensemble" if self.preprocess or self.postprocess else ""


def parse_output(text: str) -> tuple[TensorSpec, str]:
    """``NAME:DTYPE:DIMS[:METRIC]``: an output and the metric it is compared with (max_abs_diff if none)."""
    tensor, metric = text, "max_abs_diff"
    if text.count(":") == 3:
        tensor, _, metric = text.rpartition(":")
    if metric not in METRICS:
        raise ExportError(f"output {text!r}: metric {metric!r} is not one of {sorted(METRICS)}")
    return parse_tensor(tensor), metric


def callable_entry(text: str, models_dir: Path) -> str:
    """``FILE.py:FN`` (a path from the working folder) as the description names it, relative to its
    folder; ``package.module:FN`` as it is. ExportError where the file does not exist."""
    target, _, function = text.rpartition(":")
    if not target or not function.isidentifier():
        raise ExportError(
            f"{text!r} is not a callable; write path/to/file.py:function or package.module:function"
        )
    if not target.endswith(".py"):
        return text
    if not Path(target).is_file():
        raise ExportError(f"{text!r}: {target} does not exist; give the path of your Python file")
    return f"{relative(Path(target), models_dir)}:{function}"


def _tensor(tensor: TensorSpec) -> dict[str, Any]:
    return {"name": tensor.name, "dtype": tensor.datatype, "dims": list(tensor.dims)}


def description_data(request: ModuleRequest) -> dict[str, Any]:
    """The new description's YAML data."""
    module = {
        "model": request.model,
        "check_inputs": request.check_inputs,
        "inputs": [_tensor(t) for t in request.inputs],
        "outputs": [{**_tensor(t), "metric": m, "tolerance": TOLERANCES[m]} for t, m in request.outputs],
        "max_batch_size": request.max_batch_size,
        "dynamic_batching": {
            **BATCHING,
            "preferred_batch_sizes": [
                s for s in BATCHING["preferred_batch_sizes"] if s <= request.max_batch_size
            ],
        },
        "instance_groups": [{"kind": "KIND_GPU", "count": 2}],
    }
    data: dict[str, Any] = {"name": request.name, "kind": MODULE_KIND, "weights": request.weights}
    configs = _preprocessing_configs(request) if request.preprocess else {}
    steps = [f"{request.name}_onnx"]
    if request.preprocess:
        step = f"{request.name}_preprocess" if "image_preprocessing" in configs else request.preprocess
        data["preprocessing"] = {"model": step}
        steps.insert(0, step)
    if request.ensemble:
        steps += [request.postprocess] if request.postprocess else []
        about = f"{' -> '.join(steps)}, scaffolded for {request.name}"
        configs["ensembles"] = [{"model": request.ensemble, "about": about, "steps": steps}]
    data |= {
        "module": module,
        "served": [
            {"model": f"{request.name}_onnx", "format": "onnx"},
            {"model": f"{request.name}_torchscript", "format": "torchscript"},
        ],
        "precisions": {"cpu": ["fp32"], "cuda": ["fp32"]},  # add bf16, int8, fp16 once fp32 serves
    }
    if configs:
        data["configs"] = configs
    return data


def _preprocessing_configs(request: ModuleRequest) -> dict[str, Any]:
    """For an image preprocessing model: its description's ``configs.image_preprocessing``, cropping to
    the module's one input ([3, H, W]); for any other model: nothing (it is shared as it is)."""
    section = image_preprocessing_section(request.models_dir, request.preprocess)
    if section is None:
        return {}
    pixels = request.inputs
    if len(pixels) != 1 or len(pixels[0].dims) != 3 or pixels[0].dims[0] != 3 or min(pixels[0].dims) < 1:
        raise ExportError(
            f"--preprocess {request.preprocess}: it makes one input of RGB pixels [3, H, W]; the module "
            f"takes {[_tensor(t) for t in pixels]}; declare one input such as --input PIXELS:FP32:3,224,224"
        )
    return {
        "image_preprocessing": {
            **section,
            "about": f"Scaffolded for {request.name} from {request.preprocess}, with its code",
            "resize_shorter_px": max(pixels[0].dims[1:]) + CROP_MARGIN_PX,
        }
    }


def _check_postprocess(request: ModuleRequest) -> None:
    """The post-processing model takes the module's outputs (datatypes and dims, in order)."""
    try:
        config = load_model_config(request.repository / request.postprocess)
    except RepositoryError as e:
        raise ExportError(f"--postprocess {request.postprocess}: {e}; name a model of the repository") from e
    takes = [(DataType.Name(t.data_type).removeprefix("TYPE_"), list(t.dims)) for t in config.input]
    made = [(tensor.datatype, list(tensor.dims)) for tensor, _ in request.outputs]
    if takes != made:
        raise ExportError(
            f"--postprocess {request.postprocess}: it takes {takes}, the module's outputs are {made}; its "
            "inputs must be the outputs, in order (or leave it out)"
        )


def image_preprocessing_section(models_dir: Path, model: str) -> dict[str, Any] | None:
    """The ``configs.image_preprocessing`` section of the description in ``models_dir`` that configures
    ``model``; None where none does."""
    for path in sorted(Path(models_dir).glob("*.yaml")):
        data = raw_description(path)
        configs, preprocessing = data.get("configs") or {}, data.get("preprocessing") or {}
        if preprocessing.get("model") == model and "image_preprocessing" in configs:
            return dict(configs["image_preprocessing"])
    return None


def scaffold_module(request: ModuleRequest) -> tuple[ModelDescription, list[Path]]:
    """Write the description and its configs and lay out their folders; the description and the files
    written. ExportError before anything is written where a file exists or the request does not fit."""
    source = request.models_dir / f"{request.name}.yaml"
    data = description_data(request)
    description = parse_description(data, source=source)  # fails early when invalid
    if request.preprocess and "image_preprocessing" not in data.get("configs", {}):
        preprocessing_model(description, request.repository)  # a shared step must make the inputs
    if request.postprocess:
        _check_postprocess(request)
    made = generate(description, request.repository)
    targets = [source, *(config_path(request.repository, model) for model in made)]
    refuse_existing(targets)
    write_description(source, HEADER.format(command=refresh_command(description)), data)
    write_configs(description, request.repository, made)  # the generator of every shipped config
    lay_out(description, request.repository, code_of(description, request.repository))
    return description, targets


def code_of(description: ModelDescription, repository: Path) -> dict[str, str]:
    """The code each generated Python model runs, where the description says it: an image preprocessing
    model runs image_preprocess's."""
    configs = description.configs
    if configs is None or configs.image_preprocessing is None:
        return {}
    return {description.preprocessing["model"]: code_origin(repository, IMAGE_CODE)}


def configs_only(kind: str, name: str, *, repository: Path, models_dir: Path) -> tuple[list[Path], list[str]]:
    """A description written by hand: its configs (re)written and its folders and links laid out; the
    configs written and the Python models still without code."""
    source = models_dir / f"{name}.yaml"
    if not source.is_file():
        raise ExportError(
            f"{source} does not exist; write the description first, or scaffold it without --configs-only"
        )
    description = load_description(source)
    if description.kind != kind or description.name != name:
        raise ExportError(
            f"{source} describes {description.kind} {description.name!r}; run "
            f"`python -m export.scaffold {description.kind} {description.name} --configs-only`"
        )
    written = write_configs(description, repository, generate(description, repository))
    return written, lay_out(description, repository, code_of(description, repository))


def next_commands(description: ModelDescription, repository: Path) -> list[str]:
    """What to run next: export, serve, and call the model its users call (its last ensemble, if any)."""
    configs = description.configs
    if configs is not None and configs.ensembles:
        called = configs.ensembles[-1].model
    elif description.served:
        called = description.served[0].model
    else:  # a python_model: nothing to export
        called = configs.python_models[0].model if configs is not None else description.name
    config = model_config(description, called, repository)
    if {"LABELS", "SCORES"} <= {tensor.name for tensor in config.output}:  # an image classifier's ending
        call = f"python -m clients classify photo.jpg --model {called}"
    else:
        inputs = " ".join(
            f"--input {tensor.name}=@photo.jpg"  # a file's bytes, as they are
            if tensor.data_type == model_config_pb2.TYPE_STRING
            else f"--input {tensor.name}={tensor.name.lower()}.npy"
            for tensor in config.input
        )
        call = f"python -m clients infer {called} {inputs}"
    export = [f"python -m export --only {description.name} --precision fp32"] if description.served else []
    return [*export, "python -m tritonlocal serve", call]


def _print_next(description: ModelDescription, repository: Path) -> None:
    print("next: " + "\n      ".join(next_commands(description, repository)))


def module_main(args: argparse.Namespace, weights: dict[str, str]) -> int:
    """``python -m export.scaffold torch_module NAME ...``: write the files, print them and what is next."""
    request = ModuleRequest(
        name=args.name,
        model=callable_entry(args.model, args.models),
        check_inputs=callable_entry(args.check_inputs, args.models),
        weights=weights,
        inputs=tuple(parse_tensor(t) for t in args.input),
        outputs=tuple(parse_output(t) for t in args.output),
        repository=args.repository,
        models_dir=args.models,
        preprocess=args.preprocess or "",
        postprocess=args.postprocess or "",
    )
    description, written = scaffold_module(request)
    print_written(written)
    _print_next(description, args.repository)
    return 0


def configs_only_main(args: argparse.Namespace) -> int:
    """``python -m export.scaffold KIND NAME --configs-only``: a description written by hand."""
    written, no_code = configs_only(args.kind, args.name, repository=args.repository, models_dir=args.models)
    print_written(written)
    if not written:
        print(f"{args.name}: configs up to date")
    for model in no_code:
        print(f"no code yet: write {shown(args.repository / model / '1' / 'model.py')}")
    _print_next(load_description(args.models / f"{args.name}.yaml"), args.repository)
    return 0
