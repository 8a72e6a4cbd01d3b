"""Model Analyzer's progress, followed from its log: each configuration it profiles, N of M, with its
settings and the time left. Following a running process's log: tests/checks/test_tune_log_follow.py."""

from __future__ import annotations

import io
from pathlib import Path

from loadtest.tune.plan import SWEEPS, make_plan
from loadtest.tune.progress import AnalyzerProgress
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
