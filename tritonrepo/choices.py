"""The one check of a setting that takes one of a fixed set of values, and the one message it gives."""

from __future__ import annotations

from collections.abc import Collection


def check_choice(name: str, value: str, allowed: Collection[str]) -> None:
    """ValueError unless ``value`` is one of ``allowed``, naming the setting, the values it takes and the one
    given."""
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
