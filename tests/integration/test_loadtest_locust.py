"""The Locust scenarios run headless against the real server over HTTP and gRPC, with no failures."""

from __future__ import annotations

from pathlib import Path

from loadtest.load.locust_run import LocustRun, run_locust
from tritonlocal import LocalTritonServer

MODELS = ("image_classifier", "text_embedder")


def test_http_and_grpc_users_send_real_requests_without_failures(
    triton_server: LocalTritonServer, tmp_path: Path
) -> None:
    run = LocustRun(
        http_url=triton_server.http_url, grpc_url=triton_server.grpc_url, users=4, spawn_rate=4, run_time_s=10
    )
    result = run_locust(run, tmp_path, stem="both")
    assert result.returncode == 0, result.output_tail
    assert (tmp_path / "both_stats.csv").is_file() and (tmp_path / "both.html").is_file()
    for request_type in ("HTTP", "gRPC"):
        for model in MODELS:
            row = result.row(request_type, model)
            assert row is not None, f"no {request_type} {model} requests:\n{result.output_tail}"
            assert row.requests > 0
            assert row.failures == 0, (tmp_path / "both_failures.csv").read_text()
    assert result.aggregated is not None and result.aggregated.failures == 0


def test_a_load_shape_drives_a_grpc_only_run(triton_server: LocalTritonServer, tmp_path: Path) -> None:
    run = LocustRun(
        http_url=f"grpc://{triton_server.grpc_url}",
        users=4,
        spawn_rate=4,
        run_time_s=6,
        user_classes=("GrpcTritonUser",),
        shape="step",
        mix="text:1",
    )
    result = run_locust(run, tmp_path, stem="step")
    assert result.returncode == 0, result.output_tail
    assert "Shape test updating to 4 users" in (tmp_path / "step.log").read_text()
    row = result.row("gRPC", "text_embedder")
    assert row is not None and row.requests > 0 and row.failures == 0
    assert result.row("HTTP", "text_embedder") is None
