"""Model Analyzer's progress, followed from its log: each configuration it profiles, N of M, with its
settings and the time left; the log followed line by line while the process runs; its failure named."""

from __future__ import annotations

import io
import subprocess
import sys
import time
from pathlib import Path

import pytest

from loadtest.tune import analyzer
from loadtest.tune.plan import SWEEPS, make_plan
from loadtest.tune.progress import AnalyzerProgress, follow
from tritonrepo.progress import Progress

REPOSITORY = Path(__file__).resolve().parents[2] / "model_repository"
# Lines as Model Analyzer 1.58 writes them (model_analyzer/config/generate/base_model_config_generator.py,
# record/metrics_manager.py), with some of its other output between them.
LOG = """\
[Model Analyzer] Initializing GPUDevice handles
[Model Analyzer] Starting manual brute search
[Model Analyzer] Creating model config: minilm_onnx_config_default
[Model Analyzer]
[Model Analyzer] Profiling minilm_onnx_config_default: concurrency=8
[Model Analyzer] Creating model config: minilm_onnx_config_0
[Model Analyzer]   Setting instance_group to [{'count': 1, 'kind': 'KIND_CPU'}]
[Model Analyzer]   Setting dynamic_batching to {'max_queue_delay_microseconds': 500}
[Model Analyzer]
[Model Analyzer] Profiling minilm_onnx_config_0: concurrency=8
[Model Analyzer] Found existing model config: minilm_onnx_config_1
[Model Analyzer]   Setting instance_group to [{'count': 2, 'kind': 'KIND_CPU'}]
[Model Analyzer] Existing measurement found for run config. Skipping profile
[Model Analyzer] Creating model config: minilm_onnx_config_2
[Model Analyzer]   Enabling dynamic_batching
[Model Analyzer] Profiling minilm_onnx_config_2: concurrency=8
"""


def test_each_configuration_is_shown_n_of_m_with_its_settings_and_the_time_left() -> None:
    stream = io.StringIO()
    watcher = AnalyzerProgress(Progress(stream=stream, bars=False), total=4)
    for second, line in enumerate(LOG.splitlines()):
        watcher.feed(line, now=10.0 * second)
    assert stream.getvalue().splitlines() == [
        "configuration 1 of 4: minilm_onnx_config_default at concurrency=8 (time left known after the first)",
        "configuration 2 of 4: minilm_onnx_config_0 at concurrency=8; instance_group [{'count': 1, "
        "'kind': 'KIND_CPU'}], dynamic_batching {'max_queue_delay_microseconds': 500} (about 2m30s left)",
        "configuration 3 of 4: minilm_onnx_config_1 measured before (checkpoint) (about 1m40s left)",
        "configuration 4 of 4: minilm_onnx_config_2 at concurrency=8; dynamic_batching enabled "
        "(about 55s left)",
    ]


def test_the_count_is_each_targets_variants_and_shipped_configuration_at_each_concurrency() -> None:
    quick = make_plan(["image_classifier", "text_embedder"], sweep="quick", latency_budget_ms=1000)
    assert quick.profiles == 2 * (SWEEPS["quick"].variants + 1) == 18
    loads = make_plan(["text_embedder"], sweep="quick", latency_budget_ms=1000, concurrency=[8, 32])
    assert loads.profiles == 2 * (SWEEPS["quick"].variants + 1)
    minimal = make_plan(["image_classifier"], sweep="minimal", latency_budget_ms=1000, source=REPOSITORY)
    assert minimal.profiles == 2  # what the end-to-end test counts in the log


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
