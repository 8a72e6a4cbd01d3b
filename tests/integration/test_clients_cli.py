"""`python -m clients` as people and scripts run it: real subprocesses against the real server."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import skimage

from tritonlocal import LocalTritonServer

ROOT = Path(__file__).resolve().parents[2]
IMAGES = Path(skimage.__file__).parent / "data"


def cli(*args: str | Path, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "clients", *map(str, args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


@pytest.fixture(scope="module")
def http(triton_server: LocalTritonServer) -> list[str]:
    return ["--url", f"http://{triton_server.http_url}"]


@pytest.fixture(scope="module")
def grpc(triton_server: LocalTritonServer) -> list[str]:
    return ["--url", f"grpc://{triton_server.grpc_url}"]


def test_health_exits_0_and_reports_live_and_ready(http: list[str]) -> None:
    run = cli("health", *http, "--json")
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) | {"url": None} == {"url": None, "live": True, "ready": True}
    assert "live, ready" in cli(*http, "health").stdout


def test_health_of_a_server_that_is_not_there_exits_3(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    run = cli("health", "--url", f"grpc://127.0.0.1:{port}", "--attempts", "2", "--json")
    assert run.returncode == 3
    assert json.loads(run.stdout)["live"] is False


def test_models_lists_the_repository_with_states(grpc: list[str]) -> None:
    run = cli("models", *grpc, "--json")
    assert run.returncode == 0, run.stderr
    states = {m["name"]: m["state"] for m in json.loads(run.stdout)}
    assert states["image_classifier"] == "READY" and states["text_embedder"] == "READY"
    table = cli("models", *grpc).stdout
    assert table.splitlines()[0].split() == ["model", "version", "state", "reason"]


def test_classify_prints_a_table_with_the_top_label(grpc: list[str]) -> None:
    run = cli("classify", IMAGES / "chelsea.png", IMAGES / "coffee.png", *grpc, "--top-k", "3")
    assert run.returncode == 0, run.stderr
    coffee_row = next(line for line in run.stdout.splitlines() if "coffee.png" in line)
    assert "espresso" in coffee_row
    assert "cat" in next(line for line in run.stdout.splitlines() if "chelsea.png" in line)


def test_classify_with_a_corrupt_image_exits_1_and_reports_it_in_json(
    http: list[str], tmp_path: Path
) -> None:
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(b"not an image at all")
    run = cli("classify", IMAGES / "chelsea.png", broken, *http, "--json", "--batch")
    assert run.returncode == 1
    good, bad = json.loads(run.stdout)
    assert any("cat" in label for label in good["labels"]) and len(good["scores"]) == 5
    assert bad["input"] == str(broken)
    assert bad["error"]["type"] == "InvalidInputError" and bad["error"]["index"] == 1
    assert "IMAGE_BYTES: cannot decode image" in bad["error"]["message"]


def test_embed_reads_a_file_of_lines_and_prints_vectors(http: list[str], tmp_path: Path) -> None:
    lines = tmp_path / "lines.txt"
    lines.write_text("a cat on a mat\n\nthe stock market\n", encoding="utf-8")
    run = cli("embed", "--file", lines, "one more", *http, "--json")
    assert run.returncode == 0, run.stderr
    records = json.loads(run.stdout)
    assert [r["input"] for r in records] == ["one more", "a cat on a mat", "the stock market"]
    assert all(len(r["embedding"]) == 384 for r in records)
    table = cli("embed", "hello", *http).stdout
    assert "384" in table and "1.000" in table


def test_stats_reports_batching_and_timing_per_model(http: list[str]) -> None:
    cli("classify", IMAGES / "coffee.png", *http)
    run = cli("stats", "image_preprocess", *http, "--json")
    assert run.returncode == 0, run.stderr
    (stats,) = json.loads(run.stdout)
    assert stats["model"] == "image_preprocess" and stats["inferences"] >= 1
    assert {"average_batch_size", "queue_us", "compute_infer_us", "batch_executions"} <= stats.keys()
    table = cli("stats", *http).stdout
    assert "avg batch" in table and "executions per batch size" in table and "l2_normalize" in table


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["classify", "no/such/image.png"], 2, "no such image file"),
        (["embed"], 2, "give texts as arguments or --file"),
        (["health", "--header", "no-equals-sign"], 2, "--header must be KEY=VALUE"),
        (["health", "--url", "https://127.0.0.1:1"], 2, "TLS is not supported"),
        (["frobnicate"], 2, "invalid choice"),
        (["stats", "no_such_model"], 1, "no_such_model"),
        (["embed", "x", "--model", "l2_normalize"], 1, "single BYTES input"),
    ],
)
def test_errors_exit_with_documented_codes(http: list[str], args: list[str], code: int, message: str) -> None:
    run = cli(*http, *args)  # options after the command win over those before it
    assert run.returncode == code, run.stderr
    assert message in run.stderr


def test_infer_sends_a_photographs_bytes_and_prints_each_output_by_name(http: list[str]) -> None:
    run = cli(
        "infer", "image_classifier", "--input", f"IMAGE_BYTES=@{IMAGES / 'chelsea.png'}", *http, "--json"
    )
    assert run.returncode == 0, run.stderr
    outputs = json.loads(run.stdout)
    assert list(outputs) == ["SCORES", "CLASS_IDS", "LABELS"]  # the model's order
    assert outputs["LABELS"]["datatype"] == "BYTES" and outputs["LABELS"]["shape"] == [1, 5]
    assert {"tabby, tabby cat", "tiger cat", "Egyptian cat"} & set(outputs["LABELS"]["data"][0][:2])
    text = cli("infer", "image_classifier", "--input", f"IMAGE_BYTES=@{IMAGES / 'coffee.png'}", *http)
    assert text.returncode == 0, text.stderr
    assert "LABELS (BYTES, shape [1, 5]):" in text.stdout and "espresso" in text.stdout


def test_infer_sends_a_json_null_as_nan_which_the_model_refuses_by_name(
    http: list[str], tmp_path: Path
) -> None:
    rows = [[None] + [1.0] * 15, [2.0] * 16]
    (tmp_path / "vectors.json").write_text(json.dumps(rows))
    run = cli("infer", "l2_normalize", "--input", f"VECTOR={tmp_path / 'vectors.json'}", *http)
    assert run.returncode == 1, run.stdout
    assert "VECTOR: every value must be finite (got NaN or infinity)" in run.stderr, run.stderr
    (tmp_path / "good.json").write_text(json.dumps(rows[1:]))
    good = cli("infer", "l2_normalize", "--input", f"VECTOR={tmp_path / 'good.json'}", *http, "--json")
    assert good.returncode == 0 and json.loads(good.stdout)["NORM"]["data"] == [[8.0]], good.stderr
