"""A model that fails to load beside good ones, and the per-model probe of the deployments.

The deployments run tritonserver with ``--exit-on-error=false`` (docker-compose.yml, deploy/k8s): a real
server here, with the image pipeline and a model whose ``initialize`` fails the way a missing tokenizer
file does, keeps serving the pipeline and names the broken model; deploy/tritonserver/model_probe.py
(the readiness and liveness probe) stays green for the pipeline, names the model that did not load, and
turns red when a Python-backend stub dies, which Triton's own health endpoints do not notice.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import skimage

from clients import TritonClient
from tritonlocal import LocalTritonServer, ServerConfig
from tritonlocal.health import live_stubs
from tritonrepo.configs import format_config, load_model_config
from tritonrepo.derive import derive_repository

ROOT = Path(__file__).resolve().parents[2]
PROBE = ROOT / "deploy" / "tritonserver" / "model_probe.py"
IMAGE_PIPELINE = ("image_classifier", "image_preprocess", "efficientnet_lite0_onnx", "image_postprocess")
BROKEN_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        raise pb_utils.TritonModelException("tokenizer.json is missing beside model.py")

    def execute(self, requests):
        return []
"""


@pytest.fixture(scope="module")
def partial_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalTritonServer]:
    repository = tmp_path_factory.mktemp("partial") / "repository"
    derive_repository(ROOT / "model_repository", repository, gpu_available=False)
    broken_config = load_model_config(repository / "text_tokenizer")  # the tokenizer, without its files
    broken_config.name = "broken_tokenizer"
    for folder in repository.iterdir():
        if folder.name not in IMAGE_PIPELINE:
            shutil.rmtree(folder)
    broken = repository / "broken_tokenizer"
    (broken / "1").mkdir(parents=True)
    (broken / "config.pbtxt").write_text(format_config(broken_config))
    (broken / "1" / "model.py").write_text(BROKEN_MODEL)
    config = ServerConfig(
        model_repository=repository,
        exit_on_error=False,
        generate_admin_key=True,
        exit_timeout_s=2,
        stop_timeout_s=10,
    )
    with LocalTritonServer(config) as server:
        yield server


def _probe(server: LocalTritonServer, *required: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TRITON_ADMIN_KEY": server.admin_key or ""}
    command = [
        sys.executable,
        str(PROBE),
        "--url",
        f"http://{server.http_url}",
        "--server-pid",
        str(server.pid),
    ]
    if required:
        command += ["--require", ",".join(required)]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=30, check=False)  # noqa: S603


def test_the_good_pipeline_serves_while_the_broken_model_is_named(partial_server: LocalTritonServer) -> None:
    assert list(partial_server.failed_models) == ["broken_tokenizer"]
    assert "tokenizer.json is missing" in partial_server.failed_models["broken_tokenizer"]
    with TritonClient(f"http://{partial_server.http_url}") as client:
        (result,) = client.classify([Path(skimage.__file__).parent / "data" / "coffee.png"])
    assert result.labels[0].startswith("espresso")


def test_the_probe_is_green_for_the_pipeline_and_names_the_model_that_did_not_load(
    partial_server: LocalTritonServer,
) -> None:
    result = _probe(partial_server, "image_classifier")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "not loaded: broken_tokenizer (UNAVAILABLE)" in result.stdout
    assert "tokenizer.json is missing" in result.stdout


def test_the_probe_is_red_when_a_required_model_did_not_load(partial_server: LocalTritonServer) -> None:
    result = _probe(partial_server, "image_classifier", "broken_tokenizer")
    assert result.returncode == 1
    assert "UNHEALTHY: required model broken_tokenizer is not ready" in result.stdout


def test_a_dead_stub_turns_the_probe_red_while_tritons_health_stays_green(
    partial_server: LocalTritonServer,
) -> None:
    assert partial_server.pid is not None
    stubs = live_stubs(partial_server.pid)
    os.kill(stubs["image_postprocess_0_0"], signal.SIGKILL)
    deadline = time.monotonic() + 10
    while "image_postprocess_0_0" in live_stubs(partial_server.pid):
        assert time.monotonic() < deadline, "the killed stub is still listed"
        time.sleep(0.05)
    assert partial_server.is_ready(), "Triton's own readiness does not notice a dead stub"
    result = _probe(partial_server, "image_classifier")
    assert result.returncode == 1
    assert (
        "UNHEALTHY: image_postprocess: stub process dead for instance(s) image_postprocess_0_0"
        in result.stdout
    )
