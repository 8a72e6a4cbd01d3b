"""The inputs of ``python -m clients infer``: read from files, then made tensors of the model's datatypes.

Three ways to give an input, each read before the server is asked anything (a mistake is a usage error,
exit code 2, naming the file or the argument):

- ``--input NAME=rows.npy``: the array as saved;
- ``--input NAME=rows.json`` (or ``--inputs request.json``, one object ``{input name: nested list}``):
  a nested list. A floating-point input may hold NaN and infinities, which JSON cannot spell as numbers:
  ``null`` and ``"NaN"`` are NaN, ``"Infinity"`` and ``"-Infinity"`` the infinities (Python's bare
  ``NaN`` and ``Infinity`` are read too). An integer or boolean input refuses them, naming where;
- ``--input NAME=@photo.jpg``: the file's bytes as one element of a BYTES input (an encoded image, a
  text); repeat it for a batch, one row per file.

Arrays include the batch axis of a batching model; a file's bytes get it added (:func:`tensors`, once
the model's metadata is known).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from clients.model_info import ModelSignature
from tritonrepo.tensors import VARIABLE_SIZE_DATATYPES, TensorSpec

INPUT_SUFFIXES = (".npy", ".json")
FLOAT_DATATYPES = ("FP16", "FP32", "FP64", "BF16")
# How a JSON input spells what JSON numbers cannot (JavaScript's and Python's names); null is NaN too.
NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


class InputFileError(ValueError):
    """An input argument or file that is missing, unreadable or malformed (a usage error: exit code 2)."""


@dataclass(frozen=True)
class JsonInput:
    """A nested list read from ``source`` (a file, or ``--inputs FILE``), converted once the datatype
    is known."""

    value: Any
    source: str


@dataclass
class FileBytes:
    """``NAME=@FILE`` given once or more: each file's bytes, one row each."""

    paths: list[Path] = field(default_factory=list)
    values: list[bytes] = field(default_factory=list)


RawInput = np.ndarray | JsonInput | FileBytes


def read_inputs(pairs: list[str], request: Path | None) -> dict[str, RawInput]:
    """What ``--input NAME=FILE`` / ``NAME=@FILE`` and ``--inputs FILE`` give, by input name."""
    inputs: dict[str, RawInput] = {}
    if request is not None:
        data = _json(request)
        if not isinstance(data, dict):
            raise InputFileError(f"--inputs {request}: expected a JSON object {{input name: nested list}}")
        inputs.update({str(name): JsonInput(value, f"--inputs {request}") for name, value in data.items()})
    for pair in pairs:
        name, sep, file = pair.partition("=")
        if not sep or not name or not file or file == "@":
            raise InputFileError(f"--input must be NAME=FILE or NAME=@FILE, got {pair!r}")
        given = inputs.get(name)
        if file.startswith("@") and (given is None or isinstance(given, FileBytes)):
            inputs[name] = _add_file(given or FileBytes(), Path(file[1:]))
        elif given is not None:
            raise InputFileError(
                f"input {name} is given twice; give each input once (repeat only NAME=@FILE, for a batch)"
            )
        else:
            inputs[name] = read_file(Path(file))
    if not inputs:
        raise InputFileError(
            "give the inputs: --input NAME=FILE (.npy or .json), --input NAME=@FILE (its bytes) or "
            "--inputs request.json"
        )
    return inputs


def _add_file(files: FileBytes, path: Path) -> FileBytes:
    try:
        files.values.append(path.read_bytes())
    except OSError as e:
        raise InputFileError(f"cannot read {path}: {e.strerror or e}") from e
    files.paths.append(path)
    return files


def read_file(path: Path) -> np.ndarray | JsonInput:
    """A ``.npy`` file's array or a ``.json`` file's nested list."""
    if path.suffix not in INPUT_SUFFIXES:
        raise InputFileError(
            f"{path}: an input file is .npy or .json, got {path.suffix or 'no suffix'}; "
            f"to send the file's bytes, write @{path}"
        )
    if path.suffix == ".json":
        return JsonInput(_json(path), str(path))
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise InputFileError(f"cannot read {path} as a .npy array: {e}") from e


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise InputFileError(f"cannot read {path}: {e.strerror or e}") from e
    except ValueError as e:
        raise InputFileError(f"{path} is not valid JSON: {e}") from e


def tensors(signature: ModelSignature, inputs: Mapping[str, RawInput]) -> dict[str, np.ndarray]:
    """Each input as an array for the model's datatype (the client then checks it against the model)."""
    arrays = {}
    for name, given in inputs.items():
        if isinstance(given, np.ndarray):
            arrays[name] = given
        elif isinstance(given, FileBytes):
            arrays[name] = bytes_tensor(signature.input(name), given, batches=signature.batches)
        else:
            arrays[name] = json_array(signature.input(name), given)
    return arrays


def bytes_tensor(spec: TensorSpec, files: FileBytes, *, batches: bool) -> np.ndarray:
    """The files' bytes as a BYTES tensor: one row per file (the batch axis of a batching model)."""
    where = f"{spec.name}=@{files.paths[0]}"
    if spec.datatype not in VARIABLE_SIZE_DATATYPES:
        raise InputFileError(
            f"{where}: {spec.name} is {spec.datatype}, and @FILE sends a file's bytes to a BYTES input; "
            f"give {spec.name} as a .npy or .json file"
        )
    rows = len(files.values)
    dims = list(spec.dims) if batches else list(spec.dims[1:])
    first = [] if batches else list(spec.dims[:1])
    if any(size not in (1, -1) for size in dims) or any(size not in (-1, rows) for size in first):
        shape = f"[batch, {', '.join(map(str, spec.dims))}]" if batches else str(list(spec.dims))
        raise InputFileError(
            f"{where}: {spec.name} takes {shape}, and @FILE gives one value per file; "
            f"give {spec.name} as a .npy or .json file of that shape"
        )
    array = np.empty([rows] + [1] * len(dims), dtype=np.object_)
    array.reshape(-1)[:] = files.values
    return array


def json_array(spec: TensorSpec, given: JsonInput) -> np.ndarray:
    """A nested list as an array for ``spec``: NaN and infinities as :data:`NON_FINITE` spells them (or
    null), only in a floating-point input."""
    floating = spec.datatype in FLOAT_DATATYPES
    for position, value in _leaves(given.value):
        if _refused(value, spec.datatype):
            allowed = (
                'numbers, null or "NaN" for NaN, "Infinity" and "-Infinity"'
                if floating
                else f"{spec.datatype} values (NaN and infinities exist only in floating-point inputs)"
            )
            raise InputFileError(
                f"{given.source}: {spec.name}{position} is {json.dumps(value)}; {spec.name} is "
                f"{spec.datatype} and takes {allowed}"
            )
    try:
        if floating:
            return np.array(_with_non_finite(given.value), dtype=np.float64)
        return np.array(given.value)
    except ValueError as e:
        raise InputFileError(
            f"{given.source}: {spec.name} is not a rectangular nested list ({e}); give every row the "
            "same length"
        ) from e


def _refused(value: Any, datatype: str) -> bool:
    """Whether a JSON leaf cannot be an element of a ``datatype`` tensor."""
    if isinstance(value, dict):
        return True
    if datatype in FLOAT_DATATYPES:
        return isinstance(value, str) and value not in NON_FINITE
    return value is None or (isinstance(value, str) and datatype not in VARIABLE_SIZE_DATATYPES)


def _leaves(value: Any, position: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(value, list):
        for index, item in enumerate(value):
            yield from _leaves(item, f"{position}[{index}]")
    else:
        yield position, value


def _with_non_finite(value: Any) -> Any:
    if isinstance(value, list):
        return [_with_non_finite(item) for item in value]
    if value is None:
        return math.nan
    return NON_FINITE[value] if isinstance(value, str) else value
