"""`python -m clients.batch` on real images and texts: records, errors, exit codes, and resuming."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import skimage

from tritonlocal import LocalTritonServer

ROOT = Path(__file__).resolve().parents[2]
IMAGES = Path(skimage.__file__).parent / "data"
REAL = ["chelsea.png", "coffee.png", "astronaut.png", "rocket.jpg", "motorcycle_left.png", "horse.png"]


def batch_command(*args: str | Path) -> list[str]:
    return [sys.executable, "-m", "clients.batch", *map(str, args)]


def batch(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        batch_command(*args), cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
    )


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture()
def folder(tmp_path: Path) -> Path:
    """Real photos from scikit-image, plus one file that is not an image."""
    images = tmp_path / "images"
    images.mkdir()
    for name in REAL:
        shutil.copy(IMAGES / name, images / name)
    (images / "broken.jpg").write_bytes(b"\xff\xd8\xff truncated, not a JPEG")
    return images


@pytest.fixture(scope="module")
def url(triton_server: LocalTritonServer) -> str:
    return f"grpc://{triton_server.grpc_url}"


def test_a_folder_job_records_every_image_and_exits_1_for_the_corrupt_one(
    folder: Path, tmp_path: Path, url: str
) -> None:
    output = tmp_path / "out.jsonl"
    run = batch("--images", folder, "--output", output, "--url", url, "--in-flight", "4", "--top-k", "3")
    assert run.returncode == 1, run.stderr
    by_name = {Path(r["id"]).name: r for r in records(output)}
    assert sorted(by_name) == sorted([*REAL, "broken.jpg"])
    assert by_name["coffee.png"]["result"]["labels"][0] == "espresso"
    assert len(by_name["chelsea.png"]["result"]["labels"]) == 3
    error = by_name["broken.jpg"]["error"]
    assert error["type"] == "InvalidInputError" and "IMAGE_BYTES: cannot decode image" in error["message"]
    assert "inputs: 7  processed: 7 (6 ok, 1 errors)" in run.stdout
    assert "server batching during the job" in run.stdout and "image_preprocess" in run.stdout
    assert "progress: 7/7" in run.stderr  # not a terminal: plain progress lines


def test_an_interrupted_job_resumes_without_processing_anything_twice(
    folder: Path, tmp_path: Path, url: str
) -> None:
    for copy in range(4):  # more work, so that the kill below lands mid-run
        for name in REAL:
            shutil.copy(folder / name, folder / f"copy{copy}_{name}")
    total = len(REAL) * 5 + 1
    output = tmp_path / "out.jsonl"

    first = batch("--images", folder, "--output", output, "--url", url, "--limit", "5", "--json")
    assert first.returncode == 1  # inputs remain
    summary = json.loads(first.stdout)
    counts = {key: summary[key] for key in ("total", "skipped", "processed", "ok", "errors", "remaining")}
    # sorted by path, broken.jpg is among the first five
    assert counts == {
        "total": total,
        "skipped": 0,
        "processed": 5,
        "ok": 4,
        "errors": 1,
        "remaining": total - 5,
    }

    killed = subprocess.Popen(
        batch_command("--images", folder, "--output", output, "--url", url, "--in-flight", "1"),
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while (
            time.monotonic() < deadline
            and len(output.read_bytes().splitlines()) < 8
            and killed.poll() is None
        ):
            time.sleep(0.01)
    finally:
        killed.kill()
        killed.wait()
    # Killed mid-run, not finished before the kill: the resume below has work left to do.
    assert killed.returncode == -signal.SIGKILL, f"the job ended by itself (exit {killed.returncode})"
    written_at_kill = len(output.read_bytes().splitlines())
    assert 8 <= written_at_kill < total, written_at_kill
    with output.open("a", encoding="utf-8") as f:
        f.write('{"id": "half a record written when the power went o')  # a torn last line

    last = batch("--images", folder, "--output", output, "--url", url, "--json")
    assert last.returncode == 1  # broken.jpg still fails
    summary = json.loads(last.stdout)
    assert summary["skipped"] + summary["processed"] == total and summary["remaining"] == 0
    assert summary["skipped"] >= 5 and summary["processed"] > 1  # more than broken.jpg was left

    final = records(output)  # every line parses: the torn line was cut off
    results = Counter(r["id"] for r in final if "result" in r)
    assert len(results) == total - 1 and set(results.values()) == {1}, "an image was classified twice"
    assert all(Path(r["id"]).name == "broken.jpg" for r in final if "error" in r)

    again = batch("--images", folder, "--output", output, "--url", url, "--json")
    assert json.loads(again.stdout)["processed"] == 1  # only the failed input is tried again


def test_a_text_job_writes_embeddings_and_exits_0(tmp_path: Path, triton_server: LocalTritonServer) -> None:
    lines = tmp_path / "lines.txt"
    lines.write_text("a cat on the mat\nthe stock market fell\n\ncoffee in the morning\n", encoding="utf-8")
    output = tmp_path / "embeddings.jsonl"
    run = batch(
        "--texts", lines, "--output", output, "--url", f"http://{triton_server.http_url}", "--no-progress"
    )
    assert run.returncode == 0, run.stderr
    # Records are written as answers arrive (several in flight), so in any order; ids say which line.
    written = sorted(records(output), key=lambda r: int(r["id"].rsplit(":", 1)[1]))
    assert [r["input"] for r in written] == [
        "a cat on the mat",
        "the stock market fell",
        "coffee in the morning",
    ]
    assert [r["id"] for r in written] == [f"{lines}:1", f"{lines}:2", f"{lines}:4"]
    assert all(len(r["result"]["embedding"]) == 384 for r in written)
    assert run.stderr == ""


def test_a_job_against_no_server_exits_3_and_writes_nothing(folder: Path, tmp_path: Path) -> None:
    output = tmp_path / "out.jsonl"
    run = batch("--images", folder, "--output", output, "--url", "http://127.0.0.1:1", "--attempts", "2")
    assert run.returncode == 3 and "unreachable" in run.stderr
    assert not output.exists() or output.read_text() == ""
