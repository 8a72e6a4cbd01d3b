"""Batching for every Python-backend model: gather, one vectorised call, check, split, answer.

Triton hands ``execute()`` a list of requests. :class:`RequestBatcher` does the rest the same way for
every model:

1. gathers each request's inputs by the names in the model's config (config order);
2. runs ``prepare(*arrays)`` per request: per-request work that may reject the request by raising
   :class:`InvalidInput` (that request alone gets an HTTP 400 / gRPC INVALID_ARGUMENT response, the
   others proceed);
3. concatenates the prepared columns of the accepted requests (ndarrays along axis 0, other
   sequences as one list) and calls ``run(*columns)`` once for the whole batch;
4. checks that every result has one row per input row *before* splitting (``np.split`` always
   returns one piece per split point, so a check after it cannot fire); a wrong count raises
   ``TritonModelException`` naming the result, which fails the batch: that is a bug in the model;
5. slices each result by each request's row count, runs ``finish(*pieces)`` per request when given,
   and answers with the results cast to the config's output data types, in the config's order.

Use from a model.py::

    from pybackend_batching import InvalidInput, RequestBatcher

    class TritonPythonModel:
        def initialize(self, args):
            config = json.loads(args["model_config"])
            self.batcher = RequestBatcher(config, run=self._run, prepare=self._prepare)

        def execute(self, requests):
            return self.batcher.execute(requests)

- ``prepare(*arrays) -> column or tuple of columns``: one array per config input, as the request
  carries it. Default: the arrays unchanged. Each column must have the same number of rows.
- ``run(*columns) -> result or tuple of results``: ndarrays or lists, one row per input row. With
  ``with_rows=True`` it is called ``run(*columns, rows=[rows of each accepted request])``, for a model
  that needs the requests' boundaries (the native runner computes Triton's batch inputs from them).
- ``finish(*pieces) -> output or tuple of outputs``: one request's slice of every result -> its output
  tensors, for per-request work after the vectorised call (padding a request's token ids to its
  length bucket, for example). Default: the pieces unchanged.

How this file ships: Triton's Python backend puts only the model's version folder on ``sys.path``,
and NVIDIA's container sees nothing outside the mounted model repository. So the one copy lives at
the repository's top level (Triton loads only folders as models and ignores files there) and each
Python model's version folder holds a committed relative symlink to it
(``<model>/1/pybackend_batching.py -> ../../pybackend_batching.py``): it resolves inside a volume
mount, in a copy of the repository and in the derived local repository (whose links point at the
resolved file), and there is no generated copy to go stale. Outside Triton, model.py files are
loaded with ``tritonrepo.served_code.load_served_module``, which provides their sibling modules.

Timing, for the time budget (``python -m loadtest.budget``): where the server's environment names a folder in
``PYBACKEND_TIMINGS_DIR``, each instance keeps its cumulative execute() time and the time spent in the
model's own callables (prepare, run, finish), each weighted by the requests of the execution as Triton
weights an execution's compute time, and rewrites one small JSON file there after each execution
(``<model>.<pid>.json``: model, pid, executions, requests, execute_ns, model_ns). Without the variable
nothing is timed or written.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

try:
    import triton_python_backend_utils as pb_utils
except ImportError:  # imported outside Triton for a model's pure functions (tests load a stand-in)
    pb_utils = None  # type: ignore[assignment]  # nothing here runs without Triton's module


TIMINGS_ENV = "PYBACKEND_TIMINGS_DIR"
# Each timings file is one JSON object rewritten in place, space-padded to this many bytes, so a reader
# never sees the tail of a longer earlier write.
TIMINGS_RECORD_BYTES = 512


class InvalidInput(ValueError):
    """Raised by ``prepare`` for a request that cannot be served; the message goes to that client."""


def invalid_input(message: str) -> pb_utils.TritonError:
    """An error for a bad request: HTTP 400 / gRPC INVALID_ARGUMENT, not 500 / INTERNAL.

    Python backends without error codes (before Triton 23.x) take the message alone (-> 500 / INTERNAL).
    """
    code = getattr(pb_utils.TritonError, "INVALID_ARG", None)
    return pb_utils.TritonError(message) if code is None else pb_utils.TritonError(message, code)


def _as_tuple(value: Any) -> tuple:
    return value if isinstance(value, tuple) else (value,)


def _identity(*values: Any) -> tuple:
    return values


class RequestBatcher:
    """A model's ``execute()``: see the module docstring for the steps and the callables' contracts."""

    def __init__(
        self,
        model_config: dict,
        *,
        run: Callable[..., Any],
        prepare: Callable[..., Any] = _identity,
        finish: Callable[..., Any] = _identity,
        with_rows: bool = False,
    ) -> None:
        self.input_names = [tensor["name"] for tensor in model_config["input"]]
        self.outputs = [
            (tensor["name"], pb_utils.triton_string_to_numpy(tensor["data_type"]))
            for tensor in model_config["output"]
        ]
        self.run, self.prepare, self.finish, self.with_rows = run, prepare, finish, with_rows
        folder = os.environ.get(TIMINGS_ENV)
        self.timings = _Timings(folder, str(model_config.get("name", "model"))) if folder else None
        if self.timings is not None:
            self.run, self.prepare, self.finish = (self.timings.timed(f) for f in (run, prepare, finish))

    def execute(self, requests: list) -> list:
        if self.timings is None:
            return self._execute(requests)
        started = time.perf_counter_ns()
        try:
            return self._execute(requests)
        finally:
            self.timings.record(len(requests), time.perf_counter_ns() - started)

    def _execute(self, requests: list) -> list:
        responses: list = [None] * len(requests)
        accepted = self._accept(requests, responses)
        if not accepted:
            return responses
        rows = [len(columns[0]) for _, columns in accepted]
        gathered = [
            _concatenate(column) for column in zip(*(columns for _, columns in accepted), strict=True)
        ]
        try:
            results = _as_tuple(self.run(*gathered, rows=rows) if self.with_rows else self.run(*gathered))
        except Exception as e:  # noqa: BLE001 - reported to each request of the batch
            for index, _ in accepted:
                responses[index] = pb_utils.InferenceResponse(
                    error=pb_utils.TritonError(f"inference failed: {e}")
                )
            return responses
        for position, result in enumerate(results):
            if len(result) != sum(rows):
                raise pb_utils.TritonModelException(
                    f"result {position} of the batch has {len(result)} rows for {sum(rows)} input rows "
                    f"({len(accepted)} requests); every result needs one row per input row"
                )
        start = 0
        for (index, _), count in zip(accepted, rows, strict=True):
            responses[index] = self._answer([result[start : start + count] for result in results])
            start += count
        return responses

    def _accept(self, requests: list, responses: list) -> list[tuple[int, tuple]]:
        """(request index, prepared columns) of each request that ``prepare`` accepts; the others get
        their error in ``responses``."""
        accepted = []
        for index, request in enumerate(requests):
            try:
                arrays = [_input_array(request, name) for name in self.input_names]
                columns = _as_tuple(self.prepare(*arrays))
                _check_rows_agree(columns)
            except InvalidInput as e:
                responses[index] = pb_utils.InferenceResponse(error=invalid_input(str(e)))
                continue
            accepted.append((index, columns))
        return accepted

    def _answer(self, pieces: list) -> Any:
        """One request's response from its slice of every result."""
        values = _as_tuple(self.finish(*pieces))
        if len(values) != len(self.outputs):
            raise pb_utils.TritonModelException(
                f"the model produced {len(values)} outputs, its config declares {len(self.outputs)}: "
                f"{[name for name, _ in self.outputs]}"
            )
        tensors = [
            pb_utils.Tensor(name, np.asarray(value).astype(dtype, copy=False))
            for (name, dtype), value in zip(self.outputs, values, strict=True)
        ]
        return pb_utils.InferenceResponse(output_tensors=tensors)


def _input_array(request: pb_utils.InferenceRequest, name: str) -> np.ndarray:
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:  # Triton rejects a request without a required input before it gets here
        raise InvalidInput(f"{name}: missing; every input of the model's config is required")
    return tensor.as_numpy()


def _check_rows_agree(columns: tuple) -> None:
    counts = [len(column) for column in columns]
    if len(set(counts)) > 1:
        raise InvalidInput(f"every input needs the same number of rows, got {counts}")


def _concatenate(parts: Sequence) -> Any:
    if all(isinstance(part, np.ndarray) for part in parts):
        try:
            return np.concatenate(parts, axis=0)
        except ValueError as e:
            shapes = [list(part.shape) for part in parts]
            raise pb_utils.TritonModelException(
                f"cannot batch requests of shapes {shapes}: {e}; only the first dimension may differ"
            ) from e
    return [row for part in parts for row in part]


class _Timings:
    """One instance's cumulative execute() and model-code time, rewritten to its file after each execution."""

    def __init__(self, folder: str, model: str) -> None:
        self.model, self.pid = model, os.getpid()
        path = os.path.join(folder, f"{model}.{self.pid}.json")
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self.executions = self.requests = self.execute_ns = self.model_ns = 0
        self._model_ns_now = 0  # the model's callables during the current execution

    def timed(self, function: Callable[..., Any]) -> Callable[..., Any]:
        def timed_call(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter_ns()
            try:
                return function(*args, **kwargs)
            finally:
                self._model_ns_now += time.perf_counter_ns() - started

        return timed_call

    def record(self, requests: int, execute_ns: int) -> None:
        self.executions += 1
        self.requests += requests
        self.execute_ns += requests * execute_ns
        self.model_ns += requests * self._model_ns_now
        self._model_ns_now = 0
        record = json.dumps(
            {
                "model": self.model,
                "pid": self.pid,
                "executions": self.executions,
                "requests": self.requests,
                "execute_ns": self.execute_ns,
                "model_ns": self.model_ns,
            }
        )
        os.pwrite(self.fd, record.ljust(TIMINGS_RECORD_BYTES).encode(), 0)
