"""The server's start-up step as the container runs it: tritonrepo/host_instances.py alone (isolated Python,
stdlib only, from another folder) rewrites the preprocessing's count in a copy of the repository and
becomes the command after it, pointed at the copy."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tritonrepo.host_instances import usable_cores
from tritonrepo.paths import REPOSITORY, ROOT

SERVER = """
import pathlib, re, sys
(flag,) = [a for a in sys.argv[1:] if a.startswith("--model-repository=")]
text = (pathlib.Path(flag.split("=", 1)[1]) / "image_preprocess" / "config.pbtxt").read_text()
print("count", re.search(r"count: (\\d+)", text).group(1), "args", sys.argv[1:])
"""


def test_the_step_runs_alone_and_execs_the_server_on_the_scaled_copy(tmp_path: Path) -> None:
    models = tmp_path / "models"
    for model in ("image_preprocess", "image_postprocess"):
        shutil.copytree(REPOSITORY / model, models / model, symlinks=True)
    script = shutil.copy(ROOT / "tritonrepo" / "host_instances.py", tmp_path / "host_instances.py")
    done = subprocess.run(
        [sys.executable, "-I", script, sys.executable, "-c", SERVER, f"--model-repository={models}", "--x=1"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    assert done.returncode == 0, done.stderr
    expected = max(2, usable_cores() - 2)
    assert done.stdout.startswith(f"count {expected} args"), done.stdout
    assert str(models) not in done.stdout and "--x=1" in done.stdout  # pointed at the copy, the rest kept
    assert f"host_instances: image_preprocess: {expected} instances on {usable_cores()} cores" in done.stderr
