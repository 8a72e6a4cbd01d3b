"""Model Analyzer's log followed line by line while its process runs, from where this run began, up to a
deadline; its failure named with its exit status and log."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from loadtest.tune import analyzer
from loadtest.tune.progress import follow


def _writer(log: Path, code: str) -> subprocess.Popen:
    handle = log.open("ab")
    try:
        return subprocess.Popen([sys.executable, "-c", code], stdout=handle, stderr=subprocess.STDOUT)
    finally:
        handle.close()


def test_the_log_is_followed_line_by_line_from_where_this_run_began(tmp_path: Path) -> None:
    log = tmp_path / "model_analyzer.log"
    log.write_bytes(b"a line of an earlier run\n")
    code = "import sys, time\nfor n in range(3):\n    print(f'line {n}', flush=True); time.sleep(0.2)\n"
    code += "sys.stdout.write('last, unterminated'); sys.exit(3)"
    offset = log.stat().st_size
    seen: list[str] = []
    status = follow(_writer(log, code), log, offset, deadline=time.monotonic() + 60, on_line=seen.append)
    assert status == 3
    assert seen == ["line 0", "line 1", "line 2", "last, unterminated"]


def test_following_stops_at_the_deadline(tmp_path: Path) -> None:
    log = tmp_path / "model_analyzer.log"
    log.touch()
    process = _writer(log, "import time; print('started', flush=True); time.sleep(60)")
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            follow(process, log, 0, deadline=time.monotonic() + 1, on_line=lambda line: None)
    finally:
        process.kill()
        process.wait()


def test_a_failing_model_analyzer_is_a_tune_error_naming_its_status_and_log(tmp_path: Path) -> None:
    workspace = analyzer.Workspace.at(tmp_path)
    tmp_path.mkdir(exist_ok=True)
    workspace.config_file.write_text("profile_models: [\n")  # not YAML: Model Analyzer exits 1
    seen: list[str] = []
    with pytest.raises(analyzer.TuneError, match=r"failed with exit status 1:[\s\S]*ParserError"):
        analyzer.run(workspace, timeout_s=120, on_line=seen.append)
    assert any("ParserError" in line for line in seen), "its output reached the progress as it came"
