"""A short perf_analyzer sweep on l2_normalize over HTTP and gRPC, parsed into rows (throughput, p99)."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadtest.experiments.served import PerfSession
from loadtest.load.perf import PerfSettings, PerfTarget, parse_csv, run_perf
from loadtest.load.perf_inputs import write_input_data
from tritonlocal import LocalTritonServer

ROOT = Path(__file__).resolve().parents[2]
SHORT = PerfSettings(measurement_interval_ms=500, max_trials=4, stability_percent=60, timeout_s=60)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_short_sweep_writes_a_csv_the_parser_reads(
    triton_server: LocalTritonServer, tmp_path: Path, protocol: str
) -> None:
    data = write_input_data("l2_normalize", ROOT / "model_repository", tmp_path / "in.json", entries=8)
    url = triton_server.grpc_url if protocol == "grpc" else triton_server.http_url
    for concurrency in (1, 4):
        target = PerfTarget(
            model="l2_normalize", url=url, protocol=protocol, concurrency=concurrency, inputs=data
        )
        point = run_perf(target, out_dir=tmp_path, settings=SHORT)
        log = (tmp_path / f"l2_normalize_{protocol}_c{concurrency}.log").read_text()
        assert point.ok, log
        assert point.throughput_per_s > 0 and point.p99_ms and point.p99_ms > 0
        if point.stable:  # on a busy machine the windows may disagree: then there is no CSV, only windows
            rows = parse_csv(tmp_path / point.csv_file)
            assert rows[0]["Concurrency"] == concurrency
            assert rows[0]["Inferences/Second"] > 0 and rows[0]["p99 latency"] > 0


def test_a_measured_point_carries_the_servers_batch_statistics(
    triton_server: LocalTritonServer, tmp_path: Path
) -> None:
    session = PerfSession(
        http_url=triton_server.http_url,
        grpc_url=triton_server.grpc_url,
        repository=ROOT / "model_repository",
        out_dir=tmp_path,
        settings=SHORT,
        server_pid=triton_server.pid,
    )
    point = session.measure("test", "default", "l2_normalize", protocol="grpc", concurrency=4)
    assert point.perf.ok
    stats = point.server["l2_normalize"]
    assert stats["failures"] == 0 and stats["executions"] > 0
    assert stats["inferences"] >= stats["executions"] and stats["average_batch_size"] >= 1.0
    assert point.server_cpu_cores is not None and point.server_cpu_cores > 0
    # the CPU by process: the model's stub under the model's name, the server under its own
    assert point.cpu_s_by_process["l2_normalize"] > 0 and "tritonserver" in point.cpu_s_by_process
    assert point.machine_cpu_s is not None
    assert point.machine_cpu_s >= 0.9 * sum(point.cpu_s_by_process.values())
