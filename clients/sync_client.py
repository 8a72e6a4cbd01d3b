"""TritonClient: the blocking client, over HTTP or gRPC."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import Any, TypeVar

from clients import steps
from clients.base import ClientBase
from clients.transport import Call, SyncTransport

T = TypeVar("T")


class TritonClient(ClientBase):
    """Blocking client: ``TritonClient("http://127.0.0.1:8000")`` or ``TritonClient("grpc://127.0.0.1:8001")``.

    Thread-safe. See :class:`clients.options.ClientOptions` for the keyword arguments. Model metadata is
    fetched once per model and cached. Close it (or use ``with``) to release connections and threads.
    """

    _transport: SyncTransport

    def _open(self) -> None:
        self._transport = SyncTransport(self.endpoint, self.options.headers)
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._worker = threading.local()  # .busy: this thread is one of the pool's

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)
        self._transport.close()

    def __enter__(self) -> TritonClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _run(self, task: steps.Task[T]) -> T:
        step = steps.resume(task)
        while not isinstance(step, steps.Done):
            try:
                result = self._carry_out(step)
            except BaseException as e:  # cancellation too: the task's finally blocks still run
                step = steps.resume(task, error=e)
            else:
                step = steps.resume(task, result)
        return step.value  # type: ignore[no-any-return]

    def _carry_out(self, step: steps.Step) -> Any:
        if isinstance(step, Call):
            return self._transport.call(step)
        if isinstance(step, steps.Pause):
            return time.sleep(step.seconds)
        if isinstance(step, steps.Concurrently):
            return self._map(self._run, step.tasks)
        return self._run(step.task)  # in flight: the pool's max_in_flight threads bound it already

    def _map(self, function: Callable[[Any], T], arguments: list[Any]) -> list[T]:
        # A pool thread runs its own sub-tasks itself: waiting on the pool it is part of could deadlock.
        if len(arguments) <= 1 or getattr(self._worker, "busy", False):
            return [function(a) for a in arguments]
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(
                    self.options.max_in_flight, thread_name_prefix="triton-client", initializer=self._enlist
                )
            pool = self._pool
        return list(pool.map(function, arguments))

    def _enlist(self) -> None:
        self._worker.busy = True
