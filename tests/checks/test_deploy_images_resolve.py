"""Every image builds from what it pins: each Dockerfile's pip installs resolve, from the package index, to
wheels for the Python and glibc of that image's base, and install nothing that is not pinned.

For each install a Dockerfile runs, pip resolves the same requirements without installing anything:
``pip install --dry-run --ignore-installed --report`` with ``--python-version`` and one ``--platform`` per
manylinux tag the base's glibc accepts (pip does not widen a ``manylinux_2_x`` tag to the older ones by
itself), ``--only-binary=:all:`` as the Dockerfiles install (the slim images have no compiler), and no
local pip configuration (``PIP_CONFIG_FILE`` at the null device, ``--isolated``): only the index an image
build reaches. Python and glibc come from the base: ``PYTHON_IMAGE``'s tag (``python:3.11.10-slim-bookworm``
is Python 3.11 on Debian 12, glibc 2.36), or ``TRITON_PYTHON``/``TRITON_GLIBC`` for NVIDIA's container,
whose tag does not say them (its Dockerfile checks them). The CPU export's torch comes from an index of
CPU wheels the user names; PyPI's torch of the same version stands in for it. Reports are cached under
build/resolve-cache/, keyed by everything that decides them, and the installs run side by side: about a
minute from a cold cache, a second from a warm one.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tritonlocal.image_envs import TORCH_CUDA_RUNTIME
from tritonlocal.image_installs import Install, installs, python_image_base, requirement_lines
from tritonrepo.paths import ROOT

CACHE = ROOT / "build" / "resolve-cache"


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def locked_pins() -> dict[str, str]:
    """requirements.lock as normalised name -> version."""
    pins = (Requirement(line) for line in requirement_lines(ROOT / "requirements.lock"))
    return {normalise(pin.name): str(pin.specifier).removeprefix("==") for pin in pins}


def platforms(glibc: str) -> list[str]:
    """Every manylinux tag a glibc of this version accepts on x86-64, newest first."""
    major, minor = (int(part) for part in glibc.split("."))
    assert major == 2, glibc
    tags = [f"manylinux_2_{m}_x86_64" for m in range(minor, 4, -1)]
    legacy = {17: "manylinux2014_x86_64", 12: "manylinux2010_x86_64", 5: "manylinux1_x86_64"}
    return tags + [tag for m, tag in legacy.items() if m <= minor]


def resolve(install: Install, folder: Path) -> dict:
    """pip's installation report for ``install`` (from the cache when nothing that decides it changed)."""
    requirements = folder / f"{install.name}.txt"
    requirements.write_text("\n".join(install.requirements()) + "\n")
    command = [
        sys.executable, "-m", "pip", "install", "--isolated", "--dry-run", "--ignore-installed",
        "--quiet", "--only-binary=:all:", "--python-version", install.python,
        *(f"--platform={tag}" for tag in platforms(install.glibc)),
        *(["--no-deps"] if install.no_deps else []), "-r", str(requirements),
    ]  # fmt: skip
    pip_version = subprocess.run(
        [sys.executable, "-m", "pip", "--version"], capture_output=True, text=True, check=True
    ).stdout.split()[1]
    key = hashlib.sha256(json.dumps([pip_version, command[3:-1], requirements.read_text()]).encode())
    cached = CACHE / f"{install.name}-{key.hexdigest()[:20]}.json"
    if cached.is_file():
        return json.loads(cached.read_text())
    report = folder / f"{install.name}.report.json"
    done = subprocess.run(
        [*command, "--report", str(report)],
        capture_output=True, text=True, check=False, timeout=300,
        env={**os.environ, "PIP_CONFIG_FILE": os.devnull},
    )  # fmt: skip
    if done.returncode != 0:
        return {"error": done.stderr.strip()[-3000:], "command": " ".join(command)}
    CACHE.mkdir(parents=True, exist_ok=True)
    cached.write_text(report.read_text())
    return json.loads(report.read_text())


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    folder = tmp_path_factory.mktemp("resolve")
    with ThreadPoolExecutor(max_workers=len(installs())) as pool:
        futures = {install.name: pool.submit(resolve, install, folder) for install in installs()}
        return {name: future.result() for name, future in futures.items()}


def _pinned_by_a_resolved_package(report: dict, python: str) -> dict[str, str]:
    """name -> version for each requirement that a resolved package pins exactly (torch's CUDA wheels)."""
    environment = {
        "python_version": python, "python_full_version": f"{python}.0", "platform_system": "Linux",
        "sys_platform": "linux", "platform_machine": "x86_64", "os_name": "posix", "extra": "",
        "implementation_name": "cpython", "platform_python_implementation": "CPython",
    }  # fmt: skip
    pinned = {}
    for item in report["install"]:
        for text in item["metadata"].get("requires_dist", []):
            requirement = Requirement(text)
            if requirement.marker and not requirement.marker.evaluate(environment):
                continue
            (spec, *others) = list(requirement.specifier) or [None]
            if spec is not None and not others and spec.operator == "==":
                pinned[normalise(requirement.name)] = spec.version
    return pinned


@pytest.mark.parametrize("install", installs(), ids=lambda install: install.name)
def test_each_image_install_resolves_to_wheels_of_its_pins_only(install: Install, reports: dict) -> None:
    report = reports[install.name]
    assert "error" not in report, (
        f"{install.dockerfile.relative_to(ROOT)} ({install.name}) does not resolve for Python "
        f"{install.python}, glibc {install.glibc}:\n{report.get('error')}\n$ {report.get('command')}"
    )
    requested = {}
    for line in install.requirements():
        requirement = Requirement(line)
        requested[normalise(requirement.name)] = str(requirement.specifier).removeprefix("==")
    pinned_by_others = _pinned_by_a_resolved_package(report, install.python)
    unpinned = []
    for item in report["install"]:
        name, version = normalise(item["metadata"]["name"]), item["metadata"]["version"]
        assert item["download_info"]["url"].endswith(".whl"), f"{name} {version} is no wheel"
        if requested.get(name, pinned_by_others.get(name)) != version:
            unpinned.append(f"{name}=={version}")
    assert not unpinned, (
        f"{install.name} installs what its requirements do not pin; pin these (at requirements.lock's "
        f"versions) in {', '.join(str(p.relative_to(ROOT)) for p in install.files)}: {sorted(unpinned)}"
    )


def test_the_image_environments_stand_in_for_torchs_cuda_runtime_at_the_images_version(reports: dict) -> None:
    """The image environments built here (tritonlocal/image_envs.py) install this machine's CPU torch and,
    for the bench target, the CUDA runtime wheel at the version the image's torch installs with it."""
    name, version = TORCH_CUDA_RUNTIME.split("==")
    resolved = {
        normalise(i["metadata"]["name"]): i["metadata"]["version"] for i in reports["bench"]["install"]
    }
    assert resolved[name] == version, (
        f"set TORCH_CUDA_RUNTIME in tritonlocal/image_envs.py to {resolved[name]}"
    )


@pytest.mark.parametrize("install", installs(), ids=lambda install: install.name)
def test_each_resolved_install_is_the_one_its_dockerfile_runs(install: Install) -> None:
    dockerfile = install.dockerfile.read_text().replace("\\\n", "")
    for line in install.shown_by:
        assert line in dockerfile, f"{install.dockerfile.relative_to(ROOT)} no longer has {line!r}"


def test_every_pip_install_of_every_image_is_resolved_here_and_takes_wheels_only() -> None:
    dockerfiles = sorted((ROOT / "deploy").rglob("Dockerfile"))
    assert {install.dockerfile for install in installs()} == set(dockerfiles)
    resolved = {line for install in installs() for line in install.shown_by if line.startswith("-r ")}
    for dockerfile in dockerfiles:
        text = dockerfile.read_text().replace("\\\n", "")
        for command in re.findall(r"pip install [^&;\n]*", text):
            assert "--only-binary=:all:" in command, f"{dockerfile.relative_to(ROOT)}: {command}"
        for file in re.findall(r"(-r \S+)", text):
            assert file in resolved, f"{dockerfile.relative_to(ROOT)} installs {file}, which nothing resolves"


@pytest.mark.parametrize(
    "path",
    [
        "deploy/tritonserver/requirements.txt",
        "deploy/export/requirements.txt",
        "deploy/locust/requirements.txt",
    ],
)
def test_each_image_requirement_is_pinned_at_the_locks_version_or_says_why_not(path: str) -> None:
    locked = locked_pins()
    for line in (ROOT / path).read_text().splitlines():
        pin, _, why = line.partition("#")
        if not pin.strip():
            continue
        requirement = Requirement(pin.strip())
        (spec,) = list(requirement.specifier)
        assert spec.operator == "==", f"{path}: {line} is not pinned with =="
        name = normalise(requirement.name)
        if name not in locked:
            assert "not in the lock" in why, f"{path}: {name} is not in requirements.lock; say why it is here"
        elif locked[name] != spec.version:
            assert "not the lock's" in why, f"{path}: {name}=={spec.version}, the lock has {locked[name]}"
        else:
            assert not why.strip(), f"{path}: {line} matches the lock, yet says it does not"


def test_a_python_image_tag_names_its_python_and_glibc() -> None:
    assert python_image_base("python:3.11.10-slim-bookworm") == ("3.11", "2.36")
    assert python_image_base("python:3.13-trixie") == ("3.13", "2.41")
    with pytest.raises(AssertionError, match="expected python:X.Y"):
        python_image_base("python:3.13-slim")  # floats across Debian releases: no glibc to read
    assert platforms("2.17")[-3:] == ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"]
    assert platforms("2.36")[:2] == ["manylinux_2_36_x86_64", "manylinux_2_35_x86_64"]


def test_the_server_image_refuses_a_triton_container_whose_python_or_glibc_differ() -> None:
    """The Dockerfile's check, run as its RUN line runs, with this machine's python3 standing in for the
    container's: it passes for what this machine has and refuses anything else, naming both."""
    text = (ROOT / "deploy" / "tritonserver" / "Dockerfile").read_text().replace("\\\n", "")
    (check,) = [line.removeprefix("RUN ") for line in text.splitlines() if line.startswith("RUN python3 -c")]
    facts = "import platform, sys; print('%d.%d' % sys.version_info[:2], platform.libc_ver()[1])"
    python, glibc = subprocess.run(["python3", "-c", facts], capture_output=True, text=True).stdout.split()

    def build(versions: dict[str, str]) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, **versions}
        return subprocess.run(["sh", "-c", check], env=env, capture_output=True, text=True, check=False)

    assert build({"TRITON_PYTHON": python, "TRITON_GLIBC": glibc}).returncode == 0
    refused = build({"TRITON_PYTHON": "3.9", "TRITON_GLIBC": glibc})
    assert refused.returncode == 1
    assert f"this container has Python {python} and glibc {glibc}" in refused.stderr
    assert (
        "TRITON_PYTHON=3.9" in refused.stderr
        and "re-pin deploy/tritonserver/requirements.txt" in refused.stderr
    )
