"""``python -m tritonrepo check`` runs in compose's repository-check service, whose image has no torch:
checking ONNX models imports none, seen in a fresh process."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tritonrepo.configs import load_repository
from tritonrepo.paths import REPOSITORY


def test_checking_onnx_models_imports_no_torch(tmp_path: Path, run_python: Callable[..., object]) -> None:
    onnx = [
        name
        for name, entry in load_repository(REPOSITORY).items()
        if entry.config.platform == "onnxruntime_onnx"
    ]
    assert onnx
    for name in onnx:
        (tmp_path / name).symlink_to(REPOSITORY / name, target_is_directory=True)
    probe = (
        "import sys; from tritonrepo.contract import check_repository; "
        f"report = check_repository({str(tmp_path)!r}); "
        f"assert len(report.models) == {len(onnx)}, report.models; "
        "assert 'torch' not in sys.modules, 'torch was imported'"
    )
    run_python("-c", probe)
