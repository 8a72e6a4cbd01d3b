"""Scaffold a new model: its description and repository configs, from its kind, for the user to own.

``python -m export.scaffold KIND NAME --weights-path PATH`` (or ``--weights-package P --loader M:F``)
writes, taking the shipped model of the same kind as the starting point:

- ``model_descriptions/NAME.yaml``: the description (weights with their sha256, architecture, tolerance,
  precisions);
- ``model_repository/NAME_onnx/config.pbtxt``: the exported model's config (tensor names, dims, batching);
- image classifiers: ``NAME_preprocess`` (a Python model running image_preprocess's code at the model's
  size) and the ensemble ``NAME_classifier`` (preprocess -> NAME_onnx -> image_postprocess);
- sentence encoders: ``NAME_tokenizer`` (text_tokenizer's code; the export copies the weights'
  tokenizer.json beside it) and the ragged ensemble ``NAME_embedder`` (tokenizer -> NAME_onnx).

Configs are edited as Triton's protobuf and written with its text format, never from string templates.
Nothing is overwritten: an existing file is an error. ``python -m export --only NAME`` exports it next.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml
from tokenizers import Tokenizer

from export.common import ExportError, ModelConfig
from export.description import Weights, parse_description, weights_sha256
from export.minilm import load_tokenizer
from export.text_warmup import encoder_warmup_files, write_files
from tritonrepo.commands import EXIT_FAILED, EXIT_OK, command_parser
from tritonrepo.configs import format_config, load_model_config
from tritonrepo.paths import DESCRIPTIONS, REPOSITORY
from tritonrepo.served_code import BATCHING_HELPER, PARAMETERS_HELPER


@dataclass(frozen=True, kw_only=True)
class Template:
    """The shipped model of a kind a scaffold starts from: its description and repository models."""

    description: str
    python_model: str  # the preprocessing or tokenizer model whose code the new one links to
    encoder: str
    ensemble: str
    python_suffix: str
    ensemble_suffix: str


TEMPLATES = {
    "image_classifier": Template(
        description="efficientnet_lite0",
        python_model="image_preprocess",
        encoder="efficientnet_lite0_onnx",
        ensemble="image_classifier",
        python_suffix="preprocess",
        ensemble_suffix="classifier",
    ),
    "sentence_encoder": Template(
        description="all_minilm_l6_v2",
        python_model="text_tokenizer",
        encoder="minilm_onnx",
        ensemble="text_embedder",
        python_suffix="tokenizer",
        ensemble_suffix="embedder",
    ),
}
HEADER = (
    "# Scaffolded by `python -m export.scaffold` from {template}; yours to edit. Tensor names, dims and\n"
    "# batching are the source of truth for the export and the clients.\n"
)


@dataclass(frozen=True, kw_only=True)
class Request:
    kind: str
    name: str
    weights: dict[str, str]
    image_size_px: int = 224
    repository: Path = REPOSITORY
    models_dir: Path = DESCRIPTIONS

    def __post_init__(self) -> None:
        if self.kind not in TEMPLATES:
            raise ExportError(f"kind {self.kind!r} is not one of {sorted(TEMPLATES)}")
        check_name(self.name)


def check_name(name: str) -> str:
    """``name`` when it can name a model (and its Python module); ExportError naming a fixed one if not."""
    if not name.isidentifier() or name != name.lower():
        fixed = re.sub(r"\W", "_", name.lower())
        fixed = fixed if fixed.isidentifier() else f"model_{fixed}"
        raise ExportError(f"name {name!r}: use lower-case letters, digits and underscores, e.g. {fixed!r}")
    return name


def scaffold(request: Request) -> list[Path]:
    """Write the new model's files; returns them. Raises ExportError before writing if any exists."""
    template = TEMPLATES[request.kind]
    names = _names(request.name, template)
    configs = _configs(request, template, names)
    description = _description(request, template, names)
    targets = [request.models_dir / f"{request.name}.yaml"]
    targets += [request.repository / config.name / "config.pbtxt" for config in configs.values()]
    tokenizer = _tokenizer(request) if request.kind != "image_classifier" else None
    existing = [str(path) for path in targets if path.exists()]
    if existing:
        raise ExportError(f"not overwriting {existing}; choose another name or remove them")
    request.models_dir.mkdir(parents=True, exist_ok=True)
    targets[0].write_text(HEADER.format(template=template.description) + description, encoding="utf-8")
    for role, config in configs.items():
        folder = request.repository / config.name
        (folder / "1").mkdir(parents=True)
        header = HEADER.format(template=_roles(template)[role])
        (folder / "config.pbtxt").write_text(header + format_config(config), encoding="utf-8")
    python_version = request.repository / names["python"] / "1"
    os.symlink(Path("..", "..", template.python_model, "1", "model.py"), python_version / "model.py")
    for helper in (BATCHING_HELPER, PARAMETERS_HELPER):  # shipped beside every Python model
        os.symlink(Path("..", "..", helper), python_version / helper)
    (request.repository / names["ensemble"] / "1" / ".gitkeep").touch()
    if tokenizer is not None:  # the ragged encoder warms up with the new tokenizer's ids
        model_dir = request.repository / names["encoder"]
        targets += write_files(encoder_warmup_files(configs["encoder"], model_dir, tokenizer))
    return targets


def _names(name: str, template: Template) -> dict[str, str]:
    return {
        "python": f"{name}_{template.python_suffix}",
        "encoder": f"{name}_onnx",
        "ensemble": f"{name}_{template.ensemble_suffix}",
    }


def _description(request: Request, template: Template, names: dict[str, str]) -> str:
    path = request.models_dir / f"{template.description}.yaml"
    if not path.is_file():
        path = DESCRIPTIONS / f"{template.description}.yaml"
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    data["name"] = request.name
    data["weights"] = request.weights
    data["served"] = [{"model": names["encoder"], "format": "onnx"}]
    key = "model" if request.kind == "image_classifier" else "tokenizer_model"
    data["preprocessing"] = {key: names["python"]}
    data["precisions"] = {"cpu": ["fp32"], "cuda": ["fp32"]}  # add bf16, int8, fp16 once fp32 serves
    data.pop("configs", None)  # the template's generated models stay its own; the scaffold's are the user's
    parse_description(data, source=request.models_dir / f"{request.name}.yaml")  # fails early when invalid
    return yaml.safe_dump(data, sort_keys=False)


def _configs(request: Request, template: Template, names: dict[str, str]) -> dict[str, ModelConfig]:
    """The template's configs by role, renamed, the ensemble's steps pointing at the new models."""
    roles = _roles(template)
    configs = {
        role: _renamed(load_model_config(request.repository / roles[role]), names[role]) for role in roles
    }
    renamed = {roles[role]: names[role] for role in roles}
    for step in configs["ensemble"].ensemble_scheduling.step:
        step.model_name = renamed.get(step.model_name, step.model_name)
    if request.kind == "image_classifier":
        _resize_image_models(configs, request.image_size_px)
    else:
        _resize_text_models(configs, _hidden_size(request))
    return configs


def _roles(template: Template) -> dict[str, str]:
    return {"python": template.python_model, "encoder": template.encoder, "ensemble": template.ensemble}


def _renamed(config: ModelConfig, name: str) -> ModelConfig:
    copy = ModelConfig()
    copy.CopyFrom(config)
    copy.name = name
    return copy


def _resize_image_models(configs: dict[str, ModelConfig], size_px: int) -> None:
    """Square inputs of ``size_px``; the shorter side resized to size + 32 before the centre crop."""
    dims = [3, size_px, size_px]
    configs["python"].output[0].ClearField("dims")
    configs["python"].output[0].dims.extend(dims)
    configs["python"].parameters["resize_shorter_px"].string_value = str(size_px + 32)
    configs["encoder"].input[0].ClearField("dims")
    configs["encoder"].input[0].dims.extend(dims)
    for warmup in configs["encoder"].model_warmup:
        for tensor in warmup.inputs.values():
            tensor.ClearField("dims")
            tensor.dims.extend(dims)


def _resize_text_models(configs: dict[str, ModelConfig], hidden_size: int) -> None:
    for config in (configs["encoder"], configs["ensemble"]):
        config.output[0].ClearField("dims")
        config.output[0].dims.append(hidden_size)


def _hidden_size(request: Request) -> int:
    """The encoder's width, from the weights' config.json (a local folder, or the one a loader returns)."""
    config = Weights(**request.weights).locate(request.models_dir) / "config.json"
    return int(json.loads(config.read_text(encoding="utf-8"))["hidden_size"])


def _tokenizer(request: Request) -> Tokenizer:
    """The new encoder's tokenizer.json, beside its weights (the export copies it for the tokenizer model)."""
    folder = Weights(**request.weights).locate(request.models_dir)
    if not (folder / "tokenizer.json").is_file():
        raise ExportError(
            f"{folder} has no tokenizer.json: a sentence encoder's weights folder holds its tokenizer "
            "(save it there with the tokenizer's save_pretrained or tokenizers' Tokenizer.save)"
        )
    return load_tokenizer(folder, max_length=512)


def local_weights(path: Path, relative_to: Path) -> dict[str, str]:
    """A description's weights entry for a local file or folder, relative to the description's folder."""
    path = Path(path).resolve()
    return {"path": os.path.relpath(path, Path(relative_to).resolve()), "sha256": weights_sha256(path)}


def build_parser() -> argparse.ArgumentParser:
    parser = command_parser(
        "python -m export.scaffold",
        __doc__,
        exit_codes="0 written, 1 not written (a file exists, the weights or the template do not "
        "fit), 2 a usage error (a bad name, kind or weights option)",
    )
    parser.add_argument(
        "kind", choices=sorted(TEMPLATES), help="the kind of model: its shipped model is the start"
    )
    parser.add_argument(
        "name", type=_name_argument, help="the model's name: lower-case letters, digits and underscores"
    )
    weights = parser.add_mutually_exclusive_group(required=True)
    weights.add_argument(
        "--weights-path",
        type=Path,
        default=argparse.SUPPRESS,
        help="a local weights file or folder (this or --weights-package is required)",
    )
    weights.add_argument(
        "--weights-package",
        default=argparse.SUPPRESS,
        help="an installed package holding the weights, with --loader (this or --weights-path is required)",
    )
    parser.add_argument(
        "--loader",
        default=None,
        help="with --weights-package: module:function, called to return the weights' path",
    )
    parser.add_argument("--image-size", type=int, default=224, help="image classifiers: input size in px")
    parser.add_argument(
        "--repository", type=Path, default=REPOSITORY, help="the model repository to write into"
    )
    parser.add_argument("--models", type=Path, default=DESCRIPTIONS, help="the folder of model descriptions")
    return parser


def _name_argument(text: str) -> str:
    try:
        return check_name(text)
    except ExportError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    path, package = vars(args).get("weights_path"), vars(args).get("weights_package")
    if package is not None and ":" not in (args.loader or ""):
        parser.error(f"--weights-package {package} needs --loader module:function (got {args.loader!r})")
    if path is not None and args.loader:
        parser.error("--loader goes with --weights-package; a --weights-path needs none")
    if path is not None and not path.exists():
        parser.error(f"--weights-path {path} does not exist; give the weights' file or folder")
    entry = (
        local_weights(path, args.models) if path is not None else {"package": package, "loader": args.loader}
    )
    request = Request(
        kind=args.kind,
        name=args.name,
        weights=entry,
        image_size_px=args.image_size,
        repository=args.repository,
        models_dir=args.models,
    )
    try:
        written = scaffold(request)
    except ExportError as e:
        print(f"scaffold failed: {e}", file=sys.stderr)
        return EXIT_FAILED
    for path in written:
        print(f"wrote {path}")
    print(f"next: python -m export --only {args.name} --precision fp32")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
