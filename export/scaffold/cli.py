"""Scaffold a new model: its description, and the configs generated from it with what they need to load.

One command for every kind, each writing the same way (export/scaffold/files.py) and never over a file:

- ``python -m export.scaffold efficientnet_lite|sentence_encoder NAME --weights-path PATH`` (or
  ``--weights-package P --loader M:F``): from the shipped description of the kind
  (export/scaffold/template.py);
- ``python -m export.scaffold torch_module NAME --model FILE.py:FN --check-inputs FILE.py:FN --weights-path W
  --input NAME:DTYPE:DIMS ... --output NAME:DTYPE:DIMS[:METRIC] ... [--preprocess MODEL] [--postprocess
  MODEL]``: any ``torch.nn.Module`` of yours, in an ensemble with the models named
  (export/scaffold/module.py);
- ``python -m export.scaffold python_model NAME --input IN:FP32:4 --output OUT:FP32:4``: a Python-backend
  model for anything else, with its model.py and a test that serves it (export/scaffold/python.py);
- ``python -m export.scaffold KIND NAME --configs-only``: a description written by hand, its configs
  (re)written with the folders and links they need.

After an edit of the description, ``python -m export --only NAME --configs-only`` regenerates the
configs; ``python -m export --only NAME`` exports the model.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from description.errors import DescriptionError
from description.model import IMAGE_KIND, MODULE_KIND, PYTHON_KIND, RENAMED_KINDS, renamed_kind
from export.common import ExportError, add_folder_options
from export.scaffold.files import check_name, local_weights, parse_tensor, print_written
from export.scaffold.module import callable_entry, configs_only_main, module_main, parse_output
from export.scaffold.python import python_main
from export.scaffold.template import TEMPLATES, Request, scaffold
from tritonrepo.commands import EXIT_FAILED, EXIT_OK, command_parser
from tritonrepo.paths import ROOT

TESTS = ROOT / "tests" / "integration"  # where the project keeps the tests that start a server


def build_parser() -> argparse.ArgumentParser:
    parser = command_parser(
        "python -m export.scaffold",
        __doc__,
        exit_codes="0 written, 1 not written (a file exists, the weights, tensors or the template do "
        "not fit), 2 a usage error (a bad name, kind or option)",
    )
    parser.add_argument(
        "kind",
        type=_kind_argument,
        choices=[*sorted(TEMPLATES), MODULE_KIND, PYTHON_KIND],
        help="the kind of model: an exported kind starts from its shipped model; torch_module is any "
        "torch.nn.Module of yours (export/scaffold/module.py); python_model is any other",
    )
    parser.add_argument(
        "name", type=_name_argument, help="the model's name: lower-case letters, digits and underscores"
    )
    weights = parser.add_mutually_exclusive_group()
    weights.add_argument(
        "--weights-path",
        type=Path,
        default=argparse.SUPPRESS,
        help="a local weights file or folder (exported kinds: this or --weights-package is required)",
    )
    weights.add_argument(
        "--weights-package",
        default=argparse.SUPPRESS,
        help="an installed package holding the weights, with --loader (this or --weights-path is required)",
    )
    parser.add_argument(
        "--loader", help="with --weights-package: module:function, called to return the weights' path"
    )
    parser.add_argument(
        "--image-size", type=int, help="image classifiers: input size in px (224 if not given)"
    )
    parser.add_argument(
        "--labels",
        type=Path,
        help="image classifiers of other classes than ImageNet's: their labels, one a line (line index = "
        "class id), as many as the weights' classes; the model gets its own NAME_postprocess with them",
    )
    _add_module_options(parser)
    parser.add_argument(
        "--tests", type=Path, default=TESTS, help="python_model: the folder its test is written to"
    )
    parser.add_argument(
        "--configs-only",
        action="store_true",
        help="for model_descriptions/NAME.yaml written by hand: write the configs it generates and the "
        "folders and links they need, and nothing else",
    )
    add_folder_options(parser, models_help="the folder of model descriptions")
    return parser


# The options of a torch_module or a python_model: its tensors (repeatable, one a tensor), then a
# torch_module's code and the models around it; (option, metavar, help) each.
TENSOR_OPTIONS = (
    (
        "--input",
        "NAME:DTYPE:DIMS",
        "torch_module, python_model: one input tensor, in forward's order, repeatable (DIMS "
        "comma-separated, without the batch axis, -1 for an axis that varies; python_model: INPUT:FP32:4 "
        "if not given)",
    ),
    (
        "--output",
        "NAME:DTYPE:DIMS[:METRIC]",
        "torch_module, python_model: one output tensor, in forward's order, repeatable; a "
        "torch_module's is compared with eager PyTorch by METRIC (max_abs_diff if not given, cosine or "
        "top1_agreement; python_model: OUTPUT:FP32:4 if not given)",
    ),
)
MODULE_OPTIONS = (
    ("--model", "FILE.py:FN", "torch_module: your function returning the module, eval mode"),
    (
        "--check-inputs",
        "FILE.py:FN",
        "torch_module: your function returning real inputs to check it on, {input name: rows}",
    ),
    (
        "--preprocess",
        "MODEL",
        "torch_module: the repository model that prepares its inputs (image_preprocess: a copy of "
        "its own at the module's input size); the ensemble NAME_ensemble chains the two",
    ),
    (
        "--postprocess",
        "MODEL",
        "torch_module: the repository model that takes its outputs, last in NAME_ensemble "
        "(image_postprocess: ImageNet's top-5 labels of 1000 logits)",
    ),
)


def _add_module_options(parser: argparse.ArgumentParser) -> None:
    """The tensors of a torch_module or a python_model, and a torch_module's code and preprocessing."""
    for option, metavar, text in TENSOR_OPTIONS:
        parser.add_argument(option, action="append", metavar=metavar, help=text)
    for option, metavar, text in MODULE_OPTIONS:
        parser.add_argument(option, metavar=metavar, help=text)


def _kind_argument(text: str) -> str:
    if text in RENAMED_KINDS:
        raise argparse.ArgumentTypeError(
            renamed_kind(text, f"run python -m export.scaffold {RENAMED_KINDS[text]} ...")
        )
    return text


def _name_argument(text: str) -> str:
    try:
        return check_name(text)
    except (DescriptionError, ExportError) as e:
        raise argparse.ArgumentTypeError(str(e)) from None


MODULE_ONLY = tuple(option.removeprefix("--").replace("-", "_") for option, _, _ in MODULE_OPTIONS)
TEMPLATE_ONLY = ("image_size", "labels")


def usage_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with the options given for ``args.kind``, or None."""
    given = {key for key, value in vars(args).items() if value not in (None, False)}
    weights = given & {"weights_path", "weights_package", "loader"}
    if args.configs_only:
        extra = given & {*weights, *MODULE_ONLY, *TEMPLATE_ONLY, "input", "output"}
        return f"--configs-only reads the description; leave out {sorted(extra)}" if extra else None
    if args.kind == PYTHON_KIND:
        extra = given & {*weights, *MODULE_ONLY, *TEMPLATE_ONLY}
        return (
            f"a python_model has no weights or module: its code is model.py; leave out {sorted(extra)}"
            if extra
            else None
        )
    if args.kind == MODULE_KIND:
        if given & set(TEMPLATE_ONLY):
            return f"--image-size and --labels are an {IMAGE_KIND}'s; a torch_module states its tensors"
        missing = [
            f"--{key.replace('_', '-')}"
            for key in ("model", "check_inputs", "input", "output")
            if key not in given
        ]
        if missing:
            return (
                f"a torch_module needs {', '.join(missing)} (--configs-only: a description written by hand)"
            )
    elif given & {*MODULE_ONLY, "input", "output"}:
        return (
            "--input, --output, --model, --check-inputs, --preprocess, --postprocess: torch_module and "
            "python_model only"
        )
    return _weights_problem(args, weights)


def _weights_problem(args: argparse.Namespace, given: set[str]) -> str | None:
    path, package = vars(args).get("weights_path"), vars(args).get("weights_package")
    if path is None and package is None:
        return f"{args.kind} needs --weights-path or --weights-package with --loader"
    if package is not None and ":" not in (args.loader or ""):
        return f"--weights-package {package} needs --loader module:function (got {args.loader!r})"
    if path is not None and args.loader:
        return "--loader goes with --weights-package; a --weights-path needs none"
    if path is not None and not path.exists():
        return f"--weights-path {path} does not exist; give the weights' file or folder"
    if args.labels is not None and (args.kind != IMAGE_KIND or not args.labels.is_file()):
        return f"--labels {args.labels}: give an {IMAGE_KIND}'s labels file, one label a line"
    return None


def tensors_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with the tensors and the code a torch_module or python_model names, or None."""
    try:
        for text in args.input or ():
            parse_tensor(text)
        for text in args.output or ():
            parse_output(text) if args.kind == MODULE_KIND else parse_tensor(text)
        for text in (args.model, args.check_inputs):
            if text is not None:
                callable_entry(text, args.models)
    except (DescriptionError, ExportError) as e:
        return str(e)
    return None


def weights_entry(args: argparse.Namespace) -> dict[str, str]:
    """The description's weights entry for the weights options."""
    path = vars(args).get("weights_path")
    if path is not None:
        return local_weights(path, args.models)
    return {"package": vars(args)["weights_package"], "loader": args.loader}


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    problem = usage_problem(args) or tensors_problem(args)
    if problem:
        parser.error(problem)
    try:
        if args.configs_only:
            return configs_only_main(args)
        if args.kind == PYTHON_KIND:
            return python_main(args)
        if args.kind == MODULE_KIND:
            return module_main(args, weights_entry(args))
        written = scaffold(
            Request(
                kind=args.kind,
                name=args.name,
                weights=weights_entry(args),
                image_size_px=args.image_size or 224,
                labels=args.labels,
                repository=args.repository,
                models_dir=args.models,
            )
        )
    except (DescriptionError, ExportError) as e:
        print(f"scaffold failed: {e}", file=sys.stderr)
        return EXIT_FAILED
    print_written(written)
    print(f"next: python -m export --only {args.name} --precision fp32")
    return EXIT_OK
