"""The export image's command as docker-compose.cpu.yml runs it, for the tabular model, in an environment
built from exactly what deploy/export/Dockerfile installs (the CPU build), in a folder holding what the
image copies, with the image's PATH (no git): its exit status, and the files a server loads."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from tritonlocal.image_envs import export_workspace, image_env
from tritonrepo.paths import ROOT

# A cold build of the image's environment downloads and installs what the image installs: minutes, past the
# suite's 600 s per test on a busy machine (docs/measurements.md, "The image environments' cold builds").
pytestmark = pytest.mark.timeout(3600)

MODEL = "diabetes_classifier"


class _ComposeLoader(yaml.SafeLoader):
    """Compose's !reset tag (the CPU override) read as its plain value."""


_ComposeLoader.add_constructor("!reset", lambda loader, node: loader.construct_sequence(node))


def test_the_cpu_export_command_exports_the_tabular_model(tmp_path: Path) -> None:
    export = image_env("export")
    workspace = export_workspace(tmp_path / "workspace")
    assert not (workspace / "loadtest").exists() and not (workspace / ".git").exists(), "only what it copies"
    override = yaml.load((ROOT / "docker-compose.cpu.yml").read_text(), Loader=_ComposeLoader)
    command = override["services"]["export"]["command"]
    assert command[:3] == ["python", "-m", "export"]
    done = subprocess.run(
        [*command, "--only", MODEL],
        cwd=workspace, env=export.environment(), capture_output=True, text=True, timeout=1200, check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    for model, file in ((f"{MODEL}_onnx", "model.onnx"), (f"{MODEL}_torchscript", "model.pt")):
        version = workspace / "model_repository" / model / "1"
        assert (version / file).is_file(), f"{model}: no {file}\n{done.stderr[-3000:]}"
        record = json.loads((version / ".export.json").read_text())
        assert record, f"{model}: an empty export record"
