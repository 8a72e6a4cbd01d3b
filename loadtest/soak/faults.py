"""The soak's fault phase: the faults a service meets in production, under the same steady load.

While the soak's requests keep arriving at their fixed rate, the phase

1. kills the text tokenizer's Python-backend stub with SIGKILL, with the server supervised
   (:class:`tritonlocal.health.Supervisor`): the supervisor finds the dead instance and restarts the
   server on the same ports;
2. once the server is back and the clients' retry deadline has passed again (so that no request waits
   out both faults), restarts the server gracefully, as an orchestrator restarts a replica. The soak
   runs one server, so no other replica takes its traffic meanwhile: the harsher case.

The phase lasts ``--fault-minutes`` or until both faults are over, whichever is longer.

Every request sent during the phase is counted by the soak like any other; the report gives how many
were lost. The soak's clients are the project's (clients/), whose default retry policy retries a request
that failed because its model process died or restarted, within a deadline of seconds (clients/retry.py).
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass

import psutil

from clients.retry import RetryPolicy
from tritonlocal import LocalTritonServer
from tritonlocal.health import live_stubs

KILLED_MODEL = "text_tokenizer"  # its stub serves every text request; one instance, so none takes over
REPAIR_WAIT_S = 120.0


@dataclass(kw_only=True)
class FaultEvent:
    """One fault: when it happened (seconds into the phase), what it was, how long until served again."""

    at_s: float
    fault: str
    recovered_s: float | None = None  # None: not served again within REPAIR_WAIT_S

    def describe(self) -> str:
        recovered = (
            "not recovered" if self.recovered_s is None else f"ready again after {self.recovered_s:.1f} s"
        )
        return f"at {self.at_s:.0f} s: {self.fault}, {recovered}"


def kill_stub(server: LocalTritonServer, model: str) -> str:
    """SIGKILL the first live stub of ``model``; returns its instance name."""
    assert server.pid is not None, "the server is not running"
    stubs = sorted(
        (name, pid) for name, pid in live_stubs(server.pid).items() if name.startswith(f"{model}_")
    )
    if not stubs:
        raise RuntimeError(f"no live stub of {model} below tritonserver {server.pid}")
    instance, pid = stubs[0]
    with contextlib.suppress(psutil.NoSuchProcess):
        psutil.Process(pid).send_signal(signal.SIGKILL)
    return instance


def run_faults(
    server: LocalTritonServer, *, duration_s: float, log: Callable[[str], None]
) -> list[FaultEvent]:
    """Inject the phase's faults into ``server`` (see the module's docstring); returns them in order."""
    start = time.monotonic()
    events = []
    with server.supervise(interval_s=0.5) as supervisor:
        instance = kill_stub(server, KILLED_MODEL)
        event = FaultEvent(at_s=0.0, fault=f"SIGKILL to the stub of {instance}, repaired by the supervisor")
        log(f"fault: killed the stub of {instance}")
        deadline = time.monotonic() + REPAIR_WAIT_S
        while time.monotonic() < deadline and not any(r.repaired_s is not None for r in supervisor.repairs):
            time.sleep(0.1)
        repaired = [r for r in supervisor.repairs if r.repaired_s is not None]
        if repaired:
            event.recovered_s = repaired[0].detected_at + (repaired[0].repaired_s or 0.0) - start
        events.append(event)
    # The supervisor is stopped first: it would take the restarting server's missing stubs for dead ones.
    settled_at = start + (event.recovered_s or REPAIR_WAIT_S) + RetryPolicy().deadline_s
    time.sleep(max(0.0, max(start + duration_s / 2, settled_at) - time.monotonic()))
    restarted_at = time.monotonic()
    log("fault: restarting the server (a replica restart)")
    server.restart(graceful=True)
    events.append(
        FaultEvent(
            at_s=restarted_at - start,
            fault="graceful restart of the server on the same ports (a replica restart)",
            recovered_s=time.monotonic() - restarted_at,
        )
    )
    log(f"fault: server ready again after {events[-1].recovered_s:.1f} s")
    return events


def phase_counts(rows: list[dict], kinds: tuple[str, ...]) -> dict[str, int]:
    """Over the samples of the fault phase: requests the clients completed ("sent"), those of them that
    failed ("lost"), and those the load generator dropped unsent while its threads waited ("shed")."""
    faulted = [row for row in rows if row["phase"] == "fault"]

    def total(column: str) -> int:
        return sum(row.get(f"{kind}_{column}", 0) for row in faulted for kind in kinds)

    return {"sent": total("ok") + total("errors"), "lost": total("errors"), "shed": total("shed")}
