"""Experiment 9: Triton against the simplest alternative, measured side by side in one run.

The alternative (:mod:`loadtest.load.minimal_server`) is one process answering one request at a time
with the same exported encoder file and runtime the text ensemble serves, and the same tokenizer. One
closed-loop JSON load generator (:mod:`loadtest.load.json_load`) drives both at each concurrency,
alternating Triton, alternative, Triton, alternative... for ``rounds`` rounds, so background load hits
them alike and the report can take each side's median and show the ratio round by round.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import samples
from loadtest.load.json_load import run_json_load
from modelrepo import exported_file, load_repository

READY_TIMEOUT_S = 120.0


def served_file(repository: Path, encoder: str) -> Path:
    entry = load_repository(repository)[encoder]
    path = exported_file(entry.path, entry.config)
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing; run `python -m export` first")
    return path


def tokenizer_file(repository: Path) -> Path:
    config = load_repository(repository)["text_tokenizer"].config
    return Path(repository) / "text_tokenizer" / "1" / config.parameters["tokenizer_file"].string_value


@contextlib.contextmanager
def running(
    *, encoder_file: Path, tokenizer_file: Path, model: str, threads: int, log_path: Path
) -> Iterator[str]:
    """The simplest alternative as its own process on a free port; its base URL. Stopped on exit
    (its whole process group), also when the body raises."""
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "loadtest.load.minimal_server",
                f"--model={encoder_file}",
                f"--tokenizer={tokenizer_file}",
                f"--name={model}",
                f"--threads={threads}",
                "--port=0",
            ],
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            start_new_session=True,
        )
        try:
            yield _wait_ready(process)
        finally:
            with contextlib.suppress(ProcessLookupError):  # it may have exited on its own
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def compare(
    *,
    triton_http_url: str,
    model: str,
    encoder_file: Path,
    tokenizer_file: Path,
    threads: int,
    concurrencies: list[int],
    requests: int,
    rounds: int,
    log_path: Path,
) -> list[dict]:
    texts = samples.shuffled_sentences(len(samples.sentences()), seed=11)
    alternative = running(
        encoder_file=encoder_file,
        tokenizer_file=tokenizer_file,
        model=model,
        threads=threads,
        log_path=log_path,
    )
    with alternative as url:
        arms = {
            "Triton (text_embedder)": f"http://{triton_http_url}/v2/models/{model}/infer",
            "one process, one request at a time": f"{url}/v2/models/{model}/infer",
        }
        results = []
        for concurrency in concurrencies:
            for round_ in range(rounds):
                for label, endpoint in arms.items():
                    outcome = run_json_load(
                        endpoint, texts, label=label, concurrency=concurrency, requests=requests
                    )
                    results.append(
                        asdict(outcome) | {"requests_per_s": outcome.requests_per_s, "round": round_}
                    )
        return results


def _wait_ready(process: subprocess.Popen) -> str:
    assert process.stdout is not None
    line = process.stdout.readline()  # "listening on http://127.0.0.1:PORT", printed once bound
    if not line.startswith("listening on "):
        raise RuntimeError(f"the minimal server did not start (exit code {process.poll()}); see its log")
    url = line.split()[-1]
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/v2/health/ready", timeout=2) as response:
                if response.status == 200:
                    return url
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"the minimal server at {url} was not ready within {READY_TIMEOUT_S:.0f} s")
