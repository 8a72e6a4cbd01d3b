"""Where the deployable repository is and where the local one derived from it goes.

``model_repository/`` is what NVIDIA's container serves; ``build/local_repository/`` is derived from it
for the pip wheel's tritonserver (:mod:`tritonlocal.derive`). Both paths are relative to the project root.
"""

from __future__ import annotations

from pathlib import Path

from tritonlocal.derive import DeriveResult, derive_repository, gpu_is_available

DEPLOYABLE = Path("model_repository")
LOCAL = Path("build", "local_repository")


def derive_local(intra_op_threads: int | None = None) -> DeriveResult:
    """Write :data:`LOCAL` from :data:`DEPLOYABLE` for this machine (its GPU, when it has one)."""
    return derive_repository(
        DEPLOYABLE, LOCAL, gpu_available=gpu_is_available(), intra_op_threads=intra_op_threads
    )
