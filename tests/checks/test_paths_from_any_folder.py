"""Every project path resolves from the project root (tritonrepo/paths.py), so that a command started from
another folder finds the same descriptions, repository, records and runtime as one started at the root."""

from __future__ import annotations

import ast
import functools
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tritonrepo import paths

ROOT = paths.ROOT
PACKAGES = ("clients", "demo", "export", "loadtest", "samples", "tritonlocal", "tritonrepo")
# The folders of the project a path could name; a relative Path built from one of these depends on the
# working folder.
PROJECT_FOLDERS = {p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith(".")} | {
    "build",
    "reports",
    "models",
}


def _relative_project_paths(path: Path) -> list[str]:
    """Calls of Path whose first argument is a string literal naming a project folder, in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "Path"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and Path(node.args[0].value).parts[:1] in {(folder,) for folder in PROJECT_FOLDERS}
        ):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_module_builds_a_project_path_from_the_working_folder() -> None:
    offenders = [
        line
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if path != Path(paths.__file__).resolve()
        for line in _relative_project_paths(path)
    ]
    assert not offenders, "use tritonrepo.paths instead of:\n" + "\n".join(offenders)


def test_every_anchored_path_is_absolute_and_inside_the_project() -> None:
    anchored = {name: value for name, value in vars(paths).items() if isinstance(value, Path)}
    assert {"DESCRIPTIONS", "REPOSITORY", "BUILD", "PRECISION_RECORDS", "SERVING_RUNTIME"} <= set(anchored)
    for name, value in anchored.items():
        assert value.is_absolute() and (value == ROOT or ROOT in value.parents), name
    assert (paths.REPOSITORY / "text_embedder" / "config.pbtxt").is_file()
    assert sorted(paths.DESCRIPTIONS.glob("*.yaml")), "the descriptions folder holds no description"


def _run_elsewhere(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m ...`` started in an empty temporary folder, with the project importable as installed."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )


def test_the_export_finds_every_description_from_another_folder(tmp_path: Path) -> None:
    # --only with an unknown name is a usage error after reading every description, listing their names.
    done = _run_elsewhere(tmp_path, "-m", "export", "--only", "no_such_model", "--precision", "fp32")
    assert done.returncode == 2, done.stderr
    for description in paths.DESCRIPTIONS.glob("*.yaml"):
        assert description.stem in done.stderr
    assert not list(tmp_path.iterdir()), "the export wrote into the working folder"


def test_an_export_that_finds_no_description_says_where_it_looked(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    done = _run_elsewhere(tmp_path, "-m", "export", "--models", str(empty), "--precision", "fp32")
    assert done.returncode == 1
    assert f"no model description (*.yaml) in {empty}" in done.stderr


def test_derive_reads_the_project_repository_from_another_folder(tmp_path: Path) -> None:
    target = tmp_path / "local"
    done = _run_elsewhere(tmp_path, "-m", "tritonrepo", "derive", "--target", str(target))
    assert done.returncode == 0, done.stderr
    assert (target / "text_embedder" / "config.pbtxt").is_file()
    assert {p.name for p in tmp_path.iterdir()} == {"local"}


# Every command of the project, as ``python -m <module>``.
ENTRY_POINTS = (
    "export",
    "export.scaffold",
    "export.text_warmup",
    "tritonrepo",
    "tritonlocal",
    "clients",
    "clients.batch",
    "loadtest.bench",
    "loadtest.report",
    "loadtest.tune",
    "loadtest.soak",
    "loadtest.baselines.minimal_server",
    "loadtest.experiments.classext",
    "demo",
)


@pytest.fixture(scope="module")
def help_of(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., subprocess.CompletedProcess[str]]:
    """``python -m <module> [command] --help`` from an empty folder, each run once."""
    folder = tmp_path_factory.mktemp("elsewhere")

    @functools.cache
    def run(module: str, *command: str) -> subprocess.CompletedProcess[str]:
        return _run_elsewhere(folder, "-m", module, *command, "--help")

    return run


@pytest.mark.parametrize("module", ENTRY_POINTS)
def test_every_default_path_an_entry_point_shows_is_the_projects(
    module: str, help_of: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    done = help_of(module)
    assert done.returncode == 0, done.stderr
    shown = re.findall(r"default:\s*([^\s)]+)", " ".join(done.stdout.split()))
    relative = [value for value in shown if "/" in value and not value.startswith("/")]
    assert not relative, f"{module} --help shows default paths relative to the working folder: {relative}"


def _entries(help_text: str) -> tuple[dict[str, str], list[str]]:
    """An argparse help's arguments (invocation, e.g. ``--url URL`` -> its help text) and the commands
    its subparsers offer."""
    entries: dict[str, str] = {}
    commands: list[str] = []
    current: str | None = None
    body = help_text.split("\n\n", 1)[1]
    for section in re.split(r"^\S.*:$", body, flags=re.M)[1:]:
        for line in section.strip("\n").split("\n\n", 1)[0].splitlines():
            indent = len(line) - len(line.lstrip())
            if indent == 2:
                current, _, text = line.strip().partition("  ")
                entries[current] = text.strip()
            elif indent == 4:  # a command of the subparsers' group: the group needs no help of its own
                commands.append(line.split()[0])
                entries.pop(current or "", None)
                current = None
            elif current is not None:
                entries[current] = (entries[current] + " " + line.strip()).strip()
    return entries, commands


def _takes_a_value(invocation: str) -> bool:
    return invocation.startswith("-") and any(
        not token.startswith("-") for token in invocation.split(", ")[-1].split()
    )


@pytest.mark.parametrize("module", ENTRY_POINTS)
def test_every_option_of_every_command_has_a_help_text_its_default_and_the_exit_codes(
    module: str, help_of: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    _, commands = _entries(help_of(module).stdout)
    for command in ((), *((name,) for name in commands)):
        done = help_of(module, *command)
        where = " ".join((module, *command))
        assert done.returncode == 0 and "Traceback" not in done.stderr, f"{where} --help: {done.stderr}"
        assert re.search(r"^exit codes: 0 ", done.stdout, re.I | re.M), f"{where} --help names no exit codes"
        entries, _ = _entries(done.stdout)
        assert entries, f"{where} --help: no arguments found in\n{done.stdout}"
        silent = [name for name, text in entries.items() if not text]
        assert not silent, f"{where} --help: arguments without a help text: {silent}"
        no_default = [
            name
            for name, text in entries.items()
            if _takes_a_value(name) and not re.search(r"default|required", text, re.I)
        ]
        assert not no_default, f"{where} --help: options that do not show their default: {no_default}"
        twice = [
            name
            for name, text in entries.items()
            if len(re.findall(r"\bdefault\b", text, re.I)) > 1 or "None:" in text
        ]
        assert not twice, f"{where} --help: options that state their default twice: {twice}"
