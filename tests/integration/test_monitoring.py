"""A real Prometheus, started the way `python -m tritonlocal monitor` starts it, scraping a real local
tritonserver with the compose stack's scrape config and recording rules.

The server is this module's own (l2_normalize only, summaries on), so no other test's traffic enters
the numbers. Prometheus comes from Debian's prometheus package (the Makefile's bootstrap installs it);
when it is missing these tests fail with that instruction rather than skip.
"""

from __future__ import annotations

import ipaddress
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import psutil
import pytest
import tritonclient.http as httpclient

from clients import TritonClient
from tritonlocal import LocalTritonServer, ServerConfig
from tritonlocal.monitoring import (
    SUMMARY_FLAG,
    TRITON_MODEL_METRICS,
    TRITON_SUMMARY_METRICS,
    LocalPrometheus,
    PrometheusConfig,
    find_prometheus,
)

ROOT = Path(__file__).resolve().parents[2]
MODEL = "l2_normalize"
REQUESTS, CONCURRENCY = 200, 64
BATCH_RULE = "model:nv_inference_batch_size:avg1m"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalTritonServer]:
    repo = tmp_path_factory.mktemp("monitoring") / "repository"
    shutil.copytree(
        ROOT / "model_repository" / MODEL, repo / MODEL, ignore=shutil.ignore_patterns("__pycache__")
    )
    config = ServerConfig(
        model_repository=repo,
        exit_timeout_s=3,
        extra_args=(SUMMARY_FLAG,),
        log_path=tmp_path_factory.mktemp("monitoring-logs") / "tritonserver.log",
    )
    with LocalTritonServer(config) as running:
        yield running


@pytest.fixture(scope="module")
def prometheus(server: LocalTritonServer) -> Iterator[LocalPrometheus]:
    find_prometheus()  # fails with the bootstrap instruction when the package is missing
    target = server.metrics_url.removeprefix("http://").removesuffix("/metrics")
    with LocalPrometheus(PrometheusConfig(scrape_targets=[target])) as running:
        running.wait_for_targets_up(timeout_s=30)
        yield running


def _one_request(url: str, seed: int) -> float:
    vector = np.random.default_rng(seed).normal(size=(1, 16)).astype(np.float32)
    tensor = httpclient.InferInput("VECTOR", [1, 16], "FP32")
    tensor.set_data_from_numpy(vector)
    with httpclient.InferenceServerClient(url) as client:  # closed in this thread (test_launcher._infer_http)
        norm = client.infer(MODEL, [tensor]).as_numpy("NORM")
    np.testing.assert_allclose(norm, np.linalg.norm(vector, axis=1, keepdims=True), rtol=1e-5)
    return float(norm[0, 0])


def _metrics_text(server: LocalTritonServer) -> str | None:
    """The metrics page, or None while the metrics port is not listening yet (it can lag readiness)."""
    try:
        with urllib.request.urlopen(server.metrics_url, timeout=5) as response:  # noqa: S310 - loopback
            return response.read().decode()
    except urllib.error.URLError:
        return None


def _wait_for(condition, timeout_s: float, what: str):  # noqa: ANN001, ANN202 - small polling helper
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")


def test_the_server_exports_every_metric_the_rules_and_dashboard_rely_on(server: LocalTritonServer) -> None:
    text = _wait_for(lambda: _metrics_text(server), 30, "the metrics endpoint")
    exported = set(re.findall(r"^# TYPE (\w+) ", text, re.M))
    missing = (TRITON_MODEL_METRICS | TRITON_SUMMARY_METRICS) - exported
    assert not missing, f"Triton 2.51 did not export {missing}"
    assert re.search(r'^nv_inference_request_failure\{[^}]*reason="REJECTED"', text, re.M), (
        "failures carry a reason"
    )


def test_recorded_average_batch_size_matches_the_statistics_api(
    server: LocalTritonServer, prometheus: LocalPrometheus
) -> None:
    selector = f'nv_inference_count{{model="{MODEL}"}}'
    with TritonClient(f"http://{server.http_url}") as stats:
        before = stats.statistics(MODEL)
    before_inferences = before.inferences
    # A sample taken before the load, so that the rule's 1 m window spans the whole load.
    _wait_for(lambda: prometheus.query(selector).get(MODEL) == before_inferences, 20, "a pre-load scrape")

    with ThreadPoolExecutor(max_workers=CONCURRENCY) as pool:
        list(pool.map(lambda seed: _one_request(server.http_url, seed), range(REQUESTS)))
    with TritonClient(f"http://{server.http_url}") as stats:
        delta = stats.statistics_since(before, requests=REQUESTS)
    inferences, executions = delta.inferences, delta.executions
    after_inferences, expected = before_inferences + inferences, delta.average_batch_size

    # The post-load scrape, then a rule evaluation after it.
    _wait_for(lambda: prometheus.query(selector).get(MODEL) == after_inferences, 20, "the post-load scrape")
    scraped_at = prometheus.query(f"timestamp({selector})")[MODEL]
    _wait_for(
        lambda: prometheus.query(f"timestamp({BATCH_RULE})").get(MODEL, 0) > scraped_at,
        20,
        "a rule evaluation",
    )
    recorded = prometheus.query(f'{BATCH_RULE}{{model="{MODEL}"}}')[MODEL]
    p50 = prometheus.query("model:nv_inference_request_summary_us:p50")[MODEL]
    p99 = prometheus.query("model:nv_inference_request_summary_us:p99")[MODEL]
    print(
        f"\n{REQUESTS} requests at concurrency {CONCURRENCY}: statistics API {inferences} inferences in "
        f"{executions} executions = {expected:.3f} per execution; recorded by Prometheus {recorded:.3f}; "
        f"p50 {p50:.0f} us, p99 {p99:.0f} us"
    )
    assert inferences == REQUESTS
    # Both counters start the rule's window at their pre-load value and are scraped at the same instants,
    # so rate() extrapolates them by the same factor and the ratio is the statistics API's ratio. The 2%
    # tolerance covers floating-point rounding only; a wrong rule (e.g. requests / executions, or a
    # window missing the pre-load sample) is off by far more.
    assert recorded == pytest.approx(expected, rel=0.02)
    assert executions < inferences, "the dynamic batcher formed no batch"
    assert 0 < p50 <= p99


def test_the_monitor_command_serves_and_scrapes_on_loopback_and_stops_both(tmp_path: Path) -> None:
    find_prometheus()
    repo = tmp_path / "repository"
    shutil.copytree(
        ROOT / "model_repository" / MODEL, repo / MODEL, ignore=shutil.ignore_patterns("__pycache__")
    )
    command = [
        sys.executable,
        "-m",
        "tritonlocal",
        "monitor",
        f"--repository={repo}",
        "--http-port=0",
        "--grpc-port=0",
        "--metrics-port=0",
        "--prometheus-port=0",
    ]
    run = subprocess.Popen(
        command,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    lines: list[str] = []
    try:
        assert run.stdout is not None
        for line in run.stdout:
            lines.append(line)
            if "Ctrl-C" in line:
                break
        output = "".join(lines)
        url = re.search(r"prometheus\s+(http://127\.0\.0\.1:\d+)", output)
        assert url, f"no Prometheus address in the output:\n{output}"
        children = psutil.Process(run.pid).children(recursive=True)
        assert any(p.name() == "prometheus" for p in children) and any(
            p.name() == "tritonserver" for p in children
        )
        for process in children:
            for connection in process.net_connections(kind="inet"):
                if connection.status == psutil.CONN_LISTEN:
                    assert _is_loopback(connection.laddr.ip), (
                        f"{process.name()} listens on {connection.laddr}"
                    )
        _wait_for(lambda: _query_up(url.group(1)), 30, "Prometheus to scrape the server")
        run.send_signal(signal.SIGINT)
        assert run.wait(timeout=60) == 0
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    gone, alive = psutil.wait_procs(children, timeout=30)
    assert not [p for p in alive if p.status() != psutil.STATUS_ZOMBIE], f"left running: {alive}"


def _is_loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    mapped = getattr(ip, "ipv4_mapped", None)  # gRPC binds ::ffff:127.0.0.1 for 127.0.0.1
    return ip.is_loopback or (mapped is not None and mapped.is_loopback)


def _query_up(url: str) -> bool:
    with urllib.request.urlopen(f"{url}/api/v1/query?query=up", timeout=5) as response:  # noqa: S310 - loopback
        return '"value":[' in (body := response.read().decode()) and body.count('"1"]') >= 1
