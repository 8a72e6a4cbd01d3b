"""A local Prometheus beside a local tritonserver, with the compose stack's scrape config and rules.

``deploy/prometheus/`` holds prometheus.yml, rules/ and a file_sd targets file naming the compose
service. :class:`LocalPrometheus` copies the config and rules into a temporary folder, writes a targets
file naming the local server's loopback metrics port, and runs Debian's ``/usr/bin/prometheus`` on
127.0.0.1 (``apt-get install -y prometheus``; it does not start a service). Stopping it removes the
folder and its data.

    python -m tritonlocal monitor      # serve build/local_repository + Prometheus, until Ctrl-C
"""

from __future__ import annotations

import ipaddress
import json
import logging
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from tritonlocal import process as proc
from tritonlocal.errors import TritonLocalError
from tritonlocal.ports import pick_free_port
from tritonrepo.paths import DEPLOY

logger = logging.getLogger(__name__)

CONFIG_DIR = DEPLOY / "prometheus"
INSTALL_HINT = "install it with `apt-get install -y prometheus` (the Makefile's bootstrap step does this)"
# Triton's server flag that adds p50/p99 summaries to the metrics (the compose file sets it too).
SUMMARY_FLAG = "--metrics-config=summary_latencies=true"

# The metric families the rules and the dashboard use, as Triton 2.51 exports them. The CPU-side ones
# were checked against a real scrape (tests/integration/test_monitoring.py); the GPU ones are exported
# only on a GPU host and come from Triton's metrics documentation.
TRITON_MODEL_METRICS = frozenset(
    {
        "nv_inference_request_success",
        "nv_inference_request_failure",
        "nv_inference_count",
        "nv_inference_exec_count",
        "nv_inference_request_duration_us",
        "nv_inference_queue_duration_us",
        "nv_inference_compute_input_duration_us",
        "nv_inference_compute_infer_duration_us",
        "nv_inference_compute_output_duration_us",
        "nv_inference_pending_request_count",
    }
)
TRITON_SUMMARY_METRICS = frozenset({"nv_inference_request_summary_us", "nv_inference_queue_summary_us"})
TRITON_GPU_METRICS = frozenset(
    {
        "nv_gpu_utilization",
        "nv_gpu_memory_total_bytes",
        "nv_gpu_memory_used_bytes",
        "nv_gpu_power_usage",
    }
)


class MonitoringError(TritonLocalError):
    """Prometheus is missing, did not start, or a query failed."""


@dataclass(kw_only=True)
class PrometheusConfig:
    """Where to scrape and how to run. ``port`` 0 picks a free one; ``host`` must be loopback."""

    scrape_targets: Sequence[str]
    config_dir: Path = CONFIG_DIR
    host: str = "127.0.0.1"
    port: int = 0
    binary: Path | None = None
    startup_timeout_s: float = 30.0
    stop_timeout_s: float = 10.0
    target_labels: dict[str, str] = field(default_factory=lambda: {"deployment": "local"})

    def __post_init__(self) -> None:
        self.config_dir = Path(self.config_dir)
        if not self.scrape_targets:
            raise ValueError("scrape_targets must name at least one host:port, e.g. '127.0.0.1:8002'")
        if not ipaddress.ip_address(self.host).is_loopback:
            raise ValueError(f"host must be a loopback address such as 127.0.0.1, got {self.host!r}")
        if not (self.config_dir / "prometheus.yml").is_file():
            raise ValueError(
                f"{self.config_dir}/prometheus.yml does not exist; "
                "run from the repository root or pass config_dir"
            )
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be between 0 (pick a free port) and 65535, got {self.port}")


def find_prometheus(binary: Path | None = None) -> Path:
    missing = MonitoringError(f"the prometheus binary was not found on PATH; {INSTALL_HINT}")
    return proc.find_binary("prometheus", binary, missing=missing)


class LocalPrometheus(proc.Service):
    """A Prometheus process scraping ``config.scrape_targets``; a context manager."""

    def __init__(self, config: PrometheusConfig) -> None:
        self.config = config
        self.port = config.port
        self._process: subprocess.Popen | None = None
        self._log_file: IO[bytes] | None = None
        self._workdir: Path | None = None

    @property
    def url(self) -> str:
        return f"http://{self.config.host}:{self.port}"

    @property
    def log_path(self) -> Path | None:
        return self._workdir / "prometheus.log" if self._workdir else None

    def start(self) -> LocalPrometheus:
        binary = find_prometheus(self.config.binary)
        self._workdir = Path(tempfile.mkdtemp(prefix="tritonlocal-prometheus-"))
        config_file = self._write_config(self._workdir)
        self.port = self.config.port or pick_free_port(self.config.host)
        command = [
            str(binary),
            f"--config.file={config_file}",
            f"--storage.tsdb.path={self._workdir / 'data'}",
            f"--web.listen-address={self.config.host}:{self.port}",
            "--storage.tsdb.retention.time=1d",
            "--log.level=warn",
        ]
        log_file = self._log_file = (self._workdir / "prometheus.log").open("wb")
        self._process = proc.spawn(command, env={}, log=log_file, cwd=self._workdir)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        logger.info("prometheus ready on %s scraping %s", self.url, ", ".join(self.config.scrape_targets))
        return self

    def stop(self) -> None:
        if self._process is not None:
            proc.terminate_tree(self._process, timeout_s=self.config.stop_timeout_s)
            self._process = None
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None

    def is_running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        return proc.log_tail(self.log_path, lines)

    # -- queries ----------------------------------------------------------------------------------
    def api(self, path: str, **params: str) -> object:
        """GET /api/v1/<path> and return its ``data``; raise MonitoringError on an error answer."""
        url = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 - loopback URL
                body = json.loads(response.read())
        except urllib.error.HTTPError as e:
            body = json.loads(e.read() or b"{}")
        except (urllib.error.URLError, OSError) as e:
            raise MonitoringError(f"prometheus at {self.url} did not answer {path}: {e}") from e
        if body.get("status") != "success":
            raise MonitoringError(f"prometheus rejected {path} {params}: {body.get('error', body)}")
        return body["data"]

    def query(self, expr: str, at_s: float | None = None) -> dict[str, float]:
        """Instant query; the result as {model label (or '' when absent): value}."""
        params = {"query": expr} if at_s is None else {"query": expr, "time": f"{at_s:.3f}"}
        data = self.api("query", **params)
        assert isinstance(data, dict)
        return {sample["metric"].get("model", ""): float(sample["value"][1]) for sample in data["result"]}

    def wait_for_targets_up(self, timeout_s: float = 30.0) -> None:
        """Block until every scrape target has been scraped successfully at least once."""
        deadline = time.monotonic() + timeout_s
        targets: list[dict] = []
        while time.monotonic() < deadline:
            data = self.api("targets", state="active")
            assert isinstance(data, dict)
            targets = data["activeTargets"]
            if targets and all(t["health"] == "up" for t in targets):
                return
            time.sleep(0.5)
        raise MonitoringError(f"prometheus targets not up after {timeout_s:.0f} s: {targets}")

    # -- internals --------------------------------------------------------------------------------
    def _write_config(self, workdir: Path) -> Path:
        """The project's prometheus.yml and rules, verbatim, beside a targets file for this run."""
        shutil.copy2(self.config.config_dir / "prometheus.yml", workdir / "prometheus.yml")
        shutil.copytree(self.config.config_dir / "rules", workdir / "rules")
        (workdir / "targets").mkdir()
        targets = [{"targets": list(self.config.scrape_targets), "labels": dict(self.config.target_labels)}]
        (workdir / "targets" / "triton.json").write_text(json.dumps(targets, indent=2))
        return workdir / "prometheus.yml"

    def _wait_ready(self) -> None:
        assert self._process is not None
        deadline = time.monotonic() + self.config.startup_timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise MonitoringError(
                    f"prometheus exited with code {self._process.returncode}:\n{self.log_tail()}"
                )
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as response:  # noqa: S310
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.1)
        raise MonitoringError(f"prometheus was not ready after {self.config.startup_timeout_s:.0f} s")
