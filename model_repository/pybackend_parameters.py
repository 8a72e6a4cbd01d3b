"""A model's config parameters, read by type, for every Python-backend model.

Triton hands ``initialize()`` the model config as JSON, each parameter as ``{"string_value": "..."}``
(an empty value may be left out). :class:`ModelParameters` reads them by type; a parameter that is
missing, or whose value does not parse, raises :class:`ParameterError` naming the model, the parameter,
the value and what was expected, so the model fails to load with that message::

    from pybackend_parameters import ModelParameters

    parameters = ModelParameters(config)
    self.k = parameters.integer("top_k", minimum=1)
    self.buckets = parameters.integers("length_buckets", default=())

Without ``default`` a parameter is required. This file ships as pybackend_batching.py does: one copy
at the repository's top level, linked from each Python model's version folder (see that file's
docstring for why) and, in the derived local repository, beside the native runner.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")
_REQUIRED: Any = object()
_FLAGS = {"true": True, "false": False}


class ParameterError(ValueError):
    """A config parameter is missing or malformed: the model cannot load."""


class ModelParameters:
    """The ``parameters`` of ``model_config`` (the config as Triton hands it to ``initialize()``)."""

    def __init__(self, model_config: dict) -> None:
        self.model = model_config.get("name", "this model")
        self.values = {
            key: value.get("string_value", "") for key, value in model_config.get("parameters", {}).items()
        }

    def text(self, key: str, default: str = _REQUIRED) -> str:
        return self._read(key, default, str, "text")

    def integer(self, key: str, default: int = _REQUIRED, *, minimum: int | None = None) -> int:
        value = self._read(key, default, int, "an integer")
        if minimum is not None and value < minimum:
            raise self._malformed(key, f"an integer of at least {minimum}")
        return value

    def number(self, key: str, default: float = _REQUIRED) -> float:
        return self._read(key, default, float, "a number")

    def integers(self, key: str, default: tuple[int, ...] = _REQUIRED) -> tuple[int, ...]:
        """Comma-separated integers ("16,64,256"); an empty value is no integers."""
        return self._read(key, default, lambda v: _split(v, int), "comma-separated integers like '16,64'")

    def numbers(self, key: str, default: tuple[float, ...] = _REQUIRED) -> tuple[float, ...]:
        """Comma-separated numbers ("0.5,0.5,0.5"); an empty value is no numbers."""
        return self._read(key, default, lambda v: _split(v, float), "comma-separated numbers like '0.5,1'")

    def flag(self, key: str, default: bool = _REQUIRED) -> bool:
        """``true`` or ``false``, in any case (as Triton's backends read their boolean parameters)."""
        return self._read(key, default, lambda v: _FLAGS[v.strip().lower()], "true or false")

    def json(self, key: str, default: Any = _REQUIRED) -> Any:
        return self._read(key, default, json.loads, "JSON")

    def _read(self, key: str, default: Any, parse: Callable[[str], T], expected: str) -> T:
        if key not in self.values:
            if default is _REQUIRED:
                raise ParameterError(
                    f"{self.model}: config parameter {key!r} is missing; expected {expected} "
                    f'(parameters {{ key: "{key}" value: {{ string_value: "..." }} }} in its config.pbtxt)'
                )
            return default
        try:
            return parse(self.values[key])
        except (ValueError, KeyError) as e:
            raise self._malformed(key, expected) from e

    def _malformed(self, key: str, expected: str) -> ParameterError:
        return ParameterError(
            f"{self.model}: config parameter {key!r} is {self.values[key]!r}; expected {expected}"
        )


def _split(value: str, parse: Callable[[str], T]) -> tuple[T, ...]:
    return tuple(parse(part) for part in value.split(",")) if value.strip() else ()
