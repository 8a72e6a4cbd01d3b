"""The `minimal` experiment: Triton against the simplest alternative, measured side by side in one run.

The alternative (:mod:`loadtest.baselines.minimal_server`) answers one request at a time per process with the
same exported encoder file and runtime the text ensemble serves, and the same tokenizer; it is deployed
as one process and as one worker process per core sharing a port (as a user would deploy it behind a
pre-fork server). One closed-loop JSON load generator (:mod:`loadtest.load.json_load`) drives every arm
at each concurrency, alternating Triton, one process, workers, Triton... for ``rounds`` rounds, so
background load hits them alike and the report can take each arm's median and show the ratio round by
round.
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

READY_TIMEOUT_S = 120.0


def text_options(*, encoder_file: Path, tokenizer_file: Path, model: str, threads: int) -> list[str]:
    """The alternative's options for the text pipeline: the exported encoder file and its tokenizer."""
    return [
        f"--model={encoder_file}",
        f"--tokenizer={tokenizer_file}",
        f"--name={model}",
        f"--threads={threads}",
    ]


def image_options(*, repository: Path, classifier: str, model: str, threads: int) -> list[str]:
    """The alternative's options for the image pipeline: image_preprocess's code and the file of
    ``classifier`` in ``repository``, served under ``model``'s URL."""
    return [
        "--pipeline=image",
        f"--repository={repository}",
        f"--classifier={classifier}",
        f"--name={model}",
        f"--threads={threads}",
    ]


@contextlib.contextmanager
def running(*, options: list[str], log_path: Path, workers: int = 1) -> Iterator[str]:
    """The simplest alternative, started with ``options`` (:func:`text_options`, :func:`image_options`), as
    ``workers`` processes sharing one free port (the kernel spreads the connections); its base URL. Every
    process is stopped on exit (its whole process group), also when the body raises."""
    command = [
        sys.executable,
        "-m",
        "loadtest.baselines.minimal_server",
        *options,
        *(["--reuse-port"] if workers > 1 else []),
    ]
    with contextlib.ExitStack() as stack:
        url = stack.enter_context(_process([*command, "--port=0"], log_path))
        port = url.rsplit(":", 1)[-1]
        for worker in range(1, workers):
            worker_log = log_path.with_name(f"{log_path.stem}.{worker}{log_path.suffix}")
            stack.enter_context(_process([*command, f"--port={port}"], worker_log))
        yield url


@contextlib.contextmanager
def _process(command: list[str], log_path: Path) -> Iterator[str]:
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=log, text=True, start_new_session=True
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


def worker_counts(cores: int, *others: int) -> tuple[int, ...]:
    """The deployments of the alternative to measure: one process, each of ``others``, and one worker
    process per core (what a pre-fork web server deploys), each count once."""
    return tuple(dict.fromkeys((1, *others, cores)))


def alternative_label(workers: int) -> str:
    if workers == 1:
        return "one process, one request at a time"
    return f"{workers} worker processes, one request at a time each"


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
    workers: tuple[int, ...] = (1,),
) -> list[dict]:
    """Triton and the alternative deployed with each number of ``workers`` (threads divided between
    them), alternating round by round at each concurrency."""
    texts = samples.shuffled_sentences(len(samples.sentences()), seed=11)
    with contextlib.ExitStack() as stack:
        # label -> (endpoint, worker processes of the alternative; None for Triton)
        arms: dict[str, tuple[str, int | None]] = {
            "Triton (text_embedder)": (f"http://{triton_http_url}/v2/models/{model}/infer", None)
        }
        for count in dict.fromkeys(workers):
            url = stack.enter_context(
                running(
                    options=text_options(
                        encoder_file=encoder_file,
                        tokenizer_file=tokenizer_file,
                        model=model,
                        threads=max(1, threads // count),
                    ),
                    log_path=log_path if count == 1 else log_path.with_name(f"{log_path.stem}_x{count}.log"),
                    workers=count,
                )
            )
            arms[alternative_label(count)] = (f"{url}/v2/models/{model}/infer", count)
        results = []
        for concurrency in concurrencies:
            for round_ in range(rounds):
                for label, (endpoint, processes) in arms.items():
                    outcome = run_json_load(
                        endpoint, texts, label=label, concurrency=concurrency, requests=requests
                    )
                    record = asdict(outcome) | {"requests_per_s": outcome.requests_per_s, "round": round_}
                    results.append(record | ({"workers": processes} if processes else {}))
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
