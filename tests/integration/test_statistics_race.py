"""The race behind a flaky statistics count, forced on demand, and the way the tests read around it.

Triton's backends report an execution's statistics just after sending its responses, so a client that
holds every answer may read counters that lack the last of them. A snapshot taken right after a
one-at-a-time loop could therefore miss the loop's last request, and the burst measured from it then
counted one request too many (test_encoder_batches_mixed_lengths_... once read 33 inferences for 32).
The window is normally microseconds; the probe model (probes/late_statistics) answers through the
response sender and then holds ``execute()``, which widens it to HOLD_MS, so the race happens every time.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from clients import ModelStatistics, TritonClient
from tritonlocal import LocalTritonServer, ServerConfig

PROBE = Path(__file__).parent / "probes" / "late_statistics"
MODEL = PROBE.name
HOLD_MS = 400
SHORT_HOLD_MS = 5  # shorter than the clients' statistics poll (clients.operations.STATISTICS_POLL_S)


@pytest.fixture()
def probe_server(tmp_path: Path) -> Iterator[LocalTritonServer]:
    shutil.copytree(PROBE, tmp_path / "repository" / MODEL)
    config = ServerConfig(model_repository=tmp_path / "repository", exit_timeout_s=2, stop_timeout_s=10)
    with LocalTritonServer(config) as server:
        yield server


def _infer(server: LocalTritonServer, hold_ms: int) -> None:
    tensor = httpclient.InferInput("HOLD_MS", [1], "INT32")
    tensor.set_data_from_numpy(np.array([hold_ms], dtype=np.int32))
    with httpclient.InferenceServerClient(server.http_url) as client:
        assert client.infer(MODEL, [tensor]).as_numpy("ECHO").tolist() == [hold_ms]


def test_statistics_read_right_after_an_answer_lack_it_until_the_server_counts_it(
    probe_server: LocalTritonServer,
) -> None:
    with TritonClient(f"http://{probe_server.http_url}") as stats:
        start = stats.statistics(MODEL)
        _infer(probe_server, HOLD_MS)
        assert stats.statistics(MODEL).since(start).inferences == 0  # the answer is here, its count is not
        assert stats.statistics_since(start, requests=1).inferences == 1


def test_a_burst_measured_from_a_snapshot_of_the_settled_counters_counts_only_itself(
    probe_server: LocalTritonServer,
) -> None:
    burst = 3
    with TritonClient(f"http://{probe_server.http_url}") as stats:
        start = stats.statistics(MODEL)
        _infer(probe_server, HOLD_MS)  # the last request of a one-at-a-time loop
        hasty = stats.statistics(MODEL)  # the flaky read: taken before the loop's last request is counted
        stats.statistics_since(start, requests=1)  # what the tests do: wait until the loop is counted...
        settled = stats.statistics(MODEL)  # ...then take the snapshot the burst is measured from
        for _ in range(burst):
            _infer(probe_server, 0)
        from_hasty = stats.statistics_since(hasty, requests=burst)
        from_settled = stats.statistics_since(settled, requests=burst)
    assert from_hasty.inferences == burst + 1  # the flake: one request of the loop counted in the burst
    assert from_settled.inferences == burst


def test_a_settled_snapshot_counts_requests_answered_before_it_when_no_count_is_known(
    probe_server: LocalTritonServer,
    settled_statistics: Callable[[TritonClient, str], ModelStatistics],
) -> None:
    """Another test's requests, whose number this test does not know: the snapshot is read once the
    counters hold still. Each earlier request is counted SHORT_HOLD_MS after its answer, a window far
    wider than Triton's own (microseconds) and narrower than the client's poll interval."""
    burst = 3
    with TritonClient(f"http://{probe_server.http_url}") as stats:
        for _ in range(2):
            _infer(probe_server, SHORT_HOLD_MS)
        settled = settled_statistics(stats, MODEL)
        for _ in range(burst):
            _infer(probe_server, 0)
        assert settled.inferences == 2
        assert stats.statistics_since(settled, requests=burst).inferences == burst
