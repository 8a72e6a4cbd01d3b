"""The benchmark's record of the commit it ran, where git is installed and where it is not (the slim Python
image of the export image's bench target has no git)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from loadtest.load.environment import git_commit
from loadtest.report.markdown import _environment

ROOT = Path(__file__).resolve().parents[2]


def _git(folder: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=folder, capture_output=True, text=True, check=True)
    return done.stdout.strip()


@pytest.fixture
def no_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A PATH holding no git, as in the image."""
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))


@pytest.fixture
def repository(tmp_path: Path) -> tuple[Path, str]:
    """A repository of one commit whose branch lives in packed-refs only (as after `git gc`)."""
    folder = tmp_path / "checkout"
    folder.mkdir()
    _git(folder, "init", "-q", "-b", "main")
    (folder / "a.txt").write_text("a\n")
    _git(folder, "add", "a.txt")
    _git(folder, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one")
    _git(folder, "pack-refs", "--all")
    assert not (folder / ".git" / "refs" / "heads" / "main").exists()
    return folder, _git(folder, "rev-parse", "HEAD")


def test_without_git_the_commit_is_read_from_this_checkouts_files(monkeypatch: pytest.MonkeyPatch) -> None:
    """This checkout may be a worktree (``.git`` a file naming its folder) or a clone."""
    head = _git(ROOT, "rev-parse", "HEAD")
    monkeypatch.setenv("PATH", "")
    assert git_commit(ROOT) == {"commit": head, "dirty": None, "changed_files": None}


def test_without_git_packed_and_detached_heads_are_read(repository: tuple[Path, str], no_git: None) -> None:
    folder, commit = repository
    assert git_commit(folder) == {"commit": commit, "dirty": None, "changed_files": None}
    (folder / ".git" / "HEAD").write_text(f"{commit}\n")
    assert git_commit(folder)["commit"] == commit


def test_without_git_and_without_a_checkout_the_commit_is_unknown(tmp_path: Path, no_git: None) -> None:
    assert git_commit(tmp_path)["commit"] == "unknown"


def test_with_git_the_commit_and_the_working_trees_state_are_recorded(repository: tuple[Path, str]) -> None:
    folder, commit = repository
    assert git_commit(folder) == {"commit": commit, "dirty": False, "changed_files": 0}
    (folder / "a.txt").write_text("changed\n")
    assert git_commit(folder) == {"commit": commit, "dirty": True, "changed_files": 1}


def test_the_report_says_when_the_working_trees_state_is_unknown() -> None:
    record = {"machine": {}, "source_config_sha256": {}, "plan": {}}
    unknown = _environment({**record, "git": {"commit": "abc", "dirty": None, "changed_files": None}})
    assert "Git commit `abc` (uncommitted changes not known: no git where it ran)." in unknown
    dirty = _environment({**record, "git": {"commit": "abc", "dirty": True, "changed_files": 2}})
    assert "Git commit `abc` with uncommitted changes (2 files)." in dirty
