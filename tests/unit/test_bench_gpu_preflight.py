"""The GPU benchmark's preflight: it refuses an environment without the CUDA builds of torch and
onnxruntime, names what is missing and gives the one command that runs the benchmark where they are."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from loadtest.bench.gpu import preflight
from loadtest.bench.gpu.preflight import CUDA_PROVIDER, INSTEAD, Runtimes

ROOT = Path(__file__).resolve().parents[2]
READY = Runtimes(
    torch_version="2.5.1+cu124",
    torch_cuda="12.4",
    cuda_devices=1,
    onnxruntime_version="1.19.2",
    onnxruntime_providers=("TensorrtExecutionProvider", CUDA_PROVIDER, "CPUExecutionProvider"),
    onnxruntime_runs_on_cuda=True,
)
CPU_BUILDS = Runtimes(
    torch_version="2.13.0+cpu",
    torch_cuda=None,
    cuda_devices=0,
    onnxruntime_version="1.31.1",
    onnxruntime_providers=("CPUExecutionProvider",),
    onnxruntime_runs_on_cuda=False,
)


def _run(runtimes: Runtimes, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = preflight.main([], runtimes=lambda: runtimes)
    out, err = capsys.readouterr()
    return code, out, err


def test_the_cuda_builds_on_a_visible_gpu_are_ready(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(READY, capsys)
    assert (code, err) == (preflight.EXIT_READY, "")
    assert "torch 2.5.1+cu124 (CUDA 12.4, 1 device(s)), onnxruntime 1.19.2" in out and "ready" in out


def test_cpu_builds_are_refused_with_both_reasons_and_the_command_to_run_instead(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = _run(CPU_BUILDS, capsys)
    assert (code, out) == (preflight.EXIT_NOT_READY, "")
    assert "torch 2.13.0+cpu is a CPU build" in err
    assert f"onnxruntime 1.31.1 has no {CUDA_PROVIDER} (it has CPUExecutionProvider)" in err
    assert "onnxruntime-gpu" in err and err.rstrip().endswith(INSTEAD)
    assert "container got no GPU" not in err


def test_a_cuda_torch_that_sees_no_device_says_the_container_may_lack_the_gpu(
    capsys: pytest.CaptureFixture[str],
) -> None:
    no_device = Runtimes(**{**READY.__dict__, "cuda_devices": 0, "onnxruntime_runs_on_cuda": False})
    code, _, err = _run(no_device, capsys)
    assert code == preflight.EXIT_NOT_READY
    assert "torch 2.5.1+cu124 (CUDA 12.4) sees no CUDA device" in err
    assert INSTEAD in err and "container got no GPU" in err and "docs/deploy.md, step 1" in err
    assert "onnxruntime" not in err.split("Run it")[0], "the provider is listed; no device is the one problem"


def test_an_onnxruntime_that_falls_back_to_the_cpu_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    fell_back = Runtimes(**{**READY.__dict__, "onnxruntime_runs_on_cuda": False})
    code, _, err = _run(fell_back, capsys)
    assert code == preflight.EXIT_NOT_READY
    assert f"lists {CUDA_PROVIDER}, but a session asked for it ran on the CPU" in err
    assert "torch" not in err.split("Run it")[0], "torch is fine here"


def test_this_machines_runtimes_are_probed_for_real_and_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """These machines have the CPU builds (torch +cpu, onnxruntime without CUDA) and no GPU."""
    runtimes = preflight.probe()
    assert runtimes.cuda_devices == 0 and not runtimes.onnxruntime_runs_on_cuda
    assert preflight.main([]) == preflight.EXIT_NOT_READY
    assert INSTEAD in capsys.readouterr().err
    # The session check builds and runs its graph here too; without CUDA it lands on the CPU, as
    # onnxruntime-gpu's session does when it cannot load the CUDA libraries.
    with pytest.warns(UserWarning, match=f"Specified provider '{CUDA_PROVIDER}' is not in available"):
        assert preflight._session_on_cuda() is False


def test_arguments_are_refused_with_the_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert preflight.main(["--gpu"], runtimes=lambda: READY) == 2
    assert "no arguments; got ['--gpu']" in capsys.readouterr().err


def test_the_command_to_run_instead_is_the_compose_service_on_the_export_images_bench_target() -> None:
    words = INSTEAD.split()
    env_files = [words[i + 1] for i, word in enumerate(words) if word == "--env-file"]
    assert env_files == ["deploy/versions.env", "deploy/secrets.env"]
    assert (ROOT / env_files[0]).is_file()
    ignored = (ROOT / "deploy" / ".gitignore").read_text().splitlines()
    assert Path(env_files[1]).name in ignored, "the secrets file must never be committed"
    assert words[-3:-1] == ["run", "--rm"]
    service = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"][words[-1]]
    assert (
        service["build"]["dockerfile"] == "deploy/export/Dockerfile" and service["build"]["target"] == "bench"
    )
    assert service["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]
    assert ".:/workspace" in service["volumes"], "the run uses the checkout's code and writes reports/ there"
    dockerfile = (ROOT / "deploy" / "export" / "Dockerfile").read_text()
    bench_stage = dockerfile[dockerfile.index("FROM export AS bench") :]
    (command,) = re.findall(r"^CMD (.+)$", bench_stage, re.M)
    assert "python -m loadtest.bench.gpu.preflight && exec python -m loadtest.bench --mode gpu" in command


def test_make_bench_gpu_runs_the_preflight_before_the_benchmark() -> None:
    makefile = (ROOT / "Makefile").read_text()
    recipe = re.search(r"^bench-gpu:[^\n]*\n((?:\t[^\n]*\n)+)", makefile, re.M)
    assert recipe, "no bench-gpu target"
    assert [line.strip() for line in recipe[1].splitlines()] == [
        "$(PY) -m loadtest.bench.gpu.preflight",
        "$(PY) -m loadtest.bench --mode gpu",
    ]
