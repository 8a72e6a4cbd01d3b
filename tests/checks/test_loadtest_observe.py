"""The process sampler: CPU by label (a stub by the model it serves) and the whole machine's CPU."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from loadtest.load.observe import ProcessSampler, triton_process_label
from loadtest.soak.run import process_rss_mb

BUSY = "import time\nend = time.monotonic() + 120\nwhile time.monotonic() < end: pass\n"
SLEEP = "import time\ntime.sleep(120)\n"
WORK_S = 0.5  # CPU seconds the busy process spends while sampled


def _start(arguments: list[str]) -> subprocess.Popen:
    return subprocess.Popen(arguments, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _wait_until(condition: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    """Poll ``condition`` until it holds; fail naming ``what`` after ``timeout_s`` (a generous bound)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what} after {timeout_s} s"
        time.sleep(0.01)


def _cpu_s(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def test_a_stub_is_labelled_by_the_model_it_serves_and_any_other_process_by_its_name(tmp_path: Path) -> None:
    # What Triton's Python backend starts: the stub binary, then <repository>/<model>/<version>/model.py.
    stub = tmp_path / "triton_python_backend_stub"
    stub.symlink_to(sys.executable)
    model_py = tmp_path / "repository" / "minilm_onnx" / "1" / "model.py"
    model_py.parent.mkdir(parents=True)
    model_py.write_text(SLEEP)
    processes = [_start([str(stub), str(model_py)]), _start([sys.executable, "-c", SLEEP])]
    try:
        _wait_until(
            lambda: all(len(psutil.Process(p.pid).cmdline()) >= 2 for p in processes), "both to start"
        )
        stub_process, other = (psutil.Process(p.pid) for p in processes)
        assert triton_process_label(stub_process) == "minilm_onnx"
        assert triton_process_label(other) == other.name() != "minilm_onnx"
    finally:
        for process in processes:
            process.kill()
            process.wait()


def test_the_sampler_splits_cpu_by_label_and_counts_the_whole_machine() -> None:
    busy, idle = _start([sys.executable, "-c", BUSY]), _start([sys.executable, "-c", SLEEP])
    labels = {busy.pid: "busy", idle.pid: "idle"}
    try:
        _wait_until(lambda: _cpu_s(busy.pid) > 0.05, "the busy process to spin")
        sampler = ProcessSampler(
            select=lambda: [psutil.Process(busy.pid), psutil.Process(idle.pid)],
            label=lambda process: labels[process.pid],
            interval_s=0.1,
        )
        with sampler:
            start = _cpu_s(busy.pid)
            # However fast or busy the machine: until the spinning process has used half a CPU second.
            _wait_until(lambda: _cpu_s(busy.pid) - start >= WORK_S, f"{WORK_S} s of CPU in the busy process")
    finally:
        for process in (busy, idle):
            process.kill()
            process.wait()
    usage = sampler.usage
    assert set(usage.cpu_s_by_label) == {"busy", "idle"}
    # all the CPU the spinning process used while sampled, and no more than one core can give
    assert WORK_S <= usage.cpu_s_by_label["busy"] <= 1.1 * usage.wall_s
    assert usage.cpu_s_by_label["idle"] < 0.1 * usage.cpu_s_by_label["busy"]
    assert usage.cpu_s == sum(usage.cpu_s_by_label.values())
    # the machine did at least what the sampled processes did, and no more than every core can
    assert usage.machine_busy_s is not None
    assert 0.9 * usage.cpu_s <= usage.machine_busy_s <= 1.1 * (os.cpu_count() or 1) * usage.wall_s


def test_the_soak_and_the_benchmark_read_resident_memory_in_the_same_mb() -> None:
    """300e6 bytes held are 300 MB (286 MiB): both samplers say so, and agree with each other."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time\nblock = b'x' * 300_000_000\nprint('held', flush=True)\n" + SLEEP,
        ],
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == b"held"
        with ProcessSampler(select=lambda: [psutil.Process(holder.pid)], interval_s=60) as sampler:
            soak = process_rss_mb(holder.pid)["tritonserver"]  # the soak names the root process so
    finally:
        holder.kill()
        holder.wait()
    assert soak >= 300 and sampler.usage.peak_rss_mb >= 300
    assert sampler.usage.peak_rss_mb == pytest.approx(soak, rel=0.01)
