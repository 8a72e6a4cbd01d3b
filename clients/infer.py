"""``python -m clients infer MODEL``: any model's inputs from files, its outputs printed or written.

    python -m clients infer MODEL --input NAME=rows.npy --input OTHER=ids.json
    python -m clients infer MODEL --inputs request.json --json
    python -m clients infer MODEL --inputs request.json --output-dir results/

An input is a ``.npy`` file (its array as saved) or a ``.json`` file (a nested list); ``--inputs`` takes
one JSON object of ``{input name: nested list}``. Arrays include the batch axis of a batching model.
Each is checked against the model's metadata and cast to its datatype where that loses no kind (JSON
numbers to FP32, integers to INT64); a tensor it cannot be is refused naming the input. The outputs are
printed (``--json``: ``{name: {datatype, shape, data}}``) or written as ``DIR/<output>.npy``.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from clients.sync_client import TritonClient

INPUT_SUFFIXES = (".npy", ".json")


class InputFileError(ValueError):
    """An input file that is missing, unreadable or of an unknown kind (a usage error: exit code 2)."""


def add_command(commands: Any, common: argparse.ArgumentParser, *, epilog: str) -> None:
    """Register ``infer`` among ``commands`` (the CLI's subparsers), with the ``common`` options."""
    parser = commands.add_parser(
        "infer", parents=[common], epilog=epilog, help="any model: inputs from .npy/.json files"
    )
    parser.add_argument("model", help="the model's name (its tensors are read from the server)")
    parser.add_argument(
        "--input",
        action="append",
        default=[],
        metavar="NAME=FILE",
        help="one input from a .npy file or a .json nested list (repeat for each input; default: none)",
    )
    parser.add_argument(
        "--inputs", type=Path, metavar="FILE", help="a JSON object {input name: nested list} (default: none)"
    )
    parser.add_argument(
        "--output-dir", type=Path, help="write each output as DIR/<output>.npy (default: print them)"
    )
    parser.set_defaults(handler=run)


def read_inputs(pairs: list[str], request: Path | None) -> dict[str, np.ndarray]:
    """The arrays named by ``--input NAME=FILE`` and ``--inputs FILE``; InputFileError when one is wrong."""
    arrays: dict[str, np.ndarray] = {}
    if request is not None:
        data = _json(request)
        if not isinstance(data, dict):
            raise InputFileError(f"--inputs {request}: expected a JSON object {{input name: nested list}}")
        arrays.update({str(name): np.asarray(value) for name, value in data.items()})
    for pair in pairs:
        name, sep, file = pair.partition("=")
        if not sep or not name or not file:
            raise InputFileError(f"--input must be NAME=FILE, got {pair!r}")
        if name in arrays:
            raise InputFileError(f"input {name} is given twice; give each input once")
        arrays[name] = read_array(Path(file))
    if not arrays:
        raise InputFileError("give the inputs: --input NAME=FILE (.npy or .json) or --inputs request.json")
    return arrays


def read_array(path: Path) -> np.ndarray:
    """A ``.npy`` file's array or a ``.json`` file's nested list as an array."""
    if path.suffix not in INPUT_SUFFIXES:
        raise InputFileError(f"{path}: an input file is .npy or .json, got {path.suffix or 'no suffix'}")
    if path.suffix == ".json":
        return np.asarray(_json(path))
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


def run(client: TritonClient, args: argparse.Namespace) -> int:
    outputs = client.infer(args.model, read_inputs(args.input, args.inputs))
    spec = client.signature(args.model)
    datatypes = {tensor.name: tensor.datatype for tensor in spec.outputs}
    if args.output_dir is not None:
        args.output_dir.mkdir(parents=True, exist_ok=True)
        written = {}
        for name, array in outputs.items():
            path = args.output_dir / f"{name}.npy"
            np.save(path, array, allow_pickle=False)
            written[name] = {"path": str(path), "datatype": datatypes[name], "shape": list(array.shape)}
        _print(args, written, lambda: "\n".join(f"wrote {w['path']} {w['shape']}" for w in written.values()))
        return 0
    described = {
        name: {"datatype": datatypes[name], "shape": list(array.shape), "data": _plain(array)}
        for name, array in outputs.items()
    }
    _print(args, described, lambda: _text(outputs, datatypes))
    return 0


def _plain(array: np.ndarray) -> Any:
    if array.dtype == np.object_:
        return [_plain(row) for row in array] if array.ndim > 1 else [_decode(v) for v in array]
    return array.tolist()


def _decode(value: Any) -> Any:
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else value


def _text(outputs: dict[str, np.ndarray], datatypes: dict[str, str]) -> str:
    blocks = []
    for name, array in outputs.items():
        values = np.array2string(array, precision=5, threshold=200, max_line_width=110)
        blocks.append(f"{name} ({datatypes[name]}, shape {list(array.shape)}):\n{values}")
    return "\n".join(blocks)


def _print(args: argparse.Namespace, data: Any, text: Callable[[], str]) -> None:
    print(json.dumps(data, indent=2) if args.json else text())
