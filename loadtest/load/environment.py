"""The environment a benchmark ran in: machine, load, versions, git commit and configuration hashes."""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import platform
import shutil
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
    """HEAD's commit and whether the working tree differs from it (read-only git commands).

    Where git is not installed (the slim Python image the GPU benchmark runs in), the commit is read
    from the .git files themselves and the working tree's state is unknown (``dirty`` None)."""
    if shutil.which("git") is None:
        return {"commit": _head_from_files(root) or "unknown", "dirty": None, "changed_files": None}

    def git(*args: str) -> str:
        completed = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=False)
        return completed.stdout.strip() if completed.returncode == 0 else ""

    status = git("status", "--porcelain")
    return {
        "commit": git("rev-parse", "HEAD") or "unknown",
        "dirty": bool(status),
        "changed_files": len(status.splitlines()),
    }


def _head_from_files(root: Path) -> str:
    """HEAD's commit read from ``root/.git`` (a folder, or a worktree's ``gitdir:`` file), or ""."""
    try:
        git_dir = root / ".git"
        if git_dir.is_file():
            git_dir = root / git_dir.read_text().removeprefix("gitdir:").strip()
        head = (git_dir / "HEAD").read_text().strip()
        if not head.startswith("ref:"):
            return head  # a detached HEAD holds the commit itself
        ref = head.removeprefix("ref:").strip()
        common = git_dir / "commondir"
        refs_dir = git_dir / common.read_text().strip() if common.is_file() else git_dir
        loose = refs_dir / ref
        if loose.is_file():
            return loose.read_text().strip()
        for line in (refs_dir / "packed-refs").read_text().splitlines():
            commit, _, name = line.partition(" ")
            if name == ref:
                return commit
    except OSError:
        pass
    return ""


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
