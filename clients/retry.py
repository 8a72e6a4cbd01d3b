"""Retries with exponential backoff and full jitter, for retryable failures only, within a deadline.

Full jitter (AWS architecture blog, "Exponential Backoff And Jitter"): before attempt n+1 sleep a uniform
random time in [0, min(max_delay_s, base_delay_s * 2**(n-1))]. Clients that failed together then come back
spread out instead of in one synchronised wave.

How long to keep trying is a time, ``deadline_s`` from the first attempt, not a count: what a retry waits
out (a model process restarted after a crash, a server or replica restarting, a full queue draining)
takes seconds whatever the count, and a few fast attempts are spent long before it is over. Retrying is
safe because inference here is idempotent: every served model is a pure function of its inputs, with no
state and no side effect, so a request computed twice gives the same answer twice.

The policy is written once, as the steps of :func:`retrying`; the blocking and the asyncio client carry
them out as they carry out every other step of an operation (clients/steps.py).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any, TypeVar

from clients.errors import ClientError
from clients.steps import Pause

logger = logging.getLogger(__name__)

S = TypeVar("S")


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """How patiently to retry a call that failed with a retryable ``ClientError``.

    A retry is made while ``deadline_s`` seconds since the first attempt have not passed when it would
    start (its backoff sleep included). ``max_attempts`` optionally caps the count too; it counts the first
    try, and 1 means never retry. The default deadline covers a restart of the whole local repository
    with room to spare (its models loaded again in 15 to 24 s on two busy cores, docs/failure-modes.md).
    """

    deadline_s: float = 60.0
    max_attempts: int | None = None
    base_delay_s: float = 0.1
    max_delay_s: float = 2.0

    def __post_init__(self) -> None:
        if self.max_attempts is not None and self.max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1 (1 = no retries), got {self.max_attempts}")
        if self.deadline_s < 0:
            raise ValueError(f"deadline_s must be >= 0 (0 = no retries), got {self.deadline_s}")
        if self.base_delay_s < 0 or self.max_delay_s < 0:
            raise ValueError(
                f"base_delay_s and max_delay_s must be >= 0, got {self.base_delay_s} and {self.max_delay_s}"
            )
        if self.max_delay_s < self.base_delay_s:
            raise ValueError(
                f"max_delay_s ({self.max_delay_s}) must be at least base_delay_s ({self.base_delay_s})"
            )

    def delay_cap_s(self, failed_attempts: int) -> float:
        """The upper bound of the sleep after ``failed_attempts`` failures (1, 2, ...)."""
        exponent = min(failed_attempts - 1, 62)  # bounded, so 2**exponent cannot overflow a float
        return float(min(self.max_delay_s, self.base_delay_s * 2.0**exponent))

    def delay_s(self, failed_attempts: int, rng: random.Random | None = None) -> float:
        """A full-jitter sleep: uniform in [0, delay_cap_s(failed_attempts)]."""
        return (rng or random).uniform(0.0, self.delay_cap_s(failed_attempts))


NO_RETRY = RetryPolicy(max_attempts=1)


def retrying(attempt: S, policy: RetryPolicy, *, what: str) -> Generator[S | Pause, Any, Any]:
    """``attempt`` (a step: one try of a server call) under ``policy``, as steps: yields the attempt until it
    succeeds, with a :class:`~clients.steps.Pause` before each retry, and returns its result; raises the
    last error when it must not be retried or the policy's deadline has passed. A client runs these steps
    blocking or awaited, as every other step of an operation."""
    started, number = time.monotonic(), 1
    while True:
        try:
            return (yield attempt)
        except ClientError as e:
            yield Pause(_delay_before_retry(e, number, started, policy, what))
        number += 1


def _delay_before_retry(
    error: ClientError, attempt: int, started: float, policy: RetryPolicy, what: str
) -> float:
    """Record the attempt on ``error``; re-raise it when it must not be retried, else the delay to wait."""
    error.attempts = attempt
    delay = policy.delay_s(attempt)
    elapsed_s = time.monotonic() - started
    if not error.retryable or attempt == policy.max_attempts or elapsed_s + delay > policy.deadline_s:
        raise error
    logger.info(
        "%s failed (attempt %d, %.1f of %.1f s): %s; retrying in %.3f s",
        what,
        attempt,
        elapsed_s,
        policy.deadline_s,
        error,
        delay,
    )
    return delay
