"""``python -m clients infer MODEL``: any model's inputs from files, its outputs printed by name or written.

    python -m clients infer MODEL --input NAME=rows.npy --input OTHER=ids.json
    python -m clients infer image_classifier --input IMAGE_BYTES=@cat.png
    python -m clients infer MODEL --inputs request.json --json
    python -m clients infer MODEL --inputs request.json --output-dir results/

How each input is given (``.npy``, ``.json`` with NaN and infinities, ``@FILE`` for a file's bytes) is
clients/infer_inputs.py's. Each is checked against the model's metadata and cast to its datatype where
that loses no kind (JSON numbers to FP32, integers to INT64); a tensor it cannot be is refused naming the
input. The outputs are printed by name (``--json``: ``{name: {datatype, shape, data}}``, NaN and
infinities written as the strings ``"NaN"``, ``"Infinity"`` and ``"-Infinity"`` that the inputs read) or
written as ``DIR/<output>.npy``.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from clients.infer_inputs import read_inputs, tensors
from clients.sync_client import TritonClient


def add_command(commands: Any, common: argparse.ArgumentParser, *, epilog: str) -> None:
    """Register ``infer`` among ``commands`` (the CLI's subparsers), with the ``common`` options."""
    parser = commands.add_parser(
        "infer",
        parents=[common],
        epilog=epilog,
        help="any model: inputs from .npy/.json files or a file's bytes, outputs by name",
        description="Call any model with inputs from files; print its outputs by name (or --json).",
    )
    parser.add_argument("model", help="the model's name (its tensors are read from the server)")
    parser.add_argument(
        "--input",
        action="append",
        default=[],
        metavar="NAME=FILE",
        help='one input: NAME=rows.npy, NAME=rows.json (a nested list; NaN as null or "NaN", '
        '"Infinity", "-Infinity") or NAME=@FILE (the file\'s bytes, for a BYTES input such as '
        "IMAGE_BYTES=@cat.png; repeat for a batch); repeat for each input (default: none)",
    )
    parser.add_argument(
        "--inputs", type=Path, metavar="FILE", help="a JSON object {input name: nested list} (default: none)"
    )
    parser.add_argument(
        "--output-dir", type=Path, help="write each output as DIR/<output>.npy (default: print them)"
    )
    parser.set_defaults(handler=run)


def run(client: TritonClient, args: argparse.Namespace) -> int:
    given = read_inputs(args.input, args.inputs)  # a usage error here asks the server nothing
    spec = client.signature(args.model)
    answered = client.infer(args.model, tensors(spec, given))
    outputs = {t.name: answered[t.name] for t in spec.outputs if t.name in answered}  # the model's order
    datatypes = {tensor.name: tensor.datatype for tensor in spec.outputs}
    if args.output_dir is not None:
        args.output_dir.mkdir(parents=True, exist_ok=True)
        written = {}
        for name, array in outputs.items():
            path = args.output_dir / f"{name}.npy"
            np.save(path, _savable(array), allow_pickle=False)
            written[name] = {"path": str(path), "datatype": datatypes[name], "shape": list(array.shape)}
        _print(args, written, lambda: "\n".join(f"wrote {w['path']} {w['shape']}" for w in written.values()))
        return 0
    described = {
        name: {"datatype": datatypes[name], "shape": list(array.shape), "data": _plain(array)}
        for name, array in outputs.items()
    }
    _print(args, described, lambda: _text(outputs, datatypes))
    return 0


def _savable(array: np.ndarray) -> np.ndarray:
    """BYTES elements as text: a .npy of Python objects could be read back only with pickle."""
    return np.array(_plain(array), dtype=str) if array.dtype == np.object_ else array


def _plain(array: np.ndarray) -> Any:
    if array.dtype == np.object_:
        return [_plain(row) for row in array] if array.ndim > 1 else [_decode(v) for v in array]
    if array.dtype.kind == "f" and not np.all(np.isfinite(array)):
        return _spelled(array.tolist())
    return array.tolist()


def _spelled(value: Any) -> Any:
    """Non-finite floats as the strings JSON inputs read back (plain JSON has no NaN or infinity)."""
    if isinstance(value, list):
        return [_spelled(item) for item in value]
    if math.isnan(value):
        return "NaN"
    return value if math.isfinite(value) else ("Infinity" if value > 0 else "-Infinity")


def _decode(value: Any) -> Any:
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else value


def _text(outputs: dict[str, np.ndarray], datatypes: dict[str, str]) -> str:
    blocks = []
    for name, array in outputs.items():
        values = np.array2string(_savable(array), precision=5, threshold=200, max_line_width=110)
        blocks.append(f"{name} ({datatypes[name]}, shape {list(array.shape)}):\n{values}")
    return "\n".join(blocks)


def _print(args: argparse.Namespace, data: Any, text: Callable[[], str]) -> None:
    print(json.dumps(data, indent=2) if args.json else text())
