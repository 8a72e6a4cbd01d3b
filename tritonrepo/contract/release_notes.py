"""Behaviour changes of Triton releases that a repository served by them must know of, each from the
server's own sources, and the release the deployment pins (deploy/versions.env ``TRITON_TAG``).

A change is listed only with the release that first carries it and the change that made it, read in the
triton-inference-server/server repository; a note is given when the release checked for is that one or
later.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from tritonrepo.contract.finding import REPOSITORY_WIDE, Finding
from tritonrepo.paths import DEPLOY

VERSIONS_FILE = DEPLOY / "versions.env"
_RELEASE = re.compile(r"(?:.*:)?(\d\d)\.(\d\d)(?:-.*)?")


@dataclass(frozen=True, kw_only=True)
class Change:
    release: str  # the first NGC container release (YY.MM) that carries it
    server: str  # that container's tritonserver version
    what: str
    fix: str
    source: str


CHANGES = (
    Change(
        release="26.04",
        server="2.68.0",
        what="clients may register and use shared memory (system and CUDA IPC) only when tritonserver "
        "runs with --allow-client-shm=true, which is off by default; until then requests that use "
        "shared-memory regions are refused",
        fix="add --allow-client-shm=true to the server's command where clients send tensors through "
        "shared memory (the clients' shared-memory mode), or send the tensors in the request body",
        source="server #8721, in 2.68.0 through #8739; docs/protocol/extension_shared_memory.md",
    ),
)


def release(tag: str) -> tuple[int, int]:
    """(year, month) of a container tag: 24.10, 24.10-py3 or nvcr.io/nvidia/tritonserver:24.10-py3."""
    match = _RELEASE.fullmatch(tag.strip())
    if match is None:
        raise ValueError(f"Triton release {tag!r} is not a container tag such as 24.10 or 24.10-py3")
    return int(match[1]), int(match[2])


def pinned_tag(versions_file: Path = VERSIONS_FILE) -> str | None:
    """The deployment's TRITON_TAG, or None where there is no versions file (another project's repo)."""
    if not versions_file.is_file():
        return None
    for line in versions_file.read_text(encoding="utf-8").splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "TRITON_TAG":
            return value.strip()
    return None


def notes(tag: str | None) -> list[Finding]:
    """A note for each change in release ``tag`` or before it (none without a tag)."""
    if tag is None:
        return []
    serving = release(tag)
    return [
        Finding(
            severity="note",
            model=REPOSITORY_WIDE,
            code="release-note",
            problem=f"Triton {tag} is {change.release} (tritonserver {change.server}) or later: "
            f"{change.what} ({change.source})",
            fix=change.fix,
        )
        for change in CHANGES
        if serving >= release(change.release)
    ]
