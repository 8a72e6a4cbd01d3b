"""The steps an operation asks its client to carry out, and how a client resumes the operation.

An operation (:mod:`clients.operations`) is a generator, a :data:`Task`: it yields steps and receives each
step's result, or has the step's exception raised at the ``yield``. The steps are one attempt at a server
call (:class:`~clients.transport.Call`), a pause, several tasks at once, and one inference holding one of
the client's ``max_in_flight`` slots. Retrying is steps too (:func:`clients.retry.retrying`): an attempt, a
pause, another attempt. :class:`~clients.TritonClient` carries the steps out with blocking calls and a
thread pool, :class:`~clients.AsyncTritonClient` awaits them; nothing else differs between the two.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import Any, TypeVar

from clients.transport import Call

T = TypeVar("T")


@dataclass(frozen=True)
class Pause:
    seconds: float


@dataclass(frozen=True)
class Concurrently:
    """Run ``tasks`` at the same time; the result is the list of their results, in order."""

    tasks: list[Generator[Any, Any, Any]]


@dataclass(frozen=True)
class InFlight:
    """Run ``task`` (one inference) within the client's ``max_in_flight`` bound."""

    task: Generator[Any, Any, Any]


@dataclass(frozen=True)
class Done:
    value: Any


Step = Call | Pause | Concurrently | InFlight
Task = Generator[Step, Any, T]


def resume(task: Task[Any], result: Any = None, error: BaseException | None = None) -> Step | Done:
    """The task's next step, given its last step's result or error (none: start it), or Done."""
    try:
        return task.throw(error) if error is not None else task.send(result)
    except StopIteration as stop:
        return Done(stop.value)
