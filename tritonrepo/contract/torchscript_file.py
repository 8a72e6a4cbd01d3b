"""A TorchScript file against its config, as the libtorch backend r24.10 binds them at load
(src/libtorch.cc ValidateInputs, GetNamingConvention, AddInputToMap).

``forward()`` takes one argument per config input and batch input (server #4824), unless it takes a
single ``Dict[str, Tensor]``. The backend binds config inputs to those arguments by one of three
conventions, the first that fits: every input named as a ``forward()`` argument; every input named
``<name>__<index>``, the index being the argument's position (server #3307); otherwise the config's order,
with a warning in the server's log (right only where the config lists them in ``forward()``'s order).
Outputs are ``<name>__<index>`` (the position in what ``forward()`` returns) or, failing that, the
config's order. The archive's ``forward()`` signature is read from its
``code/`` folder without torch, so the check stays fast; the backend reads nothing else that a file can
contradict without running it (datatypes and shapes are only known then).
"""

from __future__ import annotations

import ast
import io
import pickletools
import zipfile
from pathlib import Path

from tritonclient.grpc.model_config_pb2 import ModelConfig

from tritonrepo.contract.finding import Finding, error, warning

_DELIMITER = "__"


class NotTorchScript(Exception):
    """The file is not an archive that ``torch.jit.load`` (and so libtorch) can load."""


def forward_arguments(path: Path) -> list[tuple[str, str]]:
    """``forward()``'s arguments after ``self`` as (name, type), read from the archive's code."""
    try:
        with zipfile.ZipFile(path) as archive:
            root = archive.namelist()[0].split("/")[0]
            module, cls = _top_class(archive.read(f"{root}/data.pkl"))
            if not module.startswith("__torch__"):
                raise NotTorchScript(f"its data.pkl holds a {module}.{cls}, not a scripted or traced module")
            source = archive.read(f"{root}/code/{module.replace('.', '/')}.py").decode("utf-8")
    except (zipfile.BadZipFile, KeyError, IndexError, OSError) as e:
        raise NotTorchScript(f"it is not a TorchScript archive ({type(e).__name__}: {e})") from e
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "forward":
                    return [
                        (arg.arg, ast.unparse(arg.annotation) if arg.annotation else "Tensor")
                        for arg in item.args.args[1:]
                    ]
    raise NotTorchScript(f"its code has no {cls}.forward")


def _top_class(pickled: bytes) -> tuple[str, str]:
    """The module and class of the object a pickle holds, from its first GLOBAL (or STACK_GLOBAL)."""
    strings: list[str] = []
    for opcode, arg, _ in pickletools.genops(io.BytesIO(pickled)):
        if opcode.name == "GLOBAL":
            module, _, cls = str(arg).partition(" ")
            return module, cls
        if opcode.name == "STACK_GLOBAL" and len(strings) >= 2:
            return strings[-2], strings[-1]
        if isinstance(arg, str):
            strings.append(arg)
    raise NotTorchScript("its data.pkl names no class")


def named_index(name: str) -> int | None:
    """The index of a ``<name>__<index>`` name as libtorch parses it (after the first ``__``), else None."""
    start = name.find(_DELIMITER)
    if start < 0:
        return None
    digits = name[start + len(_DELIMITER) :]
    return int(digits or 0) if all(c.isdigit() for c in digits) else None


def check_torchscript(name: str, config: ModelConfig, path: Path) -> list[Finding]:
    """The findings of ``path`` against ``config`` (the model ``name``)."""
    try:
        arguments = forward_arguments(path)
    except NotTorchScript as e:
        return [
            error(
                name,
                "torchscript-load",
                f"{path.name} does not load in libtorch: {e}",
                "save the module with torch.jit.trace or torch.jit.script, then torch.jit.save",
            )
        ]
    if len(arguments) == 1 and arguments[0][1].startswith("Dict"):
        return []  # one Dict(str, Tensor) argument: inputs are bound by name, any count
    inputs = [t.name for t in config.input]
    targets = [t for entry in config.batch_input for t in entry.target_name]
    names = [a for a, _ in arguments]
    if len(names) != len(inputs) + len(targets):
        return [
            error(
                name,
                "torchscript-arity",
                f"forward() takes {len(names)} arguments {names}, the config gives {len(inputs)} inputs "
                f"{inputs} and {len(targets)} batch inputs {targets} (server #4824)",
                "declare one input (or batch input) per forward() argument",
            )
        ]
    return _inputs(name, inputs, targets, names) + _outputs(name, [t.name for t in config.output])


def _inputs(name: str, inputs: list[str], targets: list[str], arguments: list[str]) -> list[Finding]:
    if all(i in arguments for i in inputs):  # bound by argument name
        unbound = [t for t in targets if t not in arguments]
        if not unbound:
            return []
        return [
            error(
                name,
                "torchscript-naming",
                f"inputs are named after forward()'s arguments {arguments}, but batch inputs {unbound} "
                "are not, so libtorch feeds them nothing",
                "name each batch input's target_name after its forward() argument",
            )
        ]
    if any(named_index(n) is None for n in inputs):
        if len(arguments) == 1:
            return []  # one input: config order binds it right
        return _config_order(name, inputs, arguments[: len(inputs)])
    return _indices(name, "input", inputs + targets, len(arguments))


def _config_order(name: str, inputs: list[str], arguments: list[str]) -> list[Finding]:
    """Inputs bound in config order: right where they follow forward()'s arguments (names compared
    without case), wrong where they name the same arguments in another order."""
    lowered = [n.lower() for n in inputs]
    if lowered == [a.lower() for a in arguments]:
        return []
    if sorted(lowered) == sorted(a.lower() for a in arguments):
        return [
            error(
                name,
                "torchscript-order",
                f"inputs {inputs} are bound in config order to forward()'s arguments {arguments}: each "
                "tensor reaches the argument of another name",
                f"list the inputs in forward()'s order ({arguments}) or name them <NAME>__<position>",
            )
        ]
    return [
        warning(
            name,
            "torchscript-naming",
            f"inputs {inputs} are neither forward()'s arguments {arguments} nor all <name>__<index>, so "
            "libtorch binds them in config order (server #3307)",
            f"name them <NAME>__<position> ({', '.join(f'{n}__{i}' for i, n in enumerate(inputs))}) or "
            "after forward()'s arguments",
        )
    ]


def _outputs(name: str, outputs: list[str]) -> list[Finding]:
    if all(named_index(n) is not None for n in outputs):
        return _indices(name, "output", outputs, None)
    if len(outputs) == 1:
        return []  # one output: config order binds it right
    return [
        warning(
            name,
            "torchscript-naming",
            f"outputs {outputs} are not all <name>__<index>, so libtorch returns them in config order",
            "name them <NAME>__<position in what forward() returns>",
        )
    ]


def _indices(name: str, kind: str, names: list[str], count: int | None) -> list[Finding]:
    """``<name>__<index>`` names bind positions: each index once, each below ``count`` (when known)."""
    indices = [named_index(n) for n in names]
    unnamed = [n for n, i in zip(names, indices, strict=True) if i is None]
    repeated = sorted(
        {n for n, i in zip(names, indices, strict=True) if i is not None and indices.count(i) > 1}
    )
    beyond = [
        n for n, i in zip(names, indices, strict=True) if i is not None and count is not None and i >= count
    ]
    if not (unnamed or repeated or beyond):
        return []
    problem = f"{kind} names {names} bind positions {indices}"
    for what, these in (
        ("are not <name>__<index>", unnamed),
        ("share a position", repeated),
        (f"point past forward()'s {count} arguments", beyond),
    ):
        if these:
            problem += f"; {these} {what}"
    return [error(name, "torchscript-index", problem, f"number the {kind}s 0..{len(names) - 1}, once each")]
