"""The GPU benchmark's plan against a running server (``python -m loadtest.bench --mode gpu --dry-run
--url URL``), as the compose profile bench runs it against tritonserver-bench: in an environment built from
exactly what the export image's bench target installs, with its PATH (no git), compose's admin key in
TRITON_ADMIN_KEY, and the checkout as its working folder (compose mounts it). Here the server is the real
local tritonserver, started by the test on the benchmark's repository in its derived (local) flavour, with
every restricted API behind the key as tritonserver-bench has them. The command exports nothing and starts
no tritonserver of its own; the report names the server it measured. A server without the clones, or
one whose model configs the run has no key for, is refused with what to run instead."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from loadtest.bench.gpu.plan import DRY_RUN, measured_models, served_clones
from loadtest.bench.gpu.server import COMPOSE_BENCH, config_restricted, not_ready
from loadtest.bench.run import main
from tritonlocal import LocalTritonServer, ServerConfig
from tritonlocal.image_envs import image_env
from tritonrepo.clones import Clone, build_repository
from tritonrepo.paths import PRECISION_RECORDS, REPOSITORY

# A cold build of the image's environment downloads and installs what the image installs: minutes, past the
# suite's 600 s per test on a busy machine (docs/measurements.md, "The image environments' cold builds").
pytestmark = pytest.mark.timeout(3600)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalTritonServer]:
    folder = tmp_path_factory.mktemp("bench-server")
    served, _ = served_clones(DRY_RUN, REPOSITORY, PRECISION_RECORDS)
    build_repository(REPOSITORY, folder / "repository", served, total_threads=os.cpu_count() or 1)
    config = ServerConfig(
        model_repository=folder / "repository",
        log_path=folder / "tritonserver.log",
        generate_admin_key=True,  # every restricted API behind the key, as tritonserver-bench
        startup_timeout_s=600,
    )
    with LocalTritonServer(config) as server:  # stopped on leaving, a failing test included
        yield server


@pytest.fixture(scope="module")
def url_run(
    bench_server: LocalTritonServer, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, dict, str]:
    bench = image_env("bench")
    output = tmp_path_factory.mktemp("gpu-url-bench")
    run_id = f"gpu-url-test-{os.getpid()}"
    url = f"http://{bench_server.http_url}"
    command = [
        *["python", "-m", "loadtest.bench", "--mode", "gpu", "--dry-run"],
        *["--url", url, "--grpc-url", bench_server.grpc_url, "--records", str(PRECISION_RECORDS)],
        *["--output", str(output), "--run-id", run_id],
    ]
    environment = bench.environment(TRITON_ADMIN_KEY=str(bench_server.admin_key))
    done = subprocess.run(
        command, cwd=ROOT, env=environment, capture_output=True, text=True, timeout=900, check=False
    )
    assert done.returncode == 0, f"{' '.join(command)} exited {done.returncode}:\n{done.stderr[-4000:]}"
    folder = output / run_id
    return folder, json.loads((folder / "results.json").read_text()), url


def test_the_url_run_names_the_server_and_the_backends_it_measured(url_run: tuple[Path, dict, str]) -> None:
    folder, results, url = url_run
    server = results["server"]
    assert server["kind"] == "url" and server["url"] == url
    assert server["version"] == "2.51.0", "from the server's /v2 metadata"
    # The local server runs the exported files in the Python backend; the server itself says so.
    assert server["models"]["minilm_onnx"] == "python" and server["models"]["text_embedder"] == "ensemble"
    assert server["models"]["minilm_onnx__nobatch"] == "python"
    report = (folder / "report.md").read_text()
    assert f"URL `{url}`, tritonserver 2.51.0." in report and "| minilm_onnx | python |" in report
    assert "CPU time is not sampled" in report
    assert results["errors"] == [], results["errors"]
    assert results["lost_arms"] == {}, "the TorchScript route is served too"


def test_the_image_without_git_records_the_commit_from_the_checkouts_files(
    url_run: tuple[Path, dict, str],
) -> None:
    _, results, _ = url_run
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True)
    assert results["git"] == {"commit": head.stdout.strip(), "dirty": None, "changed_files": None}


def test_the_url_run_measures_batching_on_and_off_against_that_server(
    url_run: tuple[Path, dict, str],
) -> None:
    _, results, _ = url_run
    served = results["served"]
    cells = {(p["arm"], p["perf"]["concurrency"]) for p in served["batching"]}
    assert cells == {(a, c) for a in ("batching on", "batching off") for c in DRY_RUN.batching_concurrency}
    assert all(p["perf"]["throughput_per_s"] > 0 for p in served["batching"])
    assert all(p["server_cpu_cores"] is None for p in served["batching"]), "not this run's process to sample"
    assert {p["arm"] for p in served["instances"]} == {"1 instance per device", "2 instances per device"}
    assert served["served_vs_inprocess"]["inprocess"], "the in-process half runs in the bench's process"
    assert any(o["label"] == "Triton (text_embedder)" for o in served["minimal"])


def test_the_url_run_splits_the_services_time_with_that_servers_statistics(
    url_run: tuple[Path, dict, str],
) -> None:
    folder, results, _ = url_run
    budgets = results["served"]["budget"]
    assert [(b["service"], b["in_flight"]) for b in budgets] == [("text_embedder", c) for c in (1, 4)]
    for budget in budgets:
        assert sum(p["ms"] for p in budget["parts"]) == pytest.approx(budget["mean_ms"])
        assert budget["parts"][-1]["kind"] == "not accounted for"
        timed = {"model code", "batching and tensors", "Python stub"}
        assert not any(p["kind"] in timed for p in budget["parts"]), "no timings from a --url server"
    assert "## Where the time goes" in (folder / "report.md").read_text()


def test_the_url_run_exports_nothing_and_skips_model_analyzer(url_run: tuple[Path, dict, str]) -> None:
    folder, results, _ = url_run
    assert results["export"] == {"records": str(PRECISION_RECORDS)} and "analyzer" not in results
    assert "Model Analyzer starts a tritonserver of its own" in results["analyzer_skipped"]
    report = (folder / "report.md").read_text()
    assert "Model Analyzer skipped" in report and "No export in this run" in report
    assert not (ROOT / "build" / "bench" / results["run_id"]).exists(), "no copy, no derived repository"


def test_a_server_without_the_variants_is_refused_naming_each_and_what_serves_them(
    bench_server: LocalTritonServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    build_repository(REPOSITORY, tmp_path / "plain", [Clone(model="text_embedder")], total_threads=1)
    config = ServerConfig(
        model_repository=tmp_path / "plain",
        log_path=tmp_path / "tritonserver.log",
        generate_admin_key=True,  # every restricted API behind the key, as the deployment's server
        startup_timeout_s=600,
    )
    with LocalTritonServer(config) as plain:
        url = f"http://{plain.http_url}"
        argv = ["--mode", "gpu", "--dry-run", "--url", url, "--grpc-url", plain.grpc_url]
        assert main([*argv, "--output", str(tmp_path / "reports")]) == 1
        error = capsys.readouterr().err
        assert f"the tritonserver at {url} does not serve" in error
        for missing in ("text_embedder__nobatch", "text_embedder__x1", "text_embedder__x2"):
            assert missing in error
        assert COMPOSE_BENCH in error and not (tmp_path / "reports").exists()
    _, arms = served_clones(DRY_RUN, REPOSITORY, PRECISION_RECORDS)
    assert not_ready(bench_server.http_url, measured_models(arms)) == []


def test_a_server_whose_model_configs_the_run_has_no_key_for_is_refused_naming_the_variable(
    bench_server: LocalTritonServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert config_restricted(bench_server.http_url, "text_embedder")
    assert not config_restricted(bench_server.http_url, "text_embedder", bench_server.admin_key)
    url = f"http://{bench_server.http_url}"
    argv = ["--mode", "gpu", "--dry-run", "--url", url, "--grpc-url", bench_server.grpc_url]
    for key in (None, "not-the-key"):
        if key is None:
            monkeypatch.delenv("TRITON_ADMIN_KEY", raising=False)
        else:
            monkeypatch.setenv("TRITON_ADMIN_KEY", key)
        assert main([*argv, "--records", str(PRECISION_RECORDS), "--output", str(tmp_path / "r")]) == 1
        assert "set TRITON_ADMIN_KEY to the server's key" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()
