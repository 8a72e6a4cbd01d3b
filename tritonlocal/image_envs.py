"""The images built on the official Python image (export, its bench target, Locust) as environments here.

Each is a virtual environment built from exactly the pip installs its Dockerfile runs
(:mod:`tritonlocal.image_installs`), on this machine's Python when it is the image's, and cached under
``build/image-envs/<image>-<hash>/`` by a hash of every requirement line it installs: it is rebuilt only
when one changes. Its commands run with :meth:`ImageEnv.environment`: a PATH of the venv's ``bin`` and a
folder of links to the basic tools the slim image has (a shell, coreutils, grep, sed; no git, no curl),
and none of this machine's other variables. What the export image copies is laid out by
:func:`export_workspace`, from the Dockerfile's own COPY lines.

One install differs from the image, because its wheels cannot come here: the image's torch
(``EXPORT_TORCH_VERSION``, a CUDA build of several GB, or the CPU build from an index outside PyPI) is
replaced by the CPU torch that ``make venv`` installs, plus the CUDA runtime wheel that the image's torch
brings with it (perf_analyzer loads its libcudart).
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.metadata
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from tritonlocal.errors import InstallationError
from tritonlocal.image_installs import EXPORT, Install, installs, read_versions
from tritonrepo.files import EXPORT_OUTPUTS
from tritonrepo.paths import BUILD, ROOT

logger = logging.getLogger(__name__)

CACHE = BUILD / "image-envs"
# The installs of each image, in the order its Dockerfile runs them (the bench target is built FROM the
# export target with the GPU's onnxruntime; the export is run here as docker-compose.cpu.yml runs it).
IMAGES = {
    "export": ("export-cpu", "export-weights"),
    "bench": ("export-gpu", "export-weights", "bench"),
    "locust": ("locust",),
}
# What the image's torch (EXPORT_TORCH_VERSION, a CUDA build) installs besides itself that its commands
# use outside torch: perf_analyzer's libcudart (tests/checks/test_deploy_images_resolve.py checks the pin).
TORCH_CUDA_RUNTIME = "nvidia-cuda-runtime-cu12==12.4.127"
# The slim Debian image's basic tools a command may call; git, curl and compilers are not among them.
BASE_TOOLS = (
    "sh", "bash", "dash", "env", "cat", "ls", "cp", "mv", "rm", "mkdir", "ln", "chmod", "touch", "uname",
    "id", "nproc", "getconf", "grep", "sed", "find", "xargs", "tar", "gzip", "head", "tail", "sort", "tr",
    "cut", "wc", "dirname", "basename", "readlink", "date", "sleep", "ldconfig",
)  # fmt: skip


@dataclass(frozen=True)
class ImageEnv:
    """A built image environment: its venv and the folder of the image's basic tools."""

    image: str
    prefix: Path
    tools: Path

    def environment(self, **extra: str) -> dict[str, str]:
        """The variables a command sees in the image: its PATH and the Dockerfile's ENV, plus ``extra``."""
        path = os.pathsep.join([str(self.prefix / "bin"), str(self.tools)])
        base = {"PATH": path, "HOME": os.environ.get("HOME", "/root"), "LANG": "C.UTF-8"}
        return {**base, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1", **extra}


def image_env(image: str) -> ImageEnv:
    """The environment of ``image`` (a key of IMAGES), built when no cached one has the same installs.
    One build at a time, across processes: a caller that finds a build under way waits for it."""
    python = _image_python()
    steps = _steps(image)
    key = hashlib.sha256(json.dumps([python[1], steps]).encode()).hexdigest()[:16]
    prefix = CACHE / f"{image}-{key}"
    tools = _tools(CACHE / "tools")
    if not (prefix / ".complete").is_file():
        with _build_lock():
            if not (prefix / ".complete").is_file():
                _build(image, prefix, python[0], steps)
    return ImageEnv(image, prefix, tools)


def _build(image: str, prefix: Path, python: str, steps: list[tuple[bool, list[str]]]) -> None:
    for stale in CACHE.glob(f"{image}-*"):  # one environment per image: an older one is removed
        shutil.rmtree(stale, ignore_errors=True)
    started = time.monotonic()
    _run([python, "-m", "venv", str(prefix)])
    for step, (no_deps, lines) in enumerate(steps):
        requirements = prefix / f"requirements-{step}.txt"
        requirements.write_text("\n".join(lines) + "\n")
        deps = ["--no-deps"] if no_deps else []
        # --no-compile: pip would byte-compile every module it installs, most of which no command here
        # imports; Python compiles what a command imports on first import, into the venv's __pycache__.
        _run([str(prefix / "bin" / "python"), "-m", "pip", "install", "--quiet", "--only-binary=:all:",
              "--no-compile", *deps, "-r", str(requirements)])  # fmt: skip
    if image == "bench":  # the bench target's last step (deploy/export/Dockerfile)
        _run([str(prefix / "bin" / "python"), "-m", "tritonlocal", "install-perf-analyzer"], cwd=ROOT)
    (prefix / ".complete").write_text(f"built in {time.monotonic() - started:.0f} s\n")
    logger.info("built %s in %.0f s", prefix, time.monotonic() - started)


@contextmanager
def _build_lock() -> Iterator[None]:
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def export_workspace(target: Path) -> Path:
    """``target`` laid out as the export image's /workspace: what the Dockerfile's export stage copies,
    without the exported files (Dockerfile.dockerignore)."""
    stage = EXPORT.read_text().split("FROM export AS bench")[0]
    for source, destination in re.findall(r"^COPY (\S+) \./(\S+)$", stage, re.M):
        shutil.copytree(ROOT / source, target / destination, ignore=shutil.ignore_patterns(*EXPORT_OUTPUTS))
    return target


def _steps(image: str) -> list[tuple[bool, list[str]]]:
    """(no_deps, requirement lines) of each pip install, the image's torch replaced by this machine's:
    installed first, as the Makefile and the CPU image install theirs, so later pins it meets add nothing."""
    by_name: dict[str, Install] = {install.name: install for install in installs()}
    image_torch = f"torch=={read_versions()['EXPORT_TORCH_VERSION']}"
    local_torch = f"torch=={importlib.metadata.version('torch').split('+')[0]}"
    steps: list[tuple[bool, list[str]]] = []
    if image != "locust":
        steps.append((False, [local_torch, *([TORCH_CUDA_RUNTIME] if image == "bench" else [])]))
    for name in IMAGES[image]:
        install = by_name[name]
        lines = [local_torch if line == image_torch else line for line in install.requirements()]
        steps.append((install.no_deps, lines))
    return steps


def _image_python() -> tuple[str, str]:
    """(this machine's interpreter of the images' Python X.Y, its full version), or an error naming both."""
    wanted = next(install.python for install in installs() if install.name == "locust")
    found = shutil.which(f"python{wanted}")
    if found is None and f"{sys.version_info.major}.{sys.version_info.minor}" == wanted:
        found = sys.executable
    if found is None:
        raise InstallationError(
            f"the Python images run Python {wanted} (PYTHON_IMAGE in deploy/versions.env) and this machine "
            f"has no python{wanted} on PATH: install it to build their environments"
        )
    version = subprocess.run([found, "--version"], capture_output=True, text=True, check=True).stdout.strip()
    return found, version


def _tools(folder: Path) -> Path:
    """A folder of links to this machine's copies of BASE_TOOLS (the ones it has)."""
    folder.mkdir(parents=True, exist_ok=True)
    search = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
    for tool in BASE_TOOLS:
        found, link = shutil.which(tool, path=search), folder / tool
        if found and not link.is_symlink():
            with suppress(FileExistsError):  # another process linked it meanwhile
                link.symlink_to(found)
    return folder


def _run(command: list[str], cwd: Path | None = None) -> None:
    done = subprocess.run(command, capture_output=True, text=True, cwd=cwd, check=False)
    if done.returncode != 0:
        raise InstallationError(
            f"building an image environment failed: {' '.join(command)}\n{done.stderr.strip()[-3000:]}"
        )


def main(argv: list[str] | None = None) -> int:
    """``python -m tritonlocal.image_envs [IMAGE ...]``: build the images' environments (all by default)
    before they are needed; the test suite starts it when it collects the images tier."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    images = (sys.argv[1:] if argv is None else argv) or list(IMAGES)
    unknown = sorted(set(images) - set(IMAGES))
    if unknown:
        print(f"no image {', '.join(unknown)}; images: {', '.join(IMAGES)}", file=sys.stderr)
        return 2
    for image in images:
        image_env(image)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
