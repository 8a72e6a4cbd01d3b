"""Derive this machine's local repository from the deployable one.

:data:`~tritonrepo.paths.REPOSITORY` is what NVIDIA's container serves;
:data:`~tritonrepo.paths.LOCAL_REPOSITORY` is derived from it for the pip wheel's tritonserver
(:mod:`tritonrepo.derive`).
"""

from __future__ import annotations

from tritonrepo.derive import DeriveResult, derive_repository, gpu_is_available
from tritonrepo.paths import LOCAL_REPOSITORY, REPOSITORY


def derive_local(intra_op_threads: int | None = None) -> DeriveResult:
    """Write the local repository from the deployable one for this machine (its GPU, when it has one)."""
    return derive_repository(
        REPOSITORY, LOCAL_REPOSITORY, gpu_available=gpu_is_available(), intra_op_threads=intra_op_threads
    )
