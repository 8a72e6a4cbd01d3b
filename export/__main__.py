"""Command line: ``python -m export [--only image|text] [--precision auto|fp32|bf16|fp16|int8] [--force]
[--repository PATH]``.

``--precision auto`` (the default) builds every precision variant this machine can run, gates each on real
inputs against eager fp32, times the ones that pass and serves the fastest; ``--precision fp32`` pins
float32. The choice and every gate's numbers are printed and recorded under build/precision/.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import logging
import sys
import time
from pathlib import Path

from export.common import ExportError
from export.precision import CHOICES, Capabilities
from tritonlocal.errors import RepositoryError

PIPELINES = ("image", "text")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    # The export's own progress at INFO; libraries only from WARNING (onnxruntime's quantizer logs a line
    # per rescaled bias at INFO on the root logger: hundreds for one model).
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("export").setLevel(logging.INFO)
    try:
        capabilities = Capabilities.detect(served_on=args.served_on)
    except ExportError as e:  # --served-on gpu where there is no GPU
        print(f"export refused: {e}", file=sys.stderr)
        return 2
    print(f"precision {args.precision}; this machine: {capabilities.as_dict()}")
    for pipeline in (args.only,) if args.only else PIPELINES:
        module_name = f"export.{pipeline}"
        if importlib.util.find_spec(module_name) is None:
            print(f"{pipeline}: skipped ({module_name} does not exist yet)")
            continue
        started = time.perf_counter()
        try:
            results = importlib.import_module(module_name).export_all(
                repository=args.repository,
                force=args.force,
                precision=args.precision,
                capabilities=capabilities,
            )
        except (ExportError, RepositoryError) as e:  # a bad config or a missing file in the repository
            print(f"{pipeline}: export failed: {e}", file=sys.stderr)
            return 1
        print(f"{pipeline}: done in {time.perf_counter() - started:.1f} s")
        for result in results:
            print(f"  {result}")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m export", description=__doc__)
    parser.add_argument("--only", choices=PIPELINES, help="export one pipeline only (default: all)")
    parser.add_argument("--force", action="store_true", help="re-export even when the files are up to date")
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
    parser.add_argument(
        "--repository",
        type=Path,
        default=Path("model_repository"),
        help="the model repository to write into (default: model_repository)",
    )
    return parser


if __name__ == "__main__":
    sys.exit(main())
