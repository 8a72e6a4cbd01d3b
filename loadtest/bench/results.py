"""Write a run's ``results.json``: what the CPU and the GPU modes of the benchmark both record."""

from __future__ import annotations

import json
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any


def write_results(folder: Path, results: dict[str, Any]) -> Path:
    """``results`` as ``folder/results.json`` (paths as strings, dataclasses as dicts); its path."""
    path = folder / "results.json"
    path.write_text(json.dumps(results, indent=2, default=_json_default))
    return path


def _json_default(value: object) -> object:
    if isinstance(value, Path):
        return str(value)
    if is_dataclass(value) and not isinstance(value, type):
        return asdict(value)
    raise TypeError(f"cannot write {type(value).__name__} to results.json")
