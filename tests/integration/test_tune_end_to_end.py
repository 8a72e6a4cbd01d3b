"""A minimal tuning end to end: Model Analyzer starts the wheel's tritonserver, measures the shipped
configuration of one model and one variant for seconds each, and the summary names a winner within the
p99 budget. Nothing is adopted, so the repository is left as it was."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import psutil

from tritonrepo import cpu_overlay

ROOT = Path(__file__).resolve().parents[2]
BUDGET_MS = 5000  # generous: the point is the mechanism, on a shared 2-core machine


def _servers_using(folder: Path) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(["cmdline"]):
        if any(str(folder) in part for part in process.info["cmdline"] or []):
            found.append(process)
    return found


def _profiled(log: Path) -> int:
    return sum(
        1 for line in log.read_text().splitlines() if "] Profiling efficientnet_lite0_onnx_config" in line
    )


def test_a_minimal_tuning_names_a_winner_within_the_budget_and_resumes_from_its_checkpoint(
    tmp_path: Path,
) -> None:
    overlay = ROOT / "model_repository" / "efficientnet_lite0_onnx" / cpu_overlay.FILENAME
    overlay_before = overlay.read_text() if overlay.exists() else None
    work, report = tmp_path / "work", tmp_path / "report"
    command = [
        sys.executable, "-m", "loadtest.tune",
        "--sweep", "minimal",
        "--models", "image_classifier",
        "--latency-budget-ms", str(BUDGET_MS),
        "--work", str(work),
        "--output", str(report),
        "--timeout-s", "400",
    ]  # fmt: skip
    completed = _run(command)
    (log,) = sorted(work.glob("*/model_analyzer.log"))
    assert completed.returncode == 0, completed.stderr[-3000:] + log.read_text()[-3000:]
    assert _profiled(log) == 2
    # Its progress, followed from Model Analyzer's log while it ran: each configuration, N of M.
    shown = re.findall(
        r"^configuration (\d) of 2: (efficientnet_lite0_onnx_config_\w+)", completed.stderr, re.M
    )
    assert [number for number, _ in shown] == ["1", "2"], completed.stderr[-3000:]

    summary = (report / "summary.md").read_text()
    row = next(line for line in summary.splitlines() if line.startswith("| image_classifier |"))
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert cells[1] == "efficientnet_lite0_onnx"
    assert cells[2].startswith("`efficientnet_lite0_onnx_config_"), row
    assert 0 < float(cells[5]) <= BUDGET_MS, row
    assert float(cells[4]) > 0 and float(cells[6]) > 0, row
    # Two configurations were measured: the shipped one and the single variant of the minimal sweep.
    measured = re.findall(r"^\| `(efficientnet_lite0_onnx_config_\w+)` \|", summary, flags=re.M)
    assert sorted(measured) == ["efficientnet_lite0_onnx_config_0", "efficientnet_lite0_onnx_config_default"]
    assert (report / "model-analyzer" / "results" / "metrics-model-inference.csv").is_file()
    assert list((report / "model-analyzer" / "reports" / "summaries").glob("*/result_summary.html"))

    assert _servers_using(work) == [], "Model Analyzer left a tritonserver running"
    assert (overlay.read_text() if overlay.exists() else None) == overlay_before, (
        "a tuning without --adopt wrote"
    )

    # The same command again takes every configuration from the checkpoint, except one whose window Model
    # Analyzer lengthened (unstable on a busy machine): its checkpoint keys that measurement by the
    # lengthened perf_analyzer command, so the original command is measured again.
    lengthened = len(_lengthened(log))
    again = _run(command)
    assert again.returncode == 0, again.stderr[-3000:] + log.read_text()[-3000:]
    assert "Loaded checkpoint" in log.read_text()
    assert _profiled(log) == 2 + lengthened, log.read_text()[-3000:]
    if not lengthened:
        assert row in (report / "summary.md").read_text()


def _lengthened(log: Path) -> set[str]:
    """The configurations whose perf_analyzer window Model Analyzer lengthened."""
    current, found = "", set()
    for line in log.read_text().splitlines():
        if "] Profiling efficientnet_lite0_onnx_config" in line:
            current = line.split("Profiling ", 1)[1].split(":", 1)[0]
        elif "measurement window is too small" in line:
            found.add(current)
    return found


def _run(command: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=500, check=False)  # noqa: S603


def test_a_tuning_past_its_timeout_exits_1_and_leaves_no_process(tmp_path: Path) -> None:
    work = tmp_path / "work"
    command = [
        sys.executable, "-m", "loadtest.tune",
        "--sweep", "minimal",
        "--models", "image_classifier",
        "--work", str(work),
        "--output", str(tmp_path / "report"),
        "--timeout-s", "3",
    ]  # fmt: skip
    completed = _run(command)
    assert completed.returncode == 1, completed.stderr[-3000:]
    assert "Model Analyzer ran past 3 s" in completed.stderr
    assert "Traceback" not in completed.stderr
    assert _servers_using(work) == [], "Model Analyzer or its tritonserver survived the timeout"
