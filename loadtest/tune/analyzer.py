"""Run Model Analyzer's ``profile`` in its local launch mode against the pip wheel's tritonserver.

Everything it needs is prepared under one work folder per plan (``build/tune/<fingerprint>``), so the
same command resumes from Model Analyzer's checkpoint after an interruption and a changed plan starts
afresh:

- ``repository/``: the derived local repository (tritonrepo/derive.py); the profiled models' thread
  count is set to ``auto`` so that each variant divides the cores between its own instances;
- ``backends/``: the Python backend with this interpreter's stub (tritonlocal/installation.py);
- the environment the stubs need (library path, PATH to this interpreter), given to Model Analyzer as
  ``triton_server_environment``; perf_analyzer is the wrapper ``python -m tritonlocal
  install-perf-analyzer`` wrote;
- real input data per model (loadtest/perf_inputs.py), free loopback ports, and ``config.yaml``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from loadtest.load.perf_inputs import write_input_data
from loadtest.tune import progress
from loadtest.tune.plan import TunePlan, model_config_parameters
from tritonlocal import perf_analyzer
from tritonlocal.installation import find_installation, prepare_backend_directory, server_environment
from tritonlocal.ports import pick_free_port, port_in_use
from tritonrepo.configs import format_config, load_repository, parse_config
from tritonrepo.derive import derive_repository

logger = logging.getLogger(__name__)

HOST = "127.0.0.1"
SERVER_ENV_KEYS = ("LD_LIBRARY_PATH", "PATH", "PYTHONPATH", "OMP_NUM_THREADS", "HF_HUB_OFFLINE")


class TuneError(Exception):
    """A tuning could not run; the message says what failed and what to do."""


@dataclass(frozen=True, kw_only=True)
class Workspace:
    """A tuning's work folder and what it holds."""

    root: Path
    repository: Path  # the repository it tunes
    output_repository: Path  # Model Analyzer's output_model_repository_path: the configurations it tried
    export: Path  # Model Analyzer's export_path: its results and reports
    config_file: Path  # Model Analyzer's config
    log_file: Path  # Model Analyzer's log

    @classmethod
    def at(cls, root: Path) -> Workspace:
        return cls(
            root=root,
            repository=root / "repository",
            output_repository=root / "output_repository",
            export=root / "export",
            config_file=root / "config.yaml",
            log_file=root / "model_analyzer.log",
        )


def prepare(plan: TunePlan, work_root: Path) -> Workspace:
    """Write the work folder for ``plan`` (reusing its checkpoint when one exists)."""
    models = load_repository(plan.source)
    workspace = Workspace.at((Path(work_root) / plan.fingerprint(models)).resolve())
    workspace.root.mkdir(parents=True, exist_ok=True)
    derived = derive_repository(plan.source, workspace.repository, gpu_available=plan.gpu)
    for pipeline, model in plan.targets.items():
        if model in derived.skipped:
            raise TuneError(
                f"cannot tune {pipeline}: {model} is not served locally: {derived.skipped[model]}"
            )
        _auto_threads(workspace.repository / model / "config.pbtxt")
    installation = find_installation()
    backends = prepare_backend_directory(installation, workspace.root / "backends")
    environment = server_environment(installation)
    config = {
        "model_repository": str(workspace.repository),
        "output_model_repository_path": str(workspace.output_repository),
        "override_output_model_repository": True,
        "checkpoint_directory": str(workspace.root / "checkpoints"),
        "export_path": str(workspace.export),
        "triton_launch_mode": "local",
        "triton_server_path": str(installation.binary),
        "triton_server_flags": {
            "backend-directory": str(backends),
            "exit-timeout-secs": 10,
            "http-address": HOST,
            "grpc-address": HOST,
            "metrics-address": HOST,
        },
        "triton_server_environment": {key: environment[key] for key in SERVER_ENV_KEYS if key in environment},
        "triton_output_path": str(workspace.root / "tritonserver.log"),
        "perf_analyzer_path": str(perf_analyzer.locate()),
        "perf_output": True,
        "perf_output_path": str(workspace.root / "perf_analyzer.log"),
        "latency_budget": plan.latency_budget_ms,
        "objectives": ["perf_throughput"],
        "run_config_search_disable": True,
        "concurrency": list(plan.sweep.concurrency),
        "num_configs_per_model": plan.sweep.variants + 1,
        "skip_detailed_reports": True,
        "collect_cpu_metrics": True,
        "profile_models": {
            model: {
                "cpu_only": not plan.gpu,
                "model_config_parameters": model_config_parameters(plan.sweep, plan.kind),
                "perf_analyzer_flags": _perf_flags(plan, model, workspace),
            }
            for model in plan.targets.values()
        },
        **_endpoints(workspace.root / "ports.json"),
    }
    workspace.config_file.write_text(yaml.safe_dump(config, sort_keys=False))
    return workspace


def run(
    workspace: Workspace, *, timeout_s: float, on_line: Callable[[str], None] = lambda line: None
) -> None:
    """Run ``model-analyzer profile`` on the workspace's config; its output goes to the log file, and
    each line it writes there to ``on_line`` as it comes."""
    executable = Path(sys.executable).parent / "model-analyzer"
    if not executable.is_file():
        raise TuneError(
            f"Model Analyzer is not installed at {executable}; run `make venv` "
            "(or `pip install triton-model-analyzer==1.58.0`)"
        )
    shutil.rmtree(workspace.export, ignore_errors=True)  # reports are regenerated from the checkpoint
    command = [str(executable), "profile", "--config-file", str(workspace.config_file)]
    logger.info("running %s (log: %s)", " ".join(command), workspace.log_file)
    with workspace.log_file.open("ab") as log:
        offset = log.tell()
        # Its own process group: the servers and perf_analyzer it starts stop with it.
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)  # noqa: S603
        try:
            status = progress.follow(
                process, workspace.log_file, offset, deadline=time.monotonic() + timeout_s, on_line=on_line
            )
        except subprocess.TimeoutExpired as e:
            _stop(process)
            raise TuneError(
                f"Model Analyzer ran past {timeout_s:.0f} s; run the same command again to resume from its "
                f"checkpoint, or choose a smaller sweep (log: {workspace.log_file})"
            ) from e
        except BaseException:  # Ctrl-C included: it saves its checkpoint on SIGINT
            _stop(process)
            raise
    if status != 0:
        raise TuneError(f"Model Analyzer failed with exit status {status}:\n{_tail(workspace.log_file)}")


def _stop(process: subprocess.Popen, grace_s: float = 30.0) -> None:
    """SIGINT to Model Analyzer's process group (it writes its checkpoint and stops its server), then
    SIGKILL to what is left after ``grace_s``."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGINT)
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        pass
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _auto_threads(config_path: Path) -> None:
    text = config_path.read_text()
    header = "".join(line + "\n" for line in text.splitlines() if line.startswith("#"))
    config = parse_config(config_path)
    config.parameters["intra_op_threads"].string_value = "auto"
    config_path.write_text(header + format_config(config))


def _perf_flags(plan: TunePlan, model: str, workspace: Workspace) -> dict:
    data = write_input_data(model, workspace.repository, workspace.root / "inputs" / f"{model}.json")
    flags: dict = {
        "input-data": str(data.path),
        "measurement-mode": "time_windows",
        "measurement-interval": plan.sweep.measurement_interval_ms,
        # A shared 2-core machine rarely gives three windows within 10%; a wider band bounds the time a
        # measurement can take (each retry lengthens the window).
        "stability-percentage": 50,
        "max-trials": 6,
    }
    shapes = [arg.removeprefix("--shape=") for arg in data.shape_args]
    if shapes:
        flags["shape"] = shapes
    return flags


def _endpoints(remembered: Path) -> dict[str, str]:
    """Loopback ports for the server, the same on every run of one plan while they stay free: Model
    Analyzer's checkpoint keys a measurement by its perf_analyzer command, metrics URL included, so new
    ports would measure everything again."""
    ports: list[int] = json.loads(remembered.read_text()) if remembered.is_file() else []
    if len(ports) != 3 or any(port_in_use(HOST, port) for port in ports):
        ports = [pick_free_port(HOST) for _ in range(3)]
        remembered.write_text(json.dumps(ports))
    http, grpc, metrics = ports
    return {
        "triton_http_endpoint": f"{HOST}:{http}",
        "triton_grpc_endpoint": f"{HOST}:{grpc}",
        "triton_metrics_url": f"http://{HOST}:{metrics}/metrics",
    }


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"(no log at {path})"
