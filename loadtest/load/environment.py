"""The environment a benchmark ran in: machine, load, versions, git commit and configuration hashes."""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import platform
import subprocess
from pathlib import Path

import psutil
import tritonclient.http as httpclient

PACKAGES = (
    "torch",
    "onnxruntime",
    "numpy",
    "tritonclient",
    "nvidia-pytriton",
    "locust",
    "tokenizers",
    "pillow",
)


def machine() -> dict[str, object]:
    return {
        "cpu_model": _cpu_model(),
        "logical_cores": os.cpu_count(),
        "physical_cores": psutil.cpu_count(logical=False),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "os": platform.platform(),
        "python": platform.python_version(),
    }


def load_average() -> list[float]:
    """1, 5 and 15 minute load averages: how busy the machine was besides this benchmark."""
    return [round(x, 2) for x in os.getloadavg()]


def versions(server_url: str | None = None) -> dict[str, str]:
    found = {"python": platform.python_version()}
    for package in PACKAGES:
        try:
            found[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            found[package] = "not installed"
    if server_url:
        try:
            found["tritonserver"] = str(
                httpclient.InferenceServerClient(server_url).get_server_metadata()["version"]
            )
        except Exception as e:  # noqa: BLE001 - a version lookup must not fail the benchmark
            found["tritonserver"] = f"unknown ({type(e).__name__})"
    return found


def git_commit(root: Path) -> dict[str, object]:
    """HEAD's commit and whether the working tree differs from it (read-only git commands)."""

    def git(*args: str) -> str:
        completed = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=False)
        return completed.stdout.strip() if completed.returncode == 0 else ""

    status = git("status", "--porcelain")
    return {
        "commit": git("rev-parse", "HEAD") or "unknown",
        "dirty": bool(status),
        "changed_files": len(status.splitlines()),
    }


def source_config_hashes(repository: Path) -> dict[str, str]:
    """sha256 of every model_repository/<model>/config.pbtxt: the configuration the run derived from."""
    return {
        path.parent.name: hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(Path(repository).glob("*/config.pbtxt"))
    }


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"
