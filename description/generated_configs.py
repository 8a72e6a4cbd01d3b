"""Every config.pbtxt a description states, generated, never hand-written.

A description (model_descriptions/*.yaml) states its models once: the served files in its ``module``
section (a torch_module) or ``configs.native``, and in ``configs`` its image preprocessing model, other
Python models and ensembles (description/config_spec.py). Each becomes Triton's own protobuf
(``model_config_pb2.ModelConfig``), with what every model of the project has added
(description/config_rules.py), written in its text format under a header naming the command that regenerates
it. The committed file is compared with what this module writes now (tests/unit/test_generated_configs.py),
as a lock file is.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from description.config_rules import (
    Notes,
    ensemble_config,
    image_preprocess_config,
    native_config,
    python_config,
)
from description.config_spec import ConfigsSpec, NativeSpec, native_from_module
from description.errors import DescriptionError
from description.model import ModelDescription
from tritonrepo.atomic_files import write_text_atomically
from tritonrepo.configs import load_model_config

COMMENT_WIDTH = 108


@dataclass(frozen=True)
class Generated:
    config: ModelConfig
    notes: Notes


def refresh_command(description: ModelDescription) -> str:
    return f"python -m export --only {description.name} --configs-only"


def native_spec(description: ModelDescription) -> NativeSpec | None:
    """The served files' tensors and batching, from the module section or configs.native."""
    if description.module is not None:
        return native_from_module(description.module)
    return description.configs.native if description.configs is not None else None


def generate(description: ModelDescription, repository: Path) -> dict[str, Generated]:
    """Every model ``description`` generates -> its config and notes. An ensemble step it does not
    generate is read from ``repository``."""
    spec = description.configs or ConfigsSpec()
    made = {python.model: Generated(*python_config(python)) for python in spec.python_models}
    native = native_spec(description)
    if native is not None:
        longest = _longest_request(description, repository, made) if native.ragged else None
        for served in description.served:
            made[served.model] = Generated(
                *native_config(
                    served.model,
                    served.format,
                    native,
                    longest=longest,
                    tf32=description.allows("tf32", "cuda"),
                )
            )
    if spec.image_preprocessing is not None:
        if native is None or len(native.inputs) != 1:
            raise DescriptionError(
                f"model {description.name!r}: image preprocessing feeds a model of one input"
            )
        name = description.preprocessing["model"]
        made[name] = Generated(
            *image_preprocess_config(
                name, spec.image_preprocessing, pixels=native.inputs[0], max_batch_size=native.max_batch_size
            )
        )
    for ensemble in spec.ensembles:
        steps = [step_config(step, repository, made) for step in ensemble.steps]
        made[ensemble.model] = Generated(*ensemble_config(ensemble.model, steps, about=ensemble.about))
    return made


def step_config(name: str, repository: Path, made: dict[str, Generated]) -> ModelConfig:
    """The config of model ``name``: generated (in ``made``) or, a step shared with another description,
    read from ``repository``."""
    return made[name].config if name in made else load_model_config(Path(repository) / name)


def _longest_request(description: ModelDescription, repository: Path, made: dict[str, Generated]) -> int:
    """The most tokens one request carries: the max_length of the tokenizer model that sends them."""
    tokenizer = description.preprocessing.get("tokenizer_model")
    if tokenizer is None:
        raise DescriptionError(
            f"model {description.name!r}: a ragged input needs preprocessing.tokenizer_model"
        )
    return int(step_config(tokenizer, repository, made).parameters["max_length"].string_value)


def model_config(description: ModelDescription, model: str, repository: Path) -> ModelConfig:
    """The config of repository model ``model``, from the description alone."""
    return generate(description, repository)[model].config


def config_text(description: ModelDescription, generated: Generated) -> str:
    """The generated config.pbtxt: a header, the fields with their reasons, one warm-up sample a line."""
    model = generated.config.name
    config = ModelConfig()
    config.CopyFrom(generated.config)
    warmups = list(config.model_warmup)
    config.ClearField("model_warmup")
    lines = [
        f"# Generated by `{refresh_command(description)}`; edit the description, not this file:",
        f"# the description named {description.name} in {description.folder.name}/ says why each number is "
        "what it is.",
    ]
    if generated.notes.get("header"):
        lines += _comment(generated.notes["header"])
    lines += _body(text_format.MessageToString(config).splitlines(), generated.notes)
    if warmups:
        lines += [*_comment(generated.notes.get("model_warmup", "")), "model_warmup ["]
        lines += [f"  {{ {text_format.MessageToString(w, as_one_line=True)} }}," for w in warmups]
        lines[-1] = lines[-1].rstrip(",")
        lines.append("]")
    text = "\n".join([*lines, ""])
    if text_format.Parse(text, ModelConfig()) != generated.config:
        raise AssertionError(f"{model}: the generated text does not parse back to its config")
    return text


def _body(lines: list[str], notes: Notes) -> list[str]:
    """The config's lines, each block's first occurrence preceded by its note (``parameters:KEY`` for
    the parameter of that key)."""
    out: list[str] = []
    used: set[str] = set()
    for index, line in enumerate(lines):
        stripped = line.strip()
        anchor = stripped.removesuffix(" {") if stripped.endswith(" {") else ""
        if anchor == "parameters" and index + 1 < len(lines):
            anchor += ":" + lines[index + 1].strip().removeprefix("key: ").strip('"')
        if anchor in notes and anchor not in used:
            used.add(anchor)
            out += _comment(notes[anchor], indent=len(line) - len(line.lstrip()))
        out.append(line)
    return out


def _comment(text: str, indent: int = 0) -> list[str]:
    return [
        " " * indent + "# " + line
        for line in textwrap.wrap(text, COMMENT_WIDTH - indent, break_on_hyphens=False)
    ]


def config_path(repository: Path, model: str) -> Path:
    return Path(repository) / model / "config.pbtxt"


def stale_configs(description: ModelDescription, repository: Path, made: dict[str, Generated]) -> list[Path]:
    """The models whose config.pbtxt differs from ``made``, what the description generates."""
    return [
        config_path(repository, model)
        for model, generated in made.items()
        if not _same(config_path(repository, model), config_text(description, generated))
    ]


def _same(path: Path, text: str) -> bool:
    try:
        return path.read_text(encoding="utf-8") == text
    except OSError:
        return False


def write_configs(
    description: ModelDescription,
    repository: Path,
    made: dict[str, Generated],
    *,
    check: Callable[[], object] | None = None,
) -> list[Path]:
    """Write each stale config of ``made`` (generated once, by :func:`generate`); returns those written.

    ``check`` (loading and checking the model) runs first when anything is to be written, so that a
    broken model or description stops the export before any file changes."""
    stale = stale_configs(description, repository, made)
    if stale and check is not None:
        check()
    for path in stale:
        write_text_atomically(path, config_text(description, made[path.parent.name]))
    return stale
