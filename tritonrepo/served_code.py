"""The Python code Triton runs beside the configs: the helpers each Python model links, and loading a
served ``.py`` file outside Triton for its pure functions.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType

from google.protobuf import json_format

from tritonrepo.configs import load_model_config
from tritonrepo.errors import RepositoryError

# The batching helper every Python model imports; it lives at the repository's top level and each
# Python model's version folder links to it (see the file's docstring for why).
BATCHING_HELPER = "pybackend_batching.py"
# The typed reader of a model's config parameters, shipped the same way.
PARAMETERS_HELPER = "pybackend_parameters.py"


def load_served_module(path: Path, *, name: str) -> ModuleType:
    """Import a served ``.py`` file by path, for its pure functions (no sys.path edit).

    Inside Triton a model's version folder is on ``sys.path``, so a model.py imports the modules beside it
    by bare name (``from pybackend_batching import ...``). Here a bare name that nothing installed
    provides is looked up beside ``path`` while it executes, and forgotten afterwards: ``sys.modules``
    then holds ``name`` (dataclasses look their module up there) and nothing else new. A module that
    imports ``triton_python_backend_utils`` needs it (or a stand-in) in ``sys.modules`` first.
    """
    path = Path(path)
    if not path.is_file():
        raise RepositoryError(f"cannot load {path}: no such file; is the model repository complete?")
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise RepositoryError(f"cannot load {path} as a Python module")
    module = importlib.util.module_from_spec(spec)
    siblings = _SiblingFinder(path.parent)
    sys.modules[name] = module
    sys.meta_path.append(siblings)  # last, as Triton appends the version folder to sys.path
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    finally:
        sys.meta_path.remove(siblings)
        for sibling in siblings.found:
            sys.modules.pop(sibling, None)
    return module


def load_preprocess_module(repository: Path, preprocess_model: str = "image_preprocess") -> ModuleType:
    """An image preprocessing model's ``<preprocess_model>/1/model.py`` as a module: its pure functions
    need no Triton."""
    path = Path(repository) / preprocess_model / "1" / "model.py"
    return load_served_module(path, name=f"_served_{preprocess_model}")


def preprocess_settings(repository: Path, module: ModuleType, preprocess_model: str = "image_preprocess"):
    """The preprocessing settings from the model's config.pbtxt, read as Triton hands them over."""
    config = load_model_config(Path(repository) / preprocess_model)
    as_json = json_format.MessageToDict(config, preserving_proto_field_name=True)
    return module.PreprocessSettings.from_model_config(as_json)


class _SiblingFinder(importlib.abc.MetaPathFinder):
    """Finds ``<folder>/<name>.py`` for a top-level import, as a version folder on sys.path would."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.found: list[str] = []

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> ModuleSpec | None:
        candidate = self.folder / f"{fullname}.py"
        if "." in fullname or not candidate.is_file():
            return None
        self.found.append(fullname)
        return importlib.util.spec_from_file_location(fullname, candidate)
