"""AsyncTritonClient: the asyncio client, with the same methods as TritonClient (awaitable)."""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import Any, TypeVar

from clients import operations as ops
from clients.base import ClientBase
from clients.retry import call_with_retry_async
from clients.transport import AsyncTransport, Call

T = TypeVar("T")


class AsyncTritonClient(ClientBase):
    """asyncio client over ``tritonclient.http.aio`` or ``tritonclient.grpc.aio``.

    ``async with AsyncTritonClient("grpc://127.0.0.1:8001") as client: await client.classify([...])``.
    At most ``max_in_flight`` inference requests of this client are outstanding at any moment, across
    all concurrent calls. Use it from one event loop.
    """

    _transport: AsyncTransport

    def _open(self) -> None:
        self._transport = AsyncTransport(
            self.endpoint, self.options.headers, connections=max(100, self.options.max_in_flight)
        )
        self._window = asyncio.Semaphore(self.options.max_in_flight)

    async def close(self) -> None:
        await self._transport.close()

    async def __aenter__(self) -> AsyncTritonClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def _run(self, task: ops.Task[T]) -> T:
        step = ops.resume(task)
        while not isinstance(step, ops.Done):
            try:
                result = await self._carry_out(step)
            except BaseException as e:  # cancellation too: the task's finally blocks still run
                step = ops.resume(task, error=e)
            else:
                step = ops.resume(task, result)
        return step.value  # type: ignore[no-any-return]

    async def _carry_out(self, step: ops.Step) -> Any:
        if isinstance(step, Call):
            return await call_with_retry_async(lambda: self._transport.call(step), step.retry, what=step.what)
        if isinstance(step, ops.Pause):
            return await asyncio.sleep(step.seconds)
        if isinstance(step, ops.Concurrently):
            return list(await asyncio.gather(*(self._run(task) for task in step.tasks)))
        async with self._window:
            return await self._run(step.task)
