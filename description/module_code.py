"""The user's own code a ``torch_module`` description names, found and loaded with errors that say the fix.

A callable is ``path/to/file.py:function`` (a file, relative to the description's folder, loaded by path
under a private module name: it imports installed packages, not the files beside it) or
``package.module:function`` (imported as any module). :func:`code_file` names the file either way
without running it, for the export's fingerprint; :func:`load_callable` imports it and returns the
function.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from description.errors import DescriptionError

_FILE_MODULE_PREFIX = "_torch_module_code_"


def _split(reference: str) -> tuple[str, str]:
    target, _, attribute = reference.rpartition(":")
    return target, attribute


def is_file_reference(reference: str) -> bool:
    return _split(reference)[0].endswith(".py")


def code_file(reference: str, base: Path, *, where: str) -> Path:
    """The Python file ``reference`` lives in (not run); DescriptionError when there is none."""
    target, _ = _split(reference)
    if is_file_reference(reference):
        path = (base / target).resolve()
        if not path.is_file():
            raise DescriptionError(
                f"{where}: {target} does not exist (looked for {path}, relative to the description's "
                "folder); correct the path"
            )
        return path
    try:
        spec = importlib.util.find_spec(target)
    except (ImportError, ValueError) as e:
        spec = None
        reason = f"{type(e).__name__}: {e}"
    else:
        reason = "no such module"
    if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
        raise DescriptionError(
            f"{where}: cannot find the module {target!r} ({reason}); install its package (pinned in "
            "requirements.lock) or name a file as path/to/file.py:function"
        )
    return Path(spec.origin)


def load_callable(reference: str, base: Path, *, where: str) -> Callable[..., Any]:
    """The function ``reference`` names, its module imported; DescriptionError naming the fix otherwise."""
    target, attribute = _split(reference)
    module = (
        _load_file(code_file(reference, base, where=where), where)
        if is_file_reference(reference)
        else (_import(target, where))
    )
    found = getattr(module, attribute, None)
    if found is None:
        defined = sorted(
            name
            for name, value in vars(module).items()
            if callable(value)
            and not name.startswith("_")
            and getattr(value, "__module__", "") == module.__name__
        )
        raise DescriptionError(
            f"{where}: {target} has no {attribute!r}; it defines {', '.join(defined) or 'no functions'}; "
            "name one of them"
        )
    if not callable(found):
        raise DescriptionError(f"{where}: {target}:{attribute} is a {type(found).__name__}, not a function")
    return found


def _import(name: str, where: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except Exception as e:
        raise DescriptionError(
            f"{where}: importing {name} failed: {type(e).__name__}: {e}; {_import_fix(e)}"
        ) from e


def _load_file(path: Path, where: str) -> ModuleType:
    """``path`` as a module (one per file; TorchScript reads its source, so it stays in sys.modules)."""
    name = _FILE_MODULE_PREFIX + hashlib.sha256(str(path).encode()).hexdigest()[:16]
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None  # a .py file always has a source loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        del sys.modules[name]
        raise DescriptionError(
            f"{where}: importing {path} failed: {type(e).__name__}: {e}; {_import_fix(e)}"
        ) from e
    return module


def _import_fix(error: Exception) -> str:
    if isinstance(error, ModuleNotFoundError):
        return f"install {error.name!r} (pinned in requirements.lock) or remove the import"
    return "fix the error in that file"


def describe_call(function: Callable[..., Any]) -> str:
    """``name(arguments)`` for messages."""
    try:
        return f"{function.__name__}{inspect.signature(function)}"
    except (TypeError, ValueError):
        return getattr(function, "__name__", repr(function))
