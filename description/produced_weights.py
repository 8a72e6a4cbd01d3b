"""Weights that a committed script produces at export time: ``weights: {path: ..., produced_by: ...}``.

Weights are never committed. A model trained quickly and deterministically (a fixed seed, one thread)
names its training script instead of a file's sha256: the export runs ``python SCRIPT WEIGHTS`` when the
weights are missing or were produced by other code, and records beside them (``<weights>.produced.json``)
what produced them: the sha256 of the script and of every Python file beside it, the Python, torch and
numpy versions, and the sha256 of the weights written. So:

- changed training code re-trains, and the exported files (whose fingerprint holds the weights' bytes,
  export/pipeline.py) are re-exported only when the new weights differ;
- weights changed after they were produced (a file copied over them) are refused, never served;
- every exported file's manifest names the weights' sha256, so a served file traces to exact bytes.

A pinned sha256 (``path`` + ``sha256``) would fail on a machine whose arithmetic rounds differently
(another CPU's vector kernels): the same code and data are what is pinned here, not the bytes.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

from description.errors import DescriptionError
from tritonrepo.atomic_files import sha256_file, write_text_atomically

logger = logging.getLogger(__name__)

RECORD_SUFFIX = ".produced.json"
PRODUCE_TIMEOUT_S = 1800
_TAIL_CHARS = 2000


def record_path(weights: Path) -> Path:
    return weights.with_name(weights.name + RECORD_SUFFIX)


def production_inputs(script: Path) -> dict[str, str]:
    """What the weights depend on: the script, the Python files beside it, the library versions."""
    if not script.is_file():
        raise DescriptionError(f"weights: produced_by {script} does not exist; name the training script")
    files = {f"code:{path.name}": sha256_file(path) for path in sorted(script.parent.glob("*.py"))}
    return {
        **files,
        "script": script.name,
        "python": platform.python_version(),
        "torch": metadata.version("torch"),
        "numpy": metadata.version("numpy"),
    }


def produced(weights: Path, script: Path) -> Path:
    """``weights``, produced by ``script`` unless its record says this very code produced these bytes."""
    weights, script = weights.resolve(), script.resolve()
    inputs = production_inputs(script)
    record = _read_record(weights)
    if weights.is_file() and record.get("inputs") == inputs:
        actual = sha256_file(weights)
        if actual != record.get("weights_sha256"):
            raise DescriptionError(
                f"weights: {weights} has sha256 {actual}, but {script.name} produced "
                f"{record.get('weights_sha256')}: the file changed after it was produced; delete it and "
                f"{record_path(weights).name} to produce it again"
            )
        return weights
    _run(script, weights)
    record = {"inputs": inputs, "weights_sha256": sha256_file(weights), "produced_by": str(script)}
    write_text_atomically(record_path(weights), json.dumps(record, indent=2, sort_keys=True) + "\n")
    return weights


def _read_record(weights: Path) -> dict:
    try:
        return dict(json.loads(record_path(weights).read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return {}


def _run(script: Path, weights: Path) -> None:
    """``python script TEMPORARY`` in the script's folder, then the result moved onto ``weights``."""
    weights.parent.mkdir(parents=True, exist_ok=True)
    handle, name = tempfile.mkstemp(prefix=f".{weights.name}.", suffix=weights.suffix, dir=weights.parent)
    os.close(handle)
    temporary = Path(name)
    logger.info("producing %s: python %s", weights, script)
    try:
        done = subprocess.run(
            [sys.executable, str(script), str(temporary)],
            cwd=script.parent,
            capture_output=True,
            text=True,
            timeout=PRODUCE_TIMEOUT_S,
            check=False,
        )
        if done.returncode != 0 or temporary.stat().st_size == 0:
            tail = (done.stderr or done.stdout)[-_TAIL_CHARS:]
            raise DescriptionError(
                f"weights: `python {script} WEIGHTS` exited {done.returncode} without writing WEIGHTS: "
                f"{tail.strip() or '(no output)'}; fix the script, then export again"
            )
        logger.info("%s: %s", script.name, done.stdout.strip()[-_TAIL_CHARS:])
        os.chmod(temporary, 0o644)
        os.replace(temporary, weights)
    except subprocess.TimeoutExpired as e:
        raise DescriptionError(
            f"weights: {script} ran past {PRODUCE_TIMEOUT_S} s; make the training shorter"
        ) from e
    finally:
        temporary.unlink(missing_ok=True)
