"""Code and configs name an experiment by its registry key (loadtest/experiments/registry.py), never by
the number it had in a report: numbers move when the report is reordered, keys do not."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NUMBERED = re.compile(r"\bexperiments?\s*#?\s*\d", re.IGNORECASE)
# Prose is free to tell the story of a run: docs/ and the Markdown files are not code or configs.
CODE_AND_CONFIG = ("*.py", "*.pbtxt", "*.yml", "*.yaml", "*.toml", "*.json", "*.sh", "*.env", "Makefile")


def _tracked(patterns: tuple[str, ...]) -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--", *patterns, ":!docs"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return [ROOT / name for name in listed.stdout.split("\0") if name]


def test_the_pattern_finds_a_numbered_experiment() -> None:
    assert NUMBERED.search("as " + "experiment" + " 8 measured")
    assert NUMBERED.search("Experiments" + " 3, 4 and 9")
    assert not NUMBERED.search("the `ragged` experiment, 2 rounds")


def test_no_code_or_config_names_an_experiment_by_number() -> None:
    files = _tracked(CODE_AND_CONFIG)
    assert any(path.suffix == ".pbtxt" for path in files) and any(path.suffix == ".py" for path in files)
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in files
        if path.is_file() and not path.is_symlink()
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
        if NUMBERED.search(line)
    ]
    assert not found, "name experiments by their registry key:\n" + "\n".join(found)
