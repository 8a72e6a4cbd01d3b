"""The TF32 mode export/precision/cuda_runtime.py gives libtorch's variants is torch's own default, read in a
fresh process, where nothing has set them."""

from __future__ import annotations

from export.precision.cuda_runtime import LIBTORCH


def test_libtorchs_mode_is_torchs_own_default(run_python) -> None:
    """The libtorch backend sets neither switch, so it runs with torch's defaults: checked in a fresh
    process of this torch (the 24.10 container's libtorch 2.5 has the same defaults)."""
    probe = "import torch; print(torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)"
    assert run_python("-c", probe).stdout.split() == [str(LIBTORCH.matmul), str(LIBTORCH.cudnn)]
