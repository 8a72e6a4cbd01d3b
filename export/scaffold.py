"""Scaffold a new model: its description, from its kind, and the configs generated from it.

``python -m export.scaffold python_model NAME --input IN:FP32:4 --output OUT:FP32:4`` writes a
Python-backend model for anything that is neither an image classifier nor a sentence encoder: its
description, its generated config, a model.py batching through RequestBatcher and a test that serves it
(export/scaffold_python.py). For the two exported kinds,
``python -m export.scaffold KIND NAME --weights-path PATH`` (or ``--weights-package P --loader M:F``)
writes, taking the shipped description of the same kind as the starting point:

- ``model_descriptions/NAME.yaml``: the description (weights with their sha256, architecture, tolerance,
  precisions) with its ``configs`` section: the template's, renamed for NAME, with what the options and
  the weights change (an image classifier's input size and class count: export/scaffold_image.py; a
  sentence encoder's width: export/scaffold_text.py);
- the config.pbtxt of every model that section generates, written by the generator of every shipped
  config (export/generated_configs.py), never copied: ``NAME_onnx``, the exported model; for image
  classifiers ``NAME_preprocess`` (a Python model running image_preprocess's code at the model's size)
  and the ensemble ``NAME_classifier`` (preprocess -> NAME_onnx -> image_postprocess, ImageNet's labels;
  for other classes, ``--labels LABELS.txt``, one a line, line index = class id: -> ``NAME_postprocess``,
  image_postprocess's code with a copy of them); for sentence encoders ``NAME_tokenizer``
  (text_tokenizer's code; the export copies the weights' tokenizer.json beside it) and the ragged
  ensemble ``NAME_embedder`` (tokenizer -> NAME_onnx).

A model of the template the new one shares (image_postprocess, without --labels) stays the template's:
the new description names it only as an ensemble step, which the generator reads from the repository, so
each generated config has exactly one description. Nothing is overwritten: an existing file is an error.
After an edit of the description, ``python -m export --only NAME --configs-only`` regenerates the
configs; ``python -m export --only NAME`` exports the model.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from export import scaffold_image, scaffold_text
from export.common import ExportError, shown
from export.description import PYTHON_KIND, ModelDescription, Weights, parse_description, weights_sha256
from export.generated_configs import config_path, generate, model_config, refresh_command, write_configs
from export.scaffold_python import python_main
from export.text_warmup import encoder_warmup_files, write_files
from tritonrepo.commands import EXIT_FAILED, EXIT_OK, command_parser
from tritonrepo.errors import RepositoryError
from tritonrepo.paths import DESCRIPTIONS, REPOSITORY, ROOT
from tritonrepo.served_code import BATCHING_HELPER, PARAMETERS_HELPER


@dataclass(frozen=True, kw_only=True)
class Template:
    """The shipped description of a kind a scaffold starts from, and the suffixes of the new models that
    take the places of its preprocessing (or tokenizer) model and of its ensemble through the ONNX file."""

    description: str
    python_suffix: str
    ensemble_suffix: str


TEMPLATES = {
    "image_classifier": Template(
        description="efficientnet_lite0", python_suffix="preprocess", ensemble_suffix="classifier"
    ),
    "sentence_encoder": Template(
        description="all_minilm_l6_v2", python_suffix="tokenizer", ensemble_suffix="embedder"
    ),
}
HEADER = (
    "# Scaffolded by `python -m export.scaffold` from {template} (whose description says why each setting\n"
    "# is what it is); yours to edit. The configs section states what Triton serves for it, once: each\n"
    "# config.pbtxt is generated from it by `{command}`.\n"
)
TESTS = ROOT / "tests" / "integration"  # where the project keeps the tests that start a server
COLUMNS = 104  # the width the description's YAML wraps at
SHARED = "# {shared}: {template}'s, named here as an ensemble step and read from the repository.\n"


@dataclass(frozen=True, kw_only=True)
class Models:
    """A model per role: the preprocessing (or tokenizer) model, the ONNX file, the ensemble through it,
    and the post-processing model the ensemble ends with ("" where it has none of its own)."""

    python: str
    encoder: str
    ensemble: str
    postprocess: str = ""


@dataclass(frozen=True, kw_only=True)
class Request:
    kind: str
    name: str
    weights: dict[str, str]
    image_size_px: int = 224
    labels: Path | None = None  # an image classifier's own classes, one label a line (line index = id)
    repository: Path = REPOSITORY
    models_dir: Path = DESCRIPTIONS

    def __post_init__(self) -> None:
        if self.kind not in TEMPLATES:
            raise ExportError(f"kind {self.kind!r} is not one of {sorted(TEMPLATES)}")
        if self.labels is not None and self.kind != "image_classifier":
            raise ExportError(f"a {self.kind} has no labels, an image_classifier's; leave out --labels")
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
    source = request.models_dir / f"{request.name}.yaml"
    template_data = _template_data(request, template)
    old = _template_models(template, template_data)
    new = Models(
        python=f"{request.name}_{template.python_suffix}",
        encoder=f"{request.name}_onnx",
        ensemble=f"{request.name}_{template.ensemble_suffix}",
        postprocess="" if request.labels is None else f"{request.name}_{scaffold_image.SUFFIX}",
    )
    data = _described(request, template, template_data, old, new)
    description = parse_description(data, source=source)  # fails early when invalid
    try:
        models = list(generate(description, request.repository))
    except RepositoryError as e:  # an ensemble step the new model shares, missing from the repository
        raise ExportError(
            f"{e}; scaffold into a repository that holds {template.description}'s models"
        ) from e
    tokenizer = None  # a sentence encoder's, for its warm-up samples
    if request.kind == "sentence_encoder":
        tokenizer = scaffold_text.tokenizer(Weights(**request.weights).locate(request.models_dir))
    targets = [source, *(config_path(request.repository, model) for model in models)]
    if request.labels is not None:  # copied beside the model's own post-processing
        targets.append(request.repository / new.postprocess / "1" / scaffold_image.LABELS_FILE)
    existing = [str(path) for path in targets if path.exists()]
    if existing:
        raise ExportError(f"not overwriting {existing}; choose another name or remove them")
    request.models_dir.mkdir(parents=True, exist_ok=True)
    text = yaml.dump(data, Dumper=_Dumper, sort_keys=False, width=COLUMNS)
    source.write_text(_header(description, template, models) + text, encoding="utf-8")
    write_configs(description, request.repository)  # the generator of every shipped config
    for model in models:
        (request.repository / model / "1").mkdir(exist_ok=True)
    for code, model in ((old.python, new.python), (old.postprocess, new.postprocess)):
        if model:
            _link_code(request.repository / model / "1", code)
    if request.labels is not None:
        shutil.copyfile(request.labels, targets[-1])
    (request.repository / new.ensemble / "1" / ".gitkeep").touch()
    if tokenizer is not None:  # the ragged encoder warms up with the new tokenizer's ids
        config = model_config(description, new.encoder, request.repository)
        targets += write_files(encoder_warmup_files(config, request.repository / new.encoder, tokenizer))
    return targets


def _link_code(version: Path, model: str) -> None:
    """Link ``model``'s code into ``version``: its model.py and the helpers beside every Python model."""
    os.symlink(Path("..", "..", model, "1", "model.py"), version / "model.py")
    for helper in (BATCHING_HELPER, PARAMETERS_HELPER):
        os.symlink(Path("..", "..", helper), version / helper)


def _template_data(request: Request, template: Template) -> dict[str, Any]:
    """The template's description as YAML data: the one in ``models_dir`` if there, else the shipped one."""
    path = request.models_dir / f"{template.description}.yaml"
    if not path.is_file():
        path = DESCRIPTIONS / f"{template.description}.yaml"
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _template_models(template: Template, data: dict[str, Any]) -> Models:
    """The template's models that the new model has its own of."""
    try:
        (python,) = data["preprocessing"].values()
        encoder = next(s["model"] for s in data["served"] if s["format"] == "onnx")
        through = next(e for e in data["configs"]["ensembles"] if encoder in e["steps"])
        ensemble, steps = through["model"], through["steps"]
    except (KeyError, AttributeError, TypeError, ValueError, StopIteration) as e:
        raise ExportError(
            f"template {template.description!r} does not fit: a scaffold needs its one preprocessing model, "
            f"an onnx served file and, in configs, an ensemble through that file ({e!r}); restore it from "
            f"{DESCRIPTIONS}"
        ) from e
    after = steps[steps.index(encoder) + 1 :]
    return Models(python=python, encoder=encoder, ensemble=ensemble, postprocess=after[0] if after else "")


def _described(
    request: Request, template: Template, data: dict[str, Any], old: Models, new: Models
) -> dict[str, Any]:
    """The new description's data: the template's, renamed, with the request's weights and fp32 only."""
    return {
        **data,
        "name": request.name,
        "weights": request.weights,
        "preprocessing": {key: new.python for key in data["preprocessing"]},
        "served": [{"model": new.encoder, "format": "onnx"}],
        "precisions": {"cpu": ["fp32"], "cuda": ["fp32"]},  # add bf16, int8, fp16 once fp32 serves
        "configs": _configs(request, template, data["configs"], old, new),
    }


def _configs(
    request: Request, template: Template, section: dict[str, Any], old: Models, new: Models
) -> dict[str, Any]:
    """The template's configs section for the new models: each model it has its own of, renamed, with
    an ``about`` of its own, sized as the request says. The template's other models (a shared
    postprocessing model, the TorchScript twin's ensemble) are left out: a shared one stays an ensemble
    step, by name, generated by the template's description alone."""
    renamed = {old.python: new.python, old.encoder: new.encoder, old.ensemble: new.ensemble}
    if new.postprocess:  # the template's post-processing, with the new model's own labels
        renamed[old.postprocess] = new.postprocess

    def about(model: str) -> str:
        return f"Scaffolded for {request.name} from {template.description}'s {model}"

    native = {**section["native"], "about": about(old.encoder)}
    native["by_format"] = {f: c for f, c in native.get("by_format", {}).items() if f == "onnx"}
    if not native["by_format"]:  # the changes were the TorchScript twin's, which it does not serve
        del native["by_format"]
    configs: dict[str, Any] = {"native": native}
    if "image_preprocessing" in section:
        configs["image_preprocessing"] = {**section["image_preprocessing"], "about": about(old.python)}
    for key in ("python_models", "ensembles"):
        kept = [
            _renamed(entry, renamed, about=about(entry["model"]))
            for entry in section.get(key, [])
            if entry["model"] in renamed
        ]
        if kept:
            configs[key] = kept
    weights = Weights(**request.weights).locate(request.models_dir)
    if request.kind == "image_classifier":  # its input size, its weights' classes and its own labels
        scaffold_image.size_configs(
            configs,
            section,
            image_size_px=request.image_size_px,
            weights=weights,
            labels=request.labels,
            postprocess=(old.postprocess, new.postprocess),
        )
    else:  # its checkpoint's width
        scaffold_text.size_configs(configs, weights=weights)
    return configs


def _renamed(entry: dict[str, Any], renamed: dict[str, str], *, about: str) -> dict[str, Any]:
    """A python_models or ensembles entry for its new model; an ensemble's steps renamed where the new
    model has its own, a shared step kept by its name."""
    entry = {**entry, "model": renamed[entry["model"]], "about": about}
    if "steps" in entry:
        entry["steps"] = [renamed.get(step, step) for step in entry["steps"]]
    return entry


def _header(description: ModelDescription, template: Template, models: list[str]) -> str:
    """The description's opening comment: where it came from, the refresh command, the shared steps."""
    header = HEADER.format(template=template.description, command=refresh_command(description))
    ensembles = description.configs.ensembles if description.configs is not None else ()
    shared = sorted({step for ensemble in ensembles for step in ensemble.steps} - set(models))
    return header + (SHARED.format(shared=", ".join(shared), template=template.description) if shared else "")


class _Dumper(yaml.SafeDumper):
    """YAML with each list of plain values on one line (``dims: [3, 224, 224]``), as descriptions have."""


def _represent_list(dumper: yaml.SafeDumper, items: list[Any]) -> yaml.Node:
    flat = not any(isinstance(item, (list, dict)) for item in items)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", items, flow_style=flat)


_Dumper.add_representer(list, _represent_list)


def local_weights(path: Path, relative_to: Path) -> dict[str, str]:
    """A description's weights entry for a local file or folder, relative to the description's folder."""
    path = Path(path).resolve()
    return {"path": os.path.relpath(path, Path(relative_to).resolve()), "sha256": weights_sha256(path)}


def build_parser() -> argparse.ArgumentParser:
    parser = command_parser(
        "python -m export.scaffold",
        __doc__,
        exit_codes="0 written, 1 not written (a file exists, the weights, tensors or the template do "
        "not fit), 2 a usage error (a bad name, kind or weights option)",
    )
    parser.add_argument(
        "kind",
        choices=[*sorted(TEMPLATES), PYTHON_KIND],
        help="the kind of model: an exported kind starts from its shipped model; python_model is any other",
    )
    parser.add_argument(
        "name", type=_name_argument, help="the model's name: lower-case letters, digits and underscores"
    )
    weights = parser.add_mutually_exclusive_group()
    weights.add_argument(
        "--weights-path",
        type=Path,
        default=argparse.SUPPRESS,
        help="a local weights file or folder (exported kinds: this or --weights-package is required)",
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
        "--labels",
        type=Path,
        help="image classifiers of other classes than ImageNet's: their labels, one a line (line index = "
        "class id), as many as the weights' classes; the model gets its own NAME_postprocess with them",
    )
    for option, default in (("--input", "INPUT:FP32:4"), ("--output", "OUTPUT:FP32:4")):
        parser.add_argument(
            option,
            action="append",
            metavar="NAME:DTYPE:DIMS",
            help=f"python_model: one {option[2:]} tensor, repeatable (DIMS comma-separated; "
            f"default {default})",
        )
    parser.add_argument(
        "--tests", type=Path, default=TESTS, help="python_model: the folder its test is written to"
    )
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
    if args.kind == PYTHON_KIND:
        if {"weights_path", "weights_package"} & set(vars(args)) or args.loader:
            parser.error("a python_model has no weights: its code is model.py; leave out the weights options")
        return python_main(args)
    if args.input or args.output:
        parser.error("--input and --output are for python_model; an exported kind has its template's tensors")
    path, package = vars(args).get("weights_path"), vars(args).get("weights_package")
    if path is None and package is None:
        parser.error(f"{args.kind} needs --weights-path or --weights-package with --loader")
    if package is not None and ":" not in (args.loader or ""):
        parser.error(f"--weights-package {package} needs --loader module:function (got {args.loader!r})")
    if path is not None and args.loader:
        parser.error("--loader goes with --weights-package; a --weights-path needs none")
    if path is not None and not path.exists():
        parser.error(f"--weights-path {path} does not exist; give the weights' file or folder")
    if args.labels is not None and (args.kind != "image_classifier" or not args.labels.is_file()):
        parser.error(f"--labels {args.labels}: give an image_classifier's labels file, one label a line")
    entry = (
        local_weights(path, args.models) if path is not None else {"package": package, "loader": args.loader}
    )
    request = Request(
        kind=args.kind,
        name=args.name,
        weights=entry,
        image_size_px=args.image_size,
        labels=args.labels,
        repository=args.repository,
        models_dir=args.models,
    )
    try:
        written = scaffold(request)
    except ExportError as e:
        print(f"scaffold failed: {e}", file=sys.stderr)
        return EXIT_FAILED
    for path in written:
        print(f"wrote {shown(path)}")
    print(f"next: python -m export --only {args.name} --precision fp32")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
