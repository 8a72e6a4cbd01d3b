"""Shared steps of the integration tests (the server fixture itself comes from tritonlocal.pytest_plugin)."""

from __future__ import annotations

import functools
import queue
import re
import shutil
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

from clients import ModelStatistics, TritonClient
from tritonlocal import LocalTritonServer, ServerConfig
from tritonrepo.configs import format_config, parse_config

# The queue timeout of a held_batch_server's copy: longer than any test waits for its batch to form.
HELD_QUEUE_TIMEOUT_US = 120_000_000


@dataclass(frozen=True, kw_only=True)
class ConcurrentRun:
    """Per request, in sending order: the output's shape, or the error it got, and the output itself
    (None for an error); the model's executions meanwhile, and how many of them ran each batch size (rows)."""

    outcomes: list[tuple[int, ...] | InferenceServerException]
    outputs: list[np.ndarray | None]
    executions: int
    batch_sizes: dict[int, int]

    @property
    def failures(self) -> list[int]:
        return [i for i, outcome in enumerate(self.outcomes) if isinstance(outcome, InferenceServerException)]

    def describe(self) -> str:
        """Each outcome on a line; an error with its gRPC status (an exception's repr leaves it out)."""
        lines = [f"{i}: {outcome}" for i, outcome in enumerate(self.outcomes)]
        return "\n".join([*lines, f"executions {self.executions}, by batch size {self.batch_sizes}"])


def _send_concurrently(
    server: LocalTritonServer,
    model: str,
    payloads: list[dict[str, np.ndarray]],
    output: str,
    *,
    queue_timeout_us: int | None = None,
) -> ConcurrentRun:
    requests = [[_grpc_input(name, array) for name, array in payload.items()] for payload in payloads]
    with TritonClient(f"grpc://{server.grpc_url}") as stats:
        before = stats.statistics(model)
        client = grpcclient.InferenceServerClient(server.grpc_url)
        answers: queue.Queue = queue.Queue()
        for index, inputs in enumerate(requests):  # built first: the asynchronous calls go out within ms
            client.async_infer(
                model, inputs, functools.partial(_collect, answers, index), timeout=queue_timeout_us
            )
        outcomes: list = [None] * len(requests)
        outputs: list = [None] * len(requests)
        for _ in requests:
            index, result, error = answers.get(timeout=60)
            outputs[index] = None if error is not None else result.as_numpy(output)
            outcomes[index] = error if error is not None else outputs[index].shape
        client.close()
        delta = stats.statistics_since(before, requests=len(requests))
    return ConcurrentRun(
        outcomes=outcomes, outputs=outputs, executions=delta.executions, batch_sizes=delta.batch_executions
    )


def _grpc_input(name: str, array: np.ndarray) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
    tensor.set_data_from_numpy(array)
    return tensor


def _collect(answers: queue.Queue, index: int, result: object, error: object) -> None:
    answers.put((index, result, error))


@pytest.fixture
def send_concurrently() -> Callable[..., ConcurrentRun]:
    """send(server, model, payloads, output, queue_timeout_us=None): every payload ({input name: array})
    sent at once over gRPC, asynchronously, with the model's execution count read from Triton's
    statistics before and after; ``queue_timeout_us`` shortens each request's queue timeout."""
    return _send_concurrently


def _model_metric(server: LocalTritonServer, name: str, model: str) -> int:
    with urllib.request.urlopen(server.metrics_url, timeout=5) as response:  # noqa: S310 - loopback
        text = response.read().decode()
    found = re.search(rf'^{name}{{model="{model}",version="1"}} (\S+)$', text, re.M)
    return int(float(found.group(1))) if found else 0


def _settled_statistics(stats: TritonClient, model: str) -> ModelStatistics:
    """``model``'s statistics once the requests answered before this call are counted.

    Triton counts a request just after sending its answer, so a snapshot read right after earlier
    requests (another test's, on the shared server) may lack the last of them, and a delta measured from
    it then counts that request too (test_statistics_race.py). With no request of its own to wait for,
    ``statistics_since`` returns once a second read shows nothing new; the snapshot is read after it."""
    stats.statistics_since(stats.statistics(model), requests=0)
    return stats.statistics(model)


@pytest.fixture
def settled_statistics() -> Callable[[TritonClient, str], ModelStatistics]:
    """settled(client, model): a snapshot to measure a test's own requests from, taken once the earlier
    requests of ``model`` are counted."""
    return _settled_statistics


@pytest.fixture
def model_metric() -> Callable[[LocalTritonServer, str, str], int]:
    """metric(server, name, model): a per-model counter or gauge from the server's Prometheus port."""
    return _model_metric


def _wait_for_queue(server: LocalTritonServer, model: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while _model_metric(server, "nv_inference_pending_request_count", model) == 0:
        assert time.monotonic() < deadline, f"no request of {model} queued up within {timeout_s} s"
        time.sleep(0.01)


@pytest.fixture
def wait_for_queue() -> Callable[..., None]:
    """wait(server, model): returns once a request of ``model`` waits in its queue (its instance is busy)."""
    return _wait_for_queue


@pytest.fixture
def held_batch_server(
    triton_repository: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[[str, int], LocalTritonServer]]:
    """start(model, requests): a server of its own for ``model`` (copied from the session's repository)
    whose batcher holds the queue until ``requests`` requests wait in it, then forms its batch.

    Triton's testing switch TRITONSERVER_DELAY_SCHEDULER does the holding, so requests sent together
    share one execution on any machine. Keeping an instance busy so that they queue up behind it is
    not enough: with a queue policy, Triton 2.51's batcher learns that an execution finished before the
    instance is free again, and unless another request arrives it looks again only after 500 ms (the
    wait in DynamicBatchScheduler::WaitForPayloadSlotAvailable); two such waits took requests past
    the tokenizer's 1 s queue timeout (docs/failure-modes.md).

    The copy prefers no batch size, so that the held requests leave as one batch. Its queue timeout is
    HELD_QUEUE_TIMEOUT_US: the wait is the fixture's own doing, and on a
    starved machine the requests sent first could otherwise be rejected before the last one arrives,
    failing together ("Request timeout expired", test_requests_held_past_their_queue_timeout_fail_...).
    A request may still shorten its own. Stopped at the end of the test."""
    with ExitStack() as servers:

        def start(model: str, requests: int) -> LocalTritonServer:
            repository = tmp_path / f"{model}_held_{requests}"
            shutil.copytree(triton_repository / model, repository / model)  # links followed
            config = parse_config(repository / model / "config.pbtxt")
            policy = config.dynamic_batching.default_queue_policy
            if policy.default_timeout_microseconds:  # 0 (none) stays none; a request cannot lengthen it
                policy.default_timeout_microseconds = HELD_QUEUE_TIMEOUT_US
            # Without preferred sizes the batcher forms one batch of every held request (up to
            # max_batch_size): a model that prefers batches of 4 would otherwise split 8 into two.
            del config.dynamic_batching.preferred_batch_size[:]
            (repository / model / "config.pbtxt").write_text(format_config(config))
            monkeypatch.setenv("TRITONSERVER_DELAY_SCHEDULER", str(requests))
            config = ServerConfig(model_repository=repository, exit_timeout_s=2, stop_timeout_s=10)
            return servers.enter_context(LocalTritonServer(config))

        yield start


@pytest.fixture(scope="session")
def export_and_derive() -> Callable[..., tuple[list, Path]]:
    """``run(description, project)``: the description's files exported in fp32 only, timed at batch 1 only
    (the shortest export), into ``project/model_repository``, its records under ``project/precision``;
    then the local repository derived from it as ``project/local_repository``, holding only the
    description's models (named ``<its name>_*``). Returns the export's results and the local repository."""
    from export.pipeline import Options, export_model
    from export.precision.selection import Capabilities
    from tritonrepo.derive import derive_repository

    def run(description: Any, project: Path) -> tuple[list, Path]:
        repository, local = project / "model_repository", project / "local_repository"
        options = Options(
            repository=repository,
            precision="fp32",
            capabilities=Capabilities.detect(),
            record_dir=project / "precision",
            timing_batches=(1,),
        )
        results = export_model(description, options)
        for name in derive_repository(repository, local).written:
            if not name.startswith(f"{description.name}_"):
                shutil.rmtree(local / name)  # serve only the scaffolded model
        return results, local

    return run
