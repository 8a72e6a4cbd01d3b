"""The reader of a description's YAML: one mapping at a time, key by key, each error naming the model,
the field, what was wrong and the fix; a key nobody read is refused, so a misspelt one is never ignored.
Every section of a description is read with it."""

from __future__ import annotations

from typing import Any

from description.errors import DescriptionError


class Reader:
    """One mapping of the description, read key by key; ``done()`` refuses the keys nobody read."""

    def __init__(self, model: str, where: str, data: Any, fix: str = "") -> None:
        if not isinstance(data, dict):
            raise DescriptionError(f"model {model!r}: {where} must be a mapping, got {data!r}{fix}")
        self.model, self.where, self.data = model, where, data
        self.read: set[str] = set()

    def error(self, key: str, problem: str, fix: str) -> DescriptionError:
        return DescriptionError(f"model {self.model!r}: {self.where}.{key}: {problem}; {fix}")

    def get(self, key: str, default: Any = ..., *, fix: str = "see docs/your-model.md") -> Any:
        self.read.add(key)
        if key in self.data:
            return self.data[key]
        if default is ...:
            raise self.error(key, "missing", fix)
        return default

    def integer(self, key: str, default: Any = ..., *, minimum: int = 0) -> int:
        value = self.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.error(key, f"{value!r} is not an integer of at least {minimum}", "give a whole number")
        return value

    def number(self, key: str, default: Any = ...) -> float:
        value = self.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
            raise self.error(key, f"{value!r} is not a number", "give a number such as 1.0e-5")
        return float(value)

    def done(self) -> None:
        unknown = sorted(set(self.data) - self.read)
        if unknown:
            raise DescriptionError(
                f"model {self.model!r}: {self.where}: unknown keys {unknown}; it has {sorted(self.read)}"
            )


def entries(section: Reader, key: str) -> list[Any]:
    value = section.get(key)
    if not isinstance(value, list) or not value:
        raise section.error(key, f"{value!r} is not a non-empty list", "list one entry per item")
    return value
