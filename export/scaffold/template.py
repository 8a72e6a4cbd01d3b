"""Scaffold an image classifier or a sentence encoder from the shipped description of its kind.

``python -m export.scaffold KIND NAME --weights-path PATH`` (or ``--weights-package P --loader M:F``)
writes, taking the shipped description of the same kind as the starting point:

- ``model_descriptions/NAME.yaml``: the description (weights with their sha256, architecture, tolerance,
  precisions) with its ``configs`` section: the template's, renamed for NAME, with what the options and
  the weights change (an image classifier's input size and class count: export/scaffold/image.py; a
  sentence encoder's width: export/scaffold/text.py);
- the config.pbtxt of every model that section generates, written by the generator of every shipped
  config (description/generated_configs.py), never copied: ``NAME_onnx``, the exported model; for image
  classifiers ``NAME_preprocess`` (a Python model running image_preprocess's code at the model's size)
  and the ensemble ``NAME_classifier`` (preprocess -> NAME_onnx -> image_postprocess, ImageNet's labels;
  for other classes, ``--labels LABELS.txt``, one a line, line index = class id: -> ``NAME_postprocess``,
  image_postprocess's code with a copy of them); for sentence encoders ``NAME_tokenizer``
  (text_tokenizer's code; the export copies the weights' tokenizer.json beside it) and the ragged
  ensemble ``NAME_embedder`` (tokenizer -> NAME_onnx); and the folders and links they need
  (export/scaffold/files.py).

A model of the template the new one shares (image_postprocess, without --labels) stays the template's:
the new description names it only as an ensemble step, which the generator reads from the repository, so
each generated config has exactly one description. Nothing is overwritten: an existing file is an error.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from description.generated_configs import config_path, generate, refresh_command, write_configs
from description.model import IMAGE_KIND, ModelDescription, Weights, parse_description, raw_description
from export.common import ExportError
from export.scaffold import image as scaffold_image
from export.scaffold import text as scaffold_text
from export.scaffold.files import check_name, lay_out, refuse_existing, write_description
from export.text_warmup import encoder_warmup_files, write_files
from tritonrepo.errors import RepositoryError
from tritonrepo.paths import DESCRIPTIONS, REPOSITORY


@dataclass(frozen=True, kw_only=True)
class Template:
    """The shipped description of a kind a scaffold starts from, and the suffixes of the new models that
    take the places of its preprocessing (or tokenizer) model and of its ensemble through the ONNX file."""

    description: str
    python_suffix: str
    ensemble_suffix: str


TEMPLATES = {
    IMAGE_KIND: Template(
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
        if self.labels is not None and self.kind != IMAGE_KIND:
            raise ExportError(f"a {self.kind} has no labels, an {IMAGE_KIND}'s; leave out --labels")
        check_name(self.name)


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
        made = generate(description, request.repository)
    except RepositoryError as e:  # an ensemble step the new model shares, missing from the repository
        raise ExportError(
            f"{e}; scaffold into a repository that holds {template.description}'s models"
        ) from e
    tokenizer = None  # a sentence encoder's, for its warm-up samples
    if request.kind == "sentence_encoder":
        tokenizer = scaffold_text.tokenizer(Weights(**request.weights).locate(request.models_dir))
    targets = [source, *(config_path(request.repository, model) for model in made)]
    if request.labels is not None:  # copied beside the model's own post-processing
        targets.append(request.repository / new.postprocess / "1" / scaffold_image.LABELS_FILE)
    refuse_existing(targets)
    write_description(source, _header(description, template, list(made)), data)
    write_configs(description, request.repository, made)  # the generator of every shipped config
    code = {new.python: old.python, new.postprocess: old.postprocess}  # each model -> the code it runs
    lay_out(description, request.repository, {model: origin for model, origin in code.items() if model})
    if request.labels is not None:
        shutil.copyfile(request.labels, targets[-1])
    if tokenizer is not None:  # the ragged encoder warms up with the new tokenizer's ids
        config = made[new.encoder].config
        targets += write_files(encoder_warmup_files(config, request.repository / new.encoder, tokenizer))
    return targets


def _template_data(request: Request, template: Template) -> dict[str, Any]:
    """The template's description as YAML data: the one in ``models_dir`` if there, else the shipped one."""
    path = request.models_dir / f"{template.description}.yaml"
    if not path.is_file():
        path = DESCRIPTIONS / f"{template.description}.yaml"
    return raw_description(path)


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
    if request.kind == IMAGE_KIND:  # its input size, its weights' classes and its own labels
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
