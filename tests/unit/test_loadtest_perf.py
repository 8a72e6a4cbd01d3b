"""perf_analyzer command building and result parsing, on recorded output (no server, no binary)."""

from __future__ import annotations

import types
from pathlib import Path

import pytest

from loadtest.load import perf
from loadtest.load.perf import PerfPoint, PerfSettings, PerfTarget, parse_csv, parse_passes
from loadtest.load.perf_inputs import InputData

RECORDED_CSV = (
    "Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,Server Compute Input,"
    "Server Compute Infer,Server Compute Output,Client Recv,p50 latency,p90 latency,p95 latency,p99 latency\n"
    "4,57.851,99,34108,2,152,32573,1222,0,63996,107527,116182,138326\n"
)
RECORDED_UNSTABLE = """Request concurrency: 8
  Pass [1] throughput: 74.9137 infer/sec. p99 latency: 228643 usec
  Pass [2] throughput: 100.863 infer/sec. p99 latency: 305973 usec
  Pass [3] throughput: 62.6269 infer/sec. p99 latency: 244277 usec
Failed to obtain stable measurement within 3 measurement windows for concurrency 8.
"""


def test_the_csv_parser_reads_throughput_and_percentiles(tmp_path: Path) -> None:
    path = tmp_path / "run.csv"
    path.write_text(RECORDED_CSV)
    rows = parse_csv(path)
    assert len(rows) == 1
    assert rows[0]["Inferences/Second"] == pytest.approx(57.851)
    assert rows[0]["p99 latency"] == 138326


def test_a_stable_row_becomes_a_point_in_milliseconds(tmp_path: Path) -> None:
    path = tmp_path / "run.csv"
    path.write_text(RECORDED_CSV)
    point = perf._from_row(
        PerfPoint(model="m", protocol="grpc", concurrency=4), parse_csv(path)[0], path, windows=3
    )
    assert point.stable and point.ok
    assert point.p99_ms == pytest.approx(138.326)
    assert point.p50_ms == pytest.approx(63.996)
    assert point.server_queue_ms == pytest.approx(0.002)
    assert point.server_compute_ms == pytest.approx((152 + 32573 + 1222) / 1000)


def test_an_unstable_run_keeps_the_median_of_its_windows_and_says_so() -> None:
    assert parse_passes(RECORDED_UNSTABLE) == [(74.9137, 228643.0), (100.863, 305973.0), (62.6269, 244277.0)]
    point = perf._from_passes(PerfPoint(model="m", protocol="grpc", concurrency=8), RECORDED_UNSTABLE)
    assert not point.stable
    assert point.throughput_per_s == pytest.approx(74.9137)
    assert point.p99_ms == pytest.approx(244.277)
    assert point.error is None and point.windows == 3


def test_a_failed_run_reports_the_error_line() -> None:
    output = "Usage: perf_analyzer\nerror: Failed to init manager inputs: bad shape\nmore text\n"
    point = perf._from_passes(PerfPoint(model="m", protocol="http", concurrency=1), output)
    assert not point.ok
    assert point.error == "error: Failed to init manager inputs: bad shape"


def test_the_command_is_bounded_and_asks_for_the_99th_percentile(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(perf, "locate", lambda: Path("perf_analyzer"))
    inputs = InputData(path=Path("in.json"), entries=16, kind="text", shape_args=["--shape=X:16"])
    target = PerfTarget(
        model="text_embedder", url="127.0.0.1:8001", protocol="grpc", concurrency=32, inputs=inputs
    )
    settings = PerfSettings(measurement_interval_ms=1500, max_trials=4, stability_percent=25)
    command = perf.perf_command(target, csv_path=Path("out.csv"), settings=settings)
    for expected in (
        "--percentile=99",
        "--concurrency-range=32:32",
        "--measurement-interval=1500",
        "--max-trials=4",
        "--stability-percentage=25",
        "--input-data=in.json",
        "--shape=X:16",
    ):
        assert expected in command
    assert command[command.index("-f") + 1] == "out.csv"
    assert command[command.index("-i") + 1] == "grpc"
    assert target.stem == "text_embedder_grpc_c32"
    assert "-H" not in command, "no key, no header"


@pytest.mark.parametrize(
    ("protocol", "headers"),
    [
        ("http", ["triton-admin-key:k1"]),
        # Triton's gRPC endpoint reads a restricted protocol's key under its prefix (perf_analyzer runs
        # against a restricted server over gRPC in tests/images/test_bench_image.py).
        ("grpc", ["triton-admin-key:k1", "triton-grpc-protocol-triton-admin-key:k1"]),
    ],
)
def test_the_admin_key_is_sent_as_the_header_of_each_protocol(
    protocol: str, headers: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(perf, "locate", lambda: Path("perf_analyzer"))
    inputs = InputData(path=Path("in.json"), entries=16, kind="text", shape_args=[])
    target = PerfTarget(model="m", url="h:1", protocol=protocol, concurrency=1, inputs=inputs, admin_key="k1")
    command = perf.perf_command(target, csv_path=Path("out.csv"), settings=PerfSettings())
    assert [command[i + 1] for i, arg in enumerate(command) if arg == "-H"] == headers


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"measurement_interval_ms": 10}, "measurement_interval_ms"),
        ({"max_trials": 2}, "max_trials"),
        ({"stability_percent": 0}, "stability_percent"),
    ],
)
def test_perf_settings_reject_values_that_cannot_measure(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PerfSettings(**kwargs)


@pytest.mark.parametrize(
    ("protocol", "concurrency", "message"),
    [("https", 1, "protocol must be one of"), ("grpc", 0, "concurrency must be at least 1")],
)
def test_a_target_perf_analyzer_cannot_measure_is_refused(
    protocol: str, concurrency: int, message: str
) -> None:
    inputs = InputData(path=Path("i"), entries=1, kind="text")
    with pytest.raises(ValueError, match=message):
        PerfTarget(model="m", url="u", protocol=protocol, concurrency=concurrency, inputs=inputs)


def test_each_run_of_a_target_gets_files_of_its_own_so_no_stale_csv_is_read(tmp_path: Path) -> None:
    first = perf.run_paths(tmp_path, "text_embedder_grpc_c32")
    assert [p.name for p in first] == ["text_embedder_grpc_c32.csv", "text_embedder_grpc_c32.log"]
    first[0].write_text(RECORDED_CSV)  # a stable first round
    first[1].write_text("")
    second = perf.run_paths(tmp_path, "text_embedder_grpc_c32")
    assert [p.name for p in second] == ["text_embedder_grpc_c32_run2.csv", "text_embedder_grpc_c32_run2.log"]
    second[1].write_text(RECORDED_UNSTABLE)  # an unstable second round writes its log and no CSV
    assert perf.run_paths(tmp_path, "text_embedder_grpc_c32")[0].name == "text_embedder_grpc_c32_run3.csv"


def test_an_unstable_round_is_not_read_from_the_previous_rounds_csv(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outputs = iter([(RECORDED_CSV, ""), (None, RECORDED_UNSTABLE)])  # (CSV written, console output)

    def fake_perf_analyzer(command: list[str], **_: object):
        csv_text, output = next(outputs)
        if csv_text is not None:
            Path(command[command.index("-f") + 1]).write_text(csv_text)
        return types.SimpleNamespace(stdout=output, stderr="", returncode=0)

    monkeypatch.setattr(perf.subprocess, "run", fake_perf_analyzer)
    monkeypatch.setattr(
        perf, "perf_command", lambda target, *, csv_path, settings: ["pa", "-f", str(csv_path)]
    )
    target = PerfTarget(
        model="text_embedder",
        url="127.0.0.1:1",
        protocol="grpc",
        concurrency=8,
        inputs=InputData(path=tmp_path / "in.json", entries=1, kind="text"),
    )
    settings = PerfSettings(measurement_interval_ms=500, max_trials=3, stability_percent=20, timeout_s=10)
    stable = perf.run_perf(target, out_dir=tmp_path, settings=settings)
    unstable = perf.run_perf(target, out_dir=tmp_path, settings=settings)
    assert stable.stable and stable.throughput_per_s == pytest.approx(57.851)
    assert not unstable.stable and unstable.throughput_per_s == pytest.approx(74.9137)
