"""The GPU benchmark against a running server (``--url``), without a server: its addresses, the refusal
that names what the server lacks, the repository it serves, and the report's lines saying which server
and backends were measured."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from loadtest.bench.gpu.plan import GPU, measured_models, served_clones
from loadtest.bench.gpu.report import write_gpu_report
from loadtest.bench.gpu.server import COMPOSE_BENCH, LOCAL_LABEL, WRITE_REPOSITORY, refusal, server_urls
from loadtest.bench.run import main
from tritonrepo.configs import parse_config

ROOT = Path(__file__).resolve().parents[2]


def test_the_url_gives_the_grpc_endpoint_on_the_same_host_unless_one_is_given() -> None:
    urls = server_urls("http://tritonserver-bench:8000")
    assert (urls.http_url, urls.grpc_url) == ("tritonserver-bench:8000", "tritonserver-bench:8001")
    urls = server_urls("127.0.0.1:18000/", "grpc://127.0.0.1:18001")
    assert (urls.http_url, urls.grpc_url) == ("127.0.0.1:18000", "127.0.0.1:18001")
    assert server_urls("http://gpu-host").http_url == "gpu-host:8000"


@pytest.mark.parametrize(
    "url,message",
    [
        ("https://host:8000", "TLS is not supported"),
        ("http://host:8000/v2/models", "no path"),
        ("http://host:port", "invalid port"),
        ("grpc://host:8001", "--url: .* says grpc"),
    ],
)
def test_a_url_that_is_not_a_servers_root_is_refused_with_an_example(url: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        server_urls(url)


def test_the_refusal_names_each_missing_model_and_what_serves_them() -> None:
    text = refusal("gpu-host:8000", ["text_embedder__nobatch", "text_embedder__x2"])
    assert "http://gpu-host:8000 does not serve 2 model(s)" in text
    assert "text_embedder__nobatch, text_embedder__x2" in text
    assert COMPOSE_BENCH in text and WRITE_REPOSITORY in text
    assert COMPOSE_BENCH.endswith("run --rm bench-gpu") and "--write-repository" in WRITE_REPOSITORY


def test_a_url_where_no_server_answers_exits_1_before_anything_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as sock:  # a port nothing listens on once closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    argv = ["--mode", "gpu", "--dry-run", "--url", f"http://127.0.0.1:{port}", "--output", str(tmp_path)]
    assert main(argv) == 1
    assert f"no tritonserver answers at http://127.0.0.1:{port}" in capsys.readouterr().err
    assert not list(tmp_path.iterdir()), "nothing measured, nothing written"


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--grpc-url", "h:8001"], "--grpc-url goes with --url"),
        (["--records", "build/precision"], "--records goes with --url or --write-repository"),
        (["--write-repository", "x", "--url", "http://h:8000"], "--write-repository writes"),
        (["--url", "ftp://h"], "--url: unsupported URL scheme"),
    ],
)
def test_url_options_out_of_place_are_usage_errors(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--mode", "gpu", *argv]) == 2
    assert message in capsys.readouterr().err
    assert main(["--mode", "quick", "--url", "http://h:8000"]) == 2


def test_write_repository_writes_the_plans_variants_with_native_configs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "bench_repository"
    records = tmp_path / "no-records"  # no record: fp32 is served, no fp32 clone
    assert main(["--mode", "gpu", "--write-repository", str(target), "--records", str(records)]) == 0
    _, arms = served_clones(GPU, ROOT / "model_repository", records)
    for model in measured_models(arms):
        assert (target / model / "config.pbtxt").is_file(), model
    encoder = parse_config(target / "minilm_onnx__x2" / "config.pbtxt")
    assert encoder.platform == "onnxruntime_onnx" and [g.count for g in encoder.instance_group] == [2]
    assert parse_config(target / "minilm_torchscript" / "config.pbtxt").platform == "pytorch_libtorch"
    assert f"models into {target}" in capsys.readouterr().out


def _results(tmp_path: Path, **fields: object) -> Path:
    results = {
        "run_id": "r",
        "command": "python -m loadtest.bench --mode gpu",
        "plan": {"kind": "KIND_GPU"},
        "served": {},
        "errors": [],
        **fields,
    }
    (tmp_path / "results.json").write_text(json.dumps(results))
    return write_gpu_report(tmp_path)


def test_the_report_of_a_url_run_names_the_server_its_version_and_each_models_backend(tmp_path: Path) -> None:
    server = {
        "kind": "url",
        "label": "the running tritonserver at http://tritonserver-bench:8000",
        "url": "http://tritonserver-bench:8000",
        "version": "2.51.0",
        "models": {"minilm_onnx": "onnxruntime_onnx", "minilm_torchscript": "pytorch_libtorch"},
    }
    skipped = "skipped: this run measures the server at --url"
    report = _results(
        tmp_path, server=server, export={"records": "build/precision"}, analyzer_skipped=skipped
    ).read_text()
    assert "URL `http://tritonserver-bench:8000`, tritonserver 2.51.0." in report
    assert (
        "| minilm_onnx | onnxruntime_onnx |" in report
        and "| minilm_torchscript | pytorch_libtorch |" in report
    )
    assert "CPU time is not sampled" in report
    assert "No export in this run" in report and "`build/precision`" in report
    assert "Model Analyzer skipped: this run measures the server at --url" in report
    assert "nvidia-pytriton" not in report


def test_the_report_of_a_local_run_says_its_figures_do_not_describe_a_compose_deployment(
    tmp_path: Path,
) -> None:
    server = {
        "kind": "local",
        "label": LOCAL_LABEL,
        "url": "http://127.0.0.1:8000",
        "version": "2.51.0",
        "models": {"minilm_onnx": "python"},
    }
    export = {"command": "python -m export --served-on gpu", "seconds": 3.0, "log": "export.log"}
    report = _results(tmp_path, server=server, export=export).read_text()
    assert "the local tritonserver from the nvidia-pytriton wheel" in report
    assert "its batching and instance figures do not describe a compose deployment" in report
    assert "| minilm_onnx | python |" in report and "## Export on this device" in report
    assert "CPU time is not sampled" not in report
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["server"]["label"] == LOCAL_LABEL


def _failed_torchscript_export(records: Path) -> Path:
    """Records where the last export of the TorchScript route's encoder wrote no servable file."""
    from export.precision.records import RECORD_FORMAT

    records.mkdir()
    failure = {"format": RECORD_FORMAT, "model": "minilm_torchscript", "served": None, "candidates": []}
    failure["failure"] = "torch.jit.trace failed"
    (records / "minilm_torchscript.json").write_text(json.dumps(failure))
    return records


def test_a_route_whose_export_failed_loses_only_its_arm_and_says_why(tmp_path: Path) -> None:
    from loadtest.bench.gpu.plan import lost_routes

    records = _failed_torchscript_export(tmp_path / "records")
    served, arms = served_clones(GPU, ROOT / "model_repository", records)
    assert list(arms["precision"]) == ["onnx: fp32 (served)"], "the TorchScript arm is left out"
    assert arms["batching"] and arms["instances"], "every other experiment keeps its arms"
    assert "text_embedder_torchscript" not in {variant.model for variant in served}
    (why,) = lost_routes(ROOT / "model_repository", records).values()
    assert "minilm_torchscript: the last export wrote no servable file (torch.jit.trace failed)" in why


def test_a_route_the_server_did_not_load_loses_only_its_arm(tmp_path: Path) -> None:
    from loadtest.bench.gpu.plan import lost_routes

    records, unavailable = tmp_path / "no-records", ["text_embedder_torchscript"]
    _, arms = served_clones(GPU, ROOT / "model_repository", records, unavailable)
    assert list(arms["precision"]) == ["onnx: fp32 (served)"]
    assert lost_routes(ROOT / "model_repository", records, unavailable) == {
        "torchscript": "the server did not load text_embedder_torchscript (its log says why)"
    }
    report = _results(tmp_path, lost_arms={"torchscript": "the server did not load it"}).read_text()
    assert "The torchscript route's arm is left out: the server did not load it" in report


def test_a_grpc_url_of_another_protocol_is_refused_naming_its_option() -> None:
    with pytest.raises(ValueError, match="--grpc-url: .* says http"):
        server_urls("http://gpu-host:8000", "http://gpu-host:8001")
