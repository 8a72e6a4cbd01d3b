"""The Locust image's commands as docker-compose.yml runs them (profile loadtest-headless: a headless master
and a worker), in an environment built from exactly what deploy/locust/Dockerfile installs, with the image's
PATH (no git) and compose's environment and mounts, against the real local server over HTTP and gRPC."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from loadtest.load.locust_run import parse_stats_csv
from tritonlocal import LocalTritonServer
from tritonlocal.image_envs import image_env
from tritonlocal.ports import pick_free_port
from tritonrepo.paths import ROOT

# A cold build of the image's environment downloads and installs what the image installs: minutes, past the
# suite's 600 s per test on a busy machine (docs/measurements.md, "The image environments' cold builds").
pytestmark = pytest.mark.timeout(3600)

# compose's variables at a few seconds' load; every other ${...} of the command lines is an error here.
VARIABLES = {"LOCUST_WORKERS": "1", "LOCUST_USERS": "4", "LOCUST_SPAWN_RATE": "4", "LOCUST_RUN_TIME": "8s"}
MODELS = ("image_classifier", "text_embedder")


def interpolate(value: str) -> str:
    def one(match: re.Match[str]) -> str:
        assert match["name"] in VARIABLES, f"docker-compose.yml: {match[0]} is not set by this test"
        return VARIABLES[match["name"]]

    return re.sub(r"\$\{(?P<name>\w+)(?::-[^}]*)?\}", one, value)


def mounted_project(service: dict, folder: Path) -> Path:
    """The service's working folder with its volumes as compose mounts them: links to this checkout's
    folders, and an empty folder of this test's for what the image writes into (reports/)."""
    project = folder / "project"
    for volume in service["volumes"]:
        source, target, *mode = volume.split(":")
        inside = project / Path(target).relative_to(service["working_dir"])
        inside.parent.mkdir(parents=True, exist_ok=True)
        if mode == ["ro"]:
            inside.symlink_to(ROOT / source)
        else:
            inside.mkdir()
    return project


def test_the_compose_headless_run_sends_http_and_grpc_requests_without_failures(
    triton_server: LocalTritonServer, tmp_path: Path
) -> None:
    locust = image_env("locust")
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    master, worker = services["locust-headless"], services["locust-worker"]
    project = mounted_project(master, tmp_path)
    places = {
        master["working_dir"]: project.as_posix(),
        "proxy:8000": triton_server.http_url,
        "proxy:8001": triton_server.grpc_url,
    }
    variables = dict(master["environment"])
    for there, here in places.items():
        variables = {name: value.replace(there, here) for name, value in variables.items()}
    environment = locust.environment(**variables)
    port = pick_free_port("127.0.0.1")
    master_command = [interpolate(arg) for arg in master["command"]]
    worker_command = [interpolate(arg) for arg in worker["command"]]
    worker_command[worker_command.index("locust-master")] = "127.0.0.1"
    locust_bin = str(locust.prefix / "bin" / "locust")
    with (
        subprocess.Popen(
            [locust_bin, *master_command, "--master-bind-host=127.0.0.1", f"--master-bind-port={port}"],
            cwd=project, env=environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        ) as master_process,
        subprocess.Popen(
            [locust_bin, *worker_command, f"--master-port={port}"],
            cwd=project, env=environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        ) as worker_process,
    ):  # fmt: skip
        try:
            output, _ = master_process.communicate(timeout=180)
            worker_output, _ = worker_process.communicate(timeout=60)
        finally:
            for process in (master_process, worker_process):
                if process.poll() is None:
                    process.kill()
    log = f"master:\n{output[-3000:]}\nworker:\n{worker_output[-3000:]}"
    assert master_process.returncode == 0, log
    csv_prefix = next(arg.split("=", 1)[1] for arg in master_command if arg.startswith("--csv="))
    rows = {(row.request_type, row.name): row for row in parse_stats_csv(project / f"{csv_prefix}_stats.csv")}
    for request_type in ("HTTP", "gRPC"):
        for model in MODELS:
            row = rows.get((request_type, model))
            assert row is not None and row.requests > 0, f"no {request_type} {model} requests:\n{log}"
            assert row.failures == 0, log
    assert "Traceback" not in output + worker_output, log


@pytest.mark.parametrize("module", ["tritonclient.grpc", "tritonclient.http", "loadtest.load.locustfile"])
def test_the_image_imports_what_the_locustfile_needs(module: str, tmp_path: Path) -> None:
    """Quicker to read than a failed run: each import on its own, from the mounted project."""
    locust = image_env("locust")
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    project = mounted_project(services["locust-headless"], tmp_path)
    environment = locust.environment(PYTHONPATH=project.as_posix())
    done = subprocess.run(
        ["python", "-c", f"import {module}"], cwd=project, env=environment, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
