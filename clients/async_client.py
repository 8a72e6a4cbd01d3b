"""AsyncTritonClient: the asyncio client, with the same methods as TritonClient (awaitable)."""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import Any, TypeVar

from clients import steps
from clients.base import ClientBase
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

    async def _run(self, task: steps.Task[T]) -> T:
        step = steps.resume(task)
        while not isinstance(step, steps.Done):
            try:
                result = await self._carry_out(step)
            except BaseException as e:  # cancellation too: the task's finally blocks still run
                step = steps.resume(task, error=e)
            else:
                step = steps.resume(task, result)
        return step.value  # type: ignore[no-any-return]

    async def _carry_out(self, step: steps.Step) -> Any:
        if isinstance(step, Call):
            return await self._transport.call(step)
        if isinstance(step, steps.Pause):
            return await asyncio.sleep(step.seconds)
        if isinstance(step, steps.Concurrently):
            return list(await asyncio.gather(*(self._run(task) for task in step.tasks)))
        async with self._window:
            return await self._run(step.task)
