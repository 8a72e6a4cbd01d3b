"""Every commit after the history this rule starts from has a scannable message (CONTRIBUTING.md): a
subject of at most 72 characters in the imperative mood, a blank line, then a body. Merge commits follow
the same rule. Commits up to FIRST_CHECKED_AFTER landed before the rule and are never rewritten; a shallow
clone checks the commits it holds."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIRST_CHECKED_AFTER = "823027c"
MAX_SUBJECT_CHARS = 72
# Endings of a first word that is not an imperative: "Adds", "Added", "Adding". Words whose stem ends
# in s (Address, Pass, Focus, Bias) are imperatives.
_NOT_IMPERATIVE = re.compile(r"(?:ed|ing|[^su]s)$")
_IMPERATIVES_ALL_THE_SAME = {"bring", "embed", "exceed", "feed", "need", "proceed", "seed", "shed", "speed"}


def problems(message: str) -> list[str]:
    """What is wrong with one commit message; empty when it follows the rule."""
    lines = message.rstrip("\n").split("\n")
    subject = lines[0]
    found = []
    if len(subject) > MAX_SUBJECT_CHARS:
        found.append(f"subject is {len(subject)} characters, over {MAX_SUBJECT_CHARS}")
    first_word = subject.split(" ", 1)[0]
    word = first_word.lower()
    if not first_word[:1].isupper() or (
        _NOT_IMPERATIVE.search(word) and word not in _IMPERATIVES_ALL_THE_SAME
    ):
        found.append(
            f"subject should start with a capitalised imperative verb ('Add', 'Move'), not {first_word!r}"
        )
    if subject.endswith("."):
        found.append("subject ends with a full stop")
    if len(lines) < 3 or lines[1].strip() or not any(line.strip() for line in lines[2:]):
        found.append("a blank line and a body (the why, and measured numbers with the command) must follow")
    return found


def _git(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=False)


def commits_after(base: str, root: Path = ROOT) -> list[tuple[str, str]]:
    """(short sha, message) of every commit of HEAD's history after ``base``. A shallow clone that stops
    before ``base`` holds only commits after it: all of them are returned."""
    present = _git(root, "cat-file", "-e", f"{base}^{{commit}}").returncode == 0
    if not present and _git(root, "rev-parse", "--is-shallow-repository").stdout.strip() != "true":
        pytest.fail(f"commit {base} is not in this clone's full history: was the history rewritten?")
    log = _git(root, "log", "--format=%h%x00%B%x1e", f"{base}..HEAD" if present else "HEAD")
    assert log.returncode == 0, log.stderr
    entries = [entry.strip("\n") for entry in log.stdout.split("\x1e") if entry.strip()]
    return [tuple(entry.split("\x00", 1)) for entry in entries]  # type: ignore[misc]


def test_every_commit_after_the_rule_has_a_short_imperative_subject_and_a_body() -> None:
    bad = {sha: found for sha, message in commits_after(FIRST_CHECKED_AFTER) if (found := problems(message))}
    assert not bad, "commit messages that do not follow CONTRIBUTING.md:\n" + "\n".join(
        f"  {sha}: {'; '.join(found)}" for sha, found in bad.items()
    )


def test_a_shallow_clone_checks_the_commits_it_holds(tmp_path: Path) -> None:
    clone = tmp_path / "shallow"
    done = _git(tmp_path, "clone", "--quiet", "--depth", "3", "--no-checkout", ROOT.as_uri(), str(clone))
    assert done.returncode == 0, done.stderr
    assert _git(clone, "cat-file", "-e", f"{FIRST_CHECKED_AFTER}^{{commit}}").returncode != 0
    held = _git(clone, "log", "--format=%h", "HEAD").stdout.split()
    assert held and [sha for sha, _ in commits_after(FIRST_CHECKED_AFTER, clone)] == held


@pytest.mark.parametrize(
    "message",
    [
        "Move the runner beside the batching helper\n\nThe runner is a Triton model.\n",
        "Merge branch 'w28'\n\nBring in the runner move.\n",
        "Address the probe's timeout\n\nWhy.\n",
        "Embed the texts in one call\n\nWhy.\n",
    ],
)
def test_a_message_that_follows_the_rule_passes(message: str) -> None:
    assert problems(message) == []


@pytest.mark.parametrize(
    ("message", "problem"),
    [
        ("Move the runner " + "x" * 60 + "\n\nBody.\n", "over 72"),
        ("Moved the runner\n\nBody.\n", "imperative"),
        ("Adds a check\n\nBody.\n", "imperative"),
        ("move the runner\n\nBody.\n", "imperative"),
        ("Move the runner.\n\nBody.\n", "full stop"),
        ("Move the runner\n", "a blank line and a body"),
        ("Move the runner\nBody right under the subject.\n", "a blank line and a body"),
    ],
)
def test_a_message_that_breaks_the_rule_is_named(message: str, problem: str) -> None:
    assert any(problem in found for found in problems(message))
