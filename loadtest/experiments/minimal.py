"""The `minimal` experiment: Triton against the simplest alternative, measured side by side in one run.

Three services, each against its own simplest alternative (:mod:`loadtest.baselines.minimal_server`: one
request at a time per process, the same exported file and runtime Triton serves):

- ``text``: text_embedder, one sentence per JSON request; the alternative tokenises and runs the encoder;
- ``image``: image_classifier, one JPEG per request as binary data; the alternative runs
  image_preprocess's code, the classifier, softmax and top-5;
- ``tabular``: the described tabular model (a native ONNX model), one real row per JSON request; the
  alternative feeds the named inputs to the same ONNX file.

Each alternative is deployed as one process and as one worker process per core sharing a port (as a user
would deploy it behind a pre-fork server), the cores' threads divided between the workers. One closed-loop
load generator (:mod:`loadtest.load.json_load`), with the service's request bodies built once, drives every
arm at each concurrency, alternating Triton, one process, workers, Triton... for ``rounds`` rounds, so
background load hits them alike and the report can take each arm's median and show the ratio round by
round. One service's alternatives run at a time.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import samples
from loadtest.baselines.pipelines import served_file
from loadtest.experiments.plans import IMAGE_ENCODER, IMAGE_MODEL, TEXT_MODEL, tabular_model, text_encoder_of
from loadtest.load.json_load import RequestBody, image_request, run_json_load, tensors_request, text_request
from loadtest.load.model_rows import described_rows
from loadtest.load.payloads import image_variants
from loadtest.load.preprocessing import tokenizer_file
from tritonrepo.configs import load_model_config

SERVICES = ("text", "image", "tabular")
IMAGE_OUTPUTS = ("CLASS_IDS", "SCORES", "LABELS")  # image_classifier's outputs, asked as JSON
IMAGE_VARIANTS = 48  # distinct JPEGs cut from the photographs, sent in turn
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


def tensors_options(*, onnx_file: Path, model: str, threads: int) -> list[str]:
    """The alternative's options for the tensors pipeline: the ONNX file it feeds the named inputs to."""
    return ["--pipeline=tensors", f"--model={onnx_file}", f"--name={model}", f"--threads={threads}"]


@contextlib.contextmanager
def running(*, options: list[str], log_path: Path, workers: int = 1) -> Iterator[str]:
    """The simplest alternative, started with ``options`` (:func:`text_options`, :func:`image_options`,
    :func:`tensors_options`), as ``workers`` processes sharing one free port (the kernel spreads the
    connections); its base URL. Every process is stopped on exit (its whole process group), also when the
    body raises."""
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


@dataclass(frozen=True, kw_only=True)
class Service:
    """One service of the experiment: its key in results.json, the model Triton serves it as, the
    alternative's options for a number of intra-op threads, the request bodies sent in turn and the
    measured requests per arm and round."""

    key: str
    model: str
    options: Callable[[int], list[str]]
    bodies: tuple[RequestBody, ...]
    requests: int


def text_service(*, model: str, encoder_file: Path, tokenizer_file: Path, requests: int) -> Service:
    """Sentences, one a request, against the alternative's text pipeline on ``encoder_file``."""
    texts = samples.shuffled_sentences(len(samples.sentences()), seed=11)
    return Service(
        key="text",
        model=model,
        options=lambda threads: text_options(
            encoder_file=encoder_file, tokenizer_file=tokenizer_file, model=model, threads=threads
        ),
        bodies=tuple(text_request(text) for text in texts),
        requests=requests,
    )


def image_service(*, repository: Path, classifier: str, model: str, requests: int) -> Service:
    """The benchmark's photographs, one JPEG a request, against the alternative's image pipeline."""
    return Service(
        key="image",
        model=model,
        options=lambda threads: image_options(
            repository=repository, classifier=classifier, model=model, threads=threads
        ),
        bodies=tuple(
            image_request(image, outputs=IMAGE_OUTPUTS) for image in image_variants(IMAGE_VARIANTS, seed=7)
        ),
        requests=requests,
    )


def tabular_service(*, repository: Path, model: str, requests: int) -> Service:
    """The real rows of ``model``'s description (its check_inputs), one a request, against the
    alternative's tensors pipeline on the ONNX file ``model`` serves."""
    rows = described_rows(model, load_model_config(repository / model))
    if not rows:
        raise ValueError(f"{model}: its description names no check_inputs rows to send it")
    onnx_file = served_file(repository, model)
    return Service(
        key="tabular",
        model=model,
        options=lambda threads: tensors_options(onnx_file=onnx_file, model=model, threads=threads),
        bodies=tuple(tensors_request(row) for row in rows),
        requests=requests,
    )


def shipped_services(source: Path, requests: Mapping[str, int]) -> list[Service]:
    """The services ``requests`` names (keys of :data:`SERVICES`), in that order, on the shipped models of
    the repository at ``source``, each with its measured requests per arm and round."""
    unknown = sorted(set(requests) - set(SERVICES))
    if unknown:
        raise ValueError(f"unknown services {unknown} for the `minimal` experiment; known: {list(SERVICES)}")
    builders: dict[str, Callable[[int], Service]] = {
        "text": lambda count: text_service(
            model=TEXT_MODEL,
            encoder_file=served_file(source, text_encoder_of(source)),
            tokenizer_file=tokenizer_file(source),
            requests=count,
        ),
        "image": lambda count: image_service(
            repository=source, classifier=IMAGE_ENCODER, model=IMAGE_MODEL, requests=count
        ),
    }
    tabular = tabular_model()
    if tabular is not None:  # no description serves a model that takes rows: no tabular service
        builders["tabular"] = lambda count: tabular_service(repository=source, model=tabular, requests=count)
    return [builders[key](count) for key, count in requests.items() if key in builders]


def compare(
    *,
    triton_http_url: str,
    services: list[Service],
    threads: int,
    concurrencies: list[int],
    rounds: int,
    log_path: Path,
    workers: tuple[int, ...] = (1,),
) -> list[dict]:
    """Each service in turn: Triton and the service's alternative deployed with each number of
    ``workers`` (threads divided between them), alternating round by round at each concurrency. Each
    record names its ``service``."""
    results = []
    for service in services:
        with contextlib.ExitStack() as stack:
            # label -> (endpoint, worker processes of the alternative; None for Triton)
            arms: dict[str, tuple[str, int | None]] = {
                f"Triton ({service.model})": (
                    f"http://{triton_http_url}/v2/models/{service.model}/infer",
                    None,
                )
            }
            for count in dict.fromkeys(workers):
                url = stack.enter_context(
                    running(
                        options=service.options(max(1, threads // count)),
                        log_path=log_path.with_name(f"{log_path.stem}_{service.key}_x{count}.log"),
                        workers=count,
                    )
                )
                arms[alternative_label(count)] = (f"{url}/v2/models/{service.model}/infer", count)
            for concurrency in concurrencies:
                results += _rounds(service, arms, concurrency=concurrency, rounds=rounds)
    return results


def _rounds(
    service: Service, arms: dict[str, tuple[str, int | None]], *, concurrency: int, rounds: int
) -> list[dict]:
    """Every arm once per round, in order, at ``concurrency``."""
    results = []
    for round_ in range(rounds):
        for label, (endpoint, processes) in arms.items():
            outcome = run_json_load(
                endpoint,
                service.bodies,
                label=label,
                concurrency=concurrency,
                requests=service.requests,
                warmup=max(8, concurrency),  # every connection opened, the first requests' costs paid
            )
            record = outcome.record() | {"service": service.key, "round": round_}
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
