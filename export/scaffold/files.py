"""What every scaffold (export/scaffold/cli.py, scaffold_module.py, scaffold_python.py) writes the same way.

- :func:`check_name`: a model name that can name a repository model and its Python module;
- :func:`parse_tensor`: a tensor from the command line, ``NAME:DTYPE:DIMS``; ``BATCHING``, where a new
  model's batching starts;
- :func:`refuse_existing`: nothing is ever written over;
- :func:`write_description`: the description's YAML under its header, lists of plain values on one line;
- :func:`lay_out`: beside the generated configs, what Triton needs to load each generated model: a version
  folder for every model, each Python model's code linked (its model.py and the helpers every Python
  model has) and an ensemble's empty version folder kept by a ``.gitkeep``;
- :func:`local_weights`: a description's weights entry for a local file or folder.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from description.generated_configs import generate
from description.model import ModelDescription, weights_sha256
from export.common import ExportError, shown
from tritonrepo.served_code import BATCHING_HELPER, PARAMETERS_HELPER
from tritonrepo.tensors import TensorSpec

COLUMNS = 104  # the width a description's YAML wraps at
KEEP = ".gitkeep"  # keeps an ensemble's empty version folder in git
# The starting point: 1 ms of queueing buys batches of the requests that arrive together, and two
# instances (at least two behind the bounded queue, description/config_rules.py) let one batch run while the
# next forms. Tune them in the description once the model is real.
BATCHING: dict[str, Any] = {"max_queue_delay_us": 1000, "preferred_batch_sizes": [8, 16, 32]}


def check_name(name: str) -> str:
    """``name`` when it can name a model (and its Python module); ExportError naming a fixed one if not."""
    if not name.isidentifier() or name != name.lower():
        fixed = re.sub(r"\W", "_", name.lower())
        fixed = fixed if fixed.isidentifier() else f"model_{fixed}"
        raise ExportError(f"name {name!r}: use lower-case letters, digits and underscores, e.g. {fixed!r}")
    return name


def parse_tensor(text: str) -> TensorSpec:
    """``NAME:DTYPE:DIMS`` with DIMS comma-separated (``FEATURES:FP32:4``, ``IMAGE:FP32:3,224,224``)."""
    try:
        name, dtype, dims = text.split(":")
        return TensorSpec(name=name, datatype=dtype.upper(), dims=tuple(int(d) for d in dims.split(",")))
    except ValueError:
        raise ExportError(
            f"tensor {text!r}: write NAME:DTYPE:DIMS, DIMS comma-separated, e.g. FEATURES:FP32:4"
        ) from None


def print_written(paths: Iterable[Path]) -> None:
    """The command's output line for each file it wrote."""
    for path in paths:
        print(f"wrote {shown(path)}")


def refuse_existing(targets: Iterable[Path]) -> None:
    existing = [str(path) for path in targets if path.exists()]
    if existing:
        raise ExportError(f"not overwriting {existing}; choose another name or remove them")


class _Dumper(yaml.SafeDumper):
    """YAML with each list of plain values on one line (``dims: [3, 224, 224]``), as descriptions have."""


def _represent_list(dumper: yaml.SafeDumper, items: list[Any]) -> yaml.Node:
    flat = not any(isinstance(item, (list, dict)) for item in items)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", items, flow_style=flat)


_Dumper.add_representer(list, _represent_list)


def write_description(source: Path, header: str, data: Mapping[str, Any]) -> None:
    """``data`` as YAML in ``source``, under the comment ``header``."""
    source.parent.mkdir(parents=True, exist_ok=True)
    text = yaml.dump(dict(data), Dumper=_Dumper, sort_keys=False, width=COLUMNS)
    source.write_text(header + text, encoding="utf-8")


def python_models(description: ModelDescription) -> list[str]:
    """The Python-backend models ``description`` generates: its python_models and its image preprocessing."""
    configs = description.configs
    if configs is None:
        return []
    models = [python.model for python in configs.python_models]
    if configs.image_preprocessing is not None:
        models.append(description.preprocessing["model"])
    return models


def lay_out(description: ModelDescription, repository: Path, code: Mapping[str, str]) -> list[str]:
    """Create what the generated models need beside their configs to load: each one's version folder, in
    each Python model's the helpers and, for those in ``code`` (model -> the model whose code it runs),
    model.py linked to that model's; in each ensemble's a ``.gitkeep``. Nothing existing is replaced.
    Returns the Python models that still have no model.py (their code is the user's to write)."""
    generated = generate(description, repository)
    ensembles = {e.model for e in description.configs.ensembles} if description.configs is not None else set()
    for model in generated:
        (repository / model / "1").mkdir(parents=True, exist_ok=True)
    for model in ensembles:
        (repository / model / "1" / KEEP).touch()
    missing = []
    for model in python_models(description):
        version = repository / model / "1"
        links = {helper: Path("..", "..", helper) for helper in (BATCHING_HELPER, PARAMETERS_HELPER)}
        if model in code:
            links["model.py"] = Path("..", "..", code[model], "1", "model.py")
        for name, target in links.items():
            if not (version / name).exists() and not (version / name).is_symlink():
                os.symlink(target, version / name)
        if not (version / "model.py").exists():
            missing.append(model)
    return missing


def code_origin(repository: Path, model: str) -> str:
    """The model whose code ``model`` runs: the target of its linked model.py, or itself."""
    linked = repository / model / "1" / "model.py"
    if linked.is_symlink():
        return Path(os.readlink(linked)).parent.parent.name
    return model


def local_weights(path: Path, relative_to: Path) -> dict[str, str]:
    """A description's weights entry for a local file or folder, relative to the description's folder."""
    path = Path(path).resolve()
    return {"path": relative(path, relative_to), "sha256": weights_sha256(path)}


def relative(path: Path, relative_to: Path) -> str:
    """``path`` as a description names it: relative to the description's folder ``relative_to``."""
    return Path(os.path.relpath(Path(path).resolve(), Path(relative_to).resolve())).as_posix()
