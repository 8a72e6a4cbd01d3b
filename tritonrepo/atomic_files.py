"""Files written whole, so that a reader sees the old file or the new one and never half of one, and
the digest that says whether a file is the one recorded."""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def write_atomically(destination: Path, write: Callable[[Path], None]) -> None:
    """Call ``write(temporary_path)`` and move the result onto ``destination`` in one rename.

    The temporary file lives in the destination's folder (same file system), so readers see either the
    old file or the complete new one, never a half-written file. On any failure the temporary is removed.
    """
    destination = Path(destination)
    destination.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(
        prefix=f".{destination.name}.", suffix=".tmp", dir=destination.parent
    )
    os.close(handle)
    try:
        write(Path(temporary))
        os.chmod(temporary, 0o644)  # mkstemp makes 0600; the server (maybe another user) must read it
        os.replace(temporary, destination)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def write_text_atomically(destination: Path, text: str) -> None:
    def write(path: Path) -> None:
        path.write_text(text, encoding="utf-8")

    write_atomically(destination, write)
