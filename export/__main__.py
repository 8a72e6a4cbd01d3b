"""Command line: ``python -m export [--only NAME] [--precision auto|fp32|tf32|bf16|fp16|int8] [--force]
[--quiet] [--served-on here|gpu|cpu] [--timing-batches N,N,...] [--repository PATH] [--models PATH]
[--records PATH] [--configs-only]``.

Every model description under ``--models`` (model_descriptions/*.yaml) goes through the one pipeline
(export/pipeline.py); ``--only`` takes a description's name, or ``image`` / ``text`` for every image
classifier / sentence encoder.

``--precision auto`` (the default) builds every precision variant this machine can run, gates each on real
inputs against eager fp32, times the ones that pass and serves the fastest; ``--precision fp32`` pins
float32. The choice and every gate's numbers are printed and recorded under build/precision/.

A variant that fails (an exception while building, gating or timing it, or its gate) is recorded and
left out. Every model is tried; a served file that ends with no variant passing (or whose model cannot be
loaded) is named with why, after all the others are exported. The command exits 1 when such a file is
required: every file, or, with ``TRITON_REQUIRED_MODELS`` set (what a deployment's server requires,
comma-separated pipelines), the files those pipelines call (export/required.py); the other files are
listed as not servable and the command exits 0, so the deployment starts with what it needs.

``--configs-only`` writes every config.pbtxt the selected descriptions generate
(description/generated_configs.py) and stops, without loading any model.

Progress (export/progress.py): models and variants as N of M, what runs now, the time elapsed and left,
as a bar on a terminal and as one plain line per step elsewhere, on standard error; ``--quiet`` prints only
the results (on standard output).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from pathlib import Path

from tqdm.contrib.logging import logging_redirect_tqdm

from description.errors import DescriptionError
from description.generated_configs import generate, write_configs
from description.model import IMAGE_KIND, ModelDescription, load_descriptions
from export.common import ExportError, add_folder_options
from export.pipeline import ExportResult, Options, export_models
from export.precision.selection import CHOICES, Capabilities
from export.progress import ExportProgress
from export.required import REQUIRED_VARIABLE, required_models
from tritonrepo.commands import EXIT_FAILED, EXIT_OK, EXIT_USAGE, command_parser
from tritonrepo.errors import RepositoryError
from tritonrepo.paths import PRECISION_RECORDS
from tritonrepo.progress import Progress

KIND_SHORTHANDS = {"image": IMAGE_KIND, "text": "sentence_encoder"}


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    # The export's own progress at INFO; libraries only from WARNING (onnxruntime's quantizer logs a line
    # per rescaled bias at INFO on the root logger: hundreds for one model).
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("export").setLevel(logging.WARNING if args.quiet else logging.INFO)
    try:
        capabilities = Capabilities.detect(served_on=args.served_on)
        required = required_models(args.repository, os.environ)
    except (ExportError, RepositoryError) as e:  # --served-on gpu without a GPU, a required model missing
        print(f"export refused: {e}", file=sys.stderr)
        return EXIT_USAGE
    print(f"precision {args.precision}; this machine: {capabilities.as_dict()}")
    options = Options(
        repository=args.repository,
        force=args.force,
        precision=args.precision,
        capabilities=capabilities,
        record_dir=args.records,
        timing_batches=tuple(args.timing_batches or ()),
        progress=ExportProgress(Progress(quiet=args.quiet)),
    )
    try:
        described = load_descriptions(args.models)
    except (DescriptionError, RepositoryError) as e:  # a malformed description
        print(f"export failed: {e}", file=sys.stderr)
        return EXIT_FAILED
    try:
        descriptions = _selected(described, args.only)
    except ExportError as e:  # --only naming no description: a usage error
        print(f"python -m export: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    if args.configs_only:
        for description in descriptions:
            written = write_configs(description, args.repository, generate(description, args.repository))
            print(f"{description.name}: {', '.join(map(str, written)) or 'configs up to date'}")
        return EXIT_OK
    with contextlib.closing(options.progress), logging_redirect_tqdm(loggers=[logging.getLogger()]):
        failed = export_models(descriptions, options)
    return _exit_status(failed, required)


def _exit_status(failed: list[ExportResult], required: set[str] | None) -> int:
    """0 when every required file has a servable file (``required`` None: every file); otherwise 1.
    Each file without one is named with why, the optional ones as such."""
    needed = [result for result in failed if required is None or result.model in required]
    optional = [result for result in failed if required is not None and result.model not in required]
    if optional:
        print(
            f"not servable, and not required by {REQUIRED_VARIABLE} ({len(optional)} file(s); the server "
            "starts without them):",
            file=sys.stderr,
        )
        for result in optional:
            print(f"  {result.model}: {result.failure}", file=sys.stderr)
    if not needed:
        return EXIT_OK
    print(f"export failed: {len(needed)} file(s) have no servable file:", file=sys.stderr)
    for result in needed:
        print(f"  {result.model}: {result.failure}", file=sys.stderr)
    return EXIT_FAILED


def _selected(descriptions: list[ModelDescription], only: str | None) -> list[ModelDescription]:
    if only is None:
        return descriptions
    chosen = [d for d in descriptions if only in (d.name, d.kind) or KIND_SHORTHANDS.get(only) == d.kind]
    if not chosen:
        names = [d.name for d in descriptions]
        raise ExportError(f"--only {only!r} matches no description; give one of {names}, image or text")
    return chosen


def _batch_sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(part) for part in text.split(","))
    except ValueError:
        sizes = ()
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of positive batch sizes")
    return sizes


def _parser() -> argparse.ArgumentParser:
    parser = command_parser(
        "python -m export",
        __doc__,
        exit_codes="0 every required file exported or up to date (every file, unless TRITON_REQUIRED_MODELS "
        "names the pipelines a deployment requires), 1 a required file has no servable file (each named, "
        "after every other model) or a description is malformed, 2 a usage error, --served-on gpu without "
        "a GPU, or TRITON_REQUIRED_MODELS naming a model the repository does not hold",
    )
    parser.add_argument(
        "--only", metavar="NAME", help="one description's name, or image / text for a kind (default: all)"
    )
    parser.add_argument("--force", action="store_true", help="re-export even when the files are up to date")
    parser.add_argument(
        "--quiet",
        action="store_true",
        help="no progress and no per-variant log, only each model's results and any failure (CI logs); "
        "without it, a progress bar on a terminal and a plain line per step elsewhere",
    )
    parser.add_argument(
        "--precision",
        choices=CHOICES,
        default="auto",
        help="auto: serve the fastest variant that passes its accuracy gate; or pin one (fp32 pins float32)",
    )
    parser.add_argument(
        "--served-on",
        choices=("here", "gpu", "cpu"),
        default="here",
        help="where the models will be served: here (a GPU if this machine has one), gpu (this machine "
        "must have a GPU of the serving class: fp16/bf16 are gated on it, int8 and CPU-gated files are "
        "never offered) or cpu (CPU variants, also on a machine with a GPU)",
    )
    add_folder_options(parser, models_help="the folder of model descriptions, *.yaml")
    parser.add_argument(
        "--records",
        type=Path,
        default=PRECISION_RECORDS,
        help="where each variant's gate and timing record is written",
    )
    parser.add_argument(
        "--timing-batches",
        type=_batch_sizes,
        metavar="N,N,...",
        help="time every variant at these batch sizes (its batch-cost curve, in the records) instead of "
        "the default curve: the powers of two from 1 up to the config's max_batch_size or 32; the served "
        "variant is the fastest by the geometric mean over the sizes timed",
    )
    parser.add_argument(
        "--configs-only",
        action="store_true",
        help="write every config.pbtxt the descriptions generate and stop (no model is loaded)",
    )
    return parser


if __name__ == "__main__":
    sys.exit(main())
