"""Locust scenarios against the Triton server: an HTTP user and a gRPC user, image and text tasks.

    locust -f loadtest/load/locustfile.py --headless -u 8 -r 4 -t 20s --host http://127.0.0.1:8000 \\
        --csv reports/locust --html reports/locust.html                     # HTTP users only
    locust -f loadtest/load/locustfile.py GrpcTritonUser --headless -u 8 -r 4 -t 20s --host grpc://127.0.0.1:8001
    locust -f loadtest/load/locustfile.py --headless -u 8 -r 4 -t 20s \\
        --host http://127.0.0.1:8000 --grpc-host grpc://127.0.0.1:8001     # both, half the users each
    LOADTEST_SHAPE=step locust -f loadtest/load/locustfile.py ...              # steady | step | spike

Each user holds one :class:`clients.TritonClient` and sends one real request per task, back to back
(closed loop, like perf_analyzer's concurrency) unless ``--think-time-ms`` is set: a photograph from
skimage/data (cut into distinct JPEG variants) to the image classifier, or a sentence from
samples/data/sentences.txt to the text embedder, in the proportions of ``--mix``. Every request is
reported to Locust's statistics with its measured time, its response size and, when it failed or
returned something malformed, the exception. Retries are off: a failure is counted, never hidden.
"""

from __future__ import annotations

import random
import time

import grpc.experimental.gevent as grpc_gevent
import numpy as np
from locust import User, events, task

import samples
from clients import ClientError, RetryPolicy, TritonClient
from loadtest.load import payloads, shapes
from loadtest.load.profiles import Mix

grpc_gevent.init_gevent()  # grpcio's blocking calls must yield to gevent, or one user blocks them all

IMAGE_VARIANTS = 32
NO_RETRY = RetryPolicy(max_attempts=1)


@events.init_command_line_parser.add_listener
def _add_options(parser) -> None:  # noqa: ANN001 - Locust's configargparse parser
    group = parser.add_argument_group("triton")
    group.add_argument(
        "--grpc-host",
        default="",
        env_var="LOCUST_GRPC_HOST",
        help="grpc://host:port for GrpcTritonUser when --host is http://",
    )
    group.add_argument("--image-model", default="image_classifier", help="model for the image task")
    group.add_argument("--text-model", default="text_embedder", help="model for the text task")
    group.add_argument("--mix", default="text:1,image:1", help="task weights, e.g. text:3,image:1")
    group.add_argument("--think-time-ms", type=float, default=0.0, help="pause between a user's requests")


@events.init.add_listener
def _check_options(environment, **_kwargs) -> None:  # noqa: ANN001
    options = environment.parsed_options
    if options is not None:
        Mix.parse(options.mix)  # a bad --mix stops the run before any user starts


class TritonUser(User):
    """One client connection sending real requests, reported to Locust's statistics."""

    abstract = True
    protocol = "http"
    request_type = "HTTP"
    pause_s = 0.0

    def wait_time(self) -> float:
        """No pause by default (closed loop); with --think-time-ms, 0.5x to 1.5x that pause."""
        return self.rng.uniform(0.5, 1.5) * self.pause_s if self.pause_s else 0.0

    def on_start(self) -> None:
        options = self.environment.parsed_options
        self.image_model, self.text_model = options.image_model, options.text_model
        self.mix = Mix.parse(options.mix)
        self.pause_s = max(0.0, options.think_time_ms / 1000.0)
        self.rng = random.Random()
        self.client = TritonClient(self.url(), retry=NO_RETRY, timeout_s=120.0)
        for name in self.mix.weights:  # read model metadata once, outside the timed requests
            self.client.signature(self.image_model if name == "image" else self.text_model)

    def on_stop(self) -> None:
        self.client.close()

    def url(self) -> str:
        host = self.host or ""
        if not host.startswith(f"{self.protocol}://"):
            raise ValueError(f"{type(self).__name__} needs --host {self.protocol}://HOST:PORT, got {host!r}")
        return host

    @task
    def infer(self) -> None:
        task = self.mix.choose(self.rng)
        if task == "image":
            image = _images()[self.rng.randrange(IMAGE_VARIANTS)]
            self._timed(
                self.image_model,
                lambda: _check_classification(self.client.classify([image], self.image_model)),
            )
        else:
            text = self.rng.choice(samples.sentences())
            self._timed(self.text_model, lambda: _check_embedding(self.client.embed([text], self.text_model)))

    def _timed(self, name: str, call) -> None:  # noqa: ANN001
        started = time.perf_counter()
        length, error = 0, None
        try:
            length = call()
        except (ClientError, ValueError) as e:
            error = e
        self.environment.events.request.fire(
            request_type=self.request_type,
            name=name,
            response_time=(time.perf_counter() - started) * 1000.0,
            response_length=length,
            exception=error,
            context={},
        )


class HttpTritonUser(TritonUser):
    protocol = "http"
    request_type = "HTTP"


class GrpcTritonUser(TritonUser):
    protocol = "grpc"
    request_type = "gRPC"

    def url(self) -> str:
        host = self.host or ""
        if host.startswith("grpc://"):
            return host
        chosen = self.environment.parsed_options.grpc_host
        if not chosen.startswith("grpc://"):
            raise ValueError(
                f"GrpcTritonUser needs --host grpc://HOST:PORT or --grpc-host grpc://HOST:PORT, "
                f"got --host {host!r} and --grpc-host {chosen!r}"
            )
        return chosen


_IMAGES: list[bytes] = []


def _images() -> list[bytes]:
    if not _IMAGES:
        _IMAGES.extend(payloads.image_variants(IMAGE_VARIANTS, seed=1))
    return _IMAGES


def _check_classification(results: list) -> int:
    if len(results) != 1 or not results[0].labels:
        raise ValueError(f"expected one classification with labels, got {results!r}")
    return sum(len(label) for label in results[0].labels) + 16 * len(results[0].labels)


def _check_embedding(embedding: np.ndarray) -> int:
    if embedding.ndim != 2 or embedding.shape[0] != 1 or not np.isfinite(embedding).all():
        raise ValueError(f"expected one finite embedding row, got shape {embedding.shape}")
    norm = float(np.linalg.norm(embedding[0]))
    if abs(norm - 1.0) > 1e-3:
        raise ValueError(f"expected a unit-length embedding, got norm {norm:.4f}")
    return int(embedding.nbytes)


if shapes.selected_shape() is not None:
    LoadShape = shapes.selected_shape()  # Locust runs the one shape class it finds in this module
