"""The export's timings are steady-state (export/precision/timing.py): the first, slower calls of a runtime
are not counted, a call stalled by another process does not move the figure, and the threads are the server's.
Runners here advance a clock of their own instead of taking time: no figure depends on this machine."""

from __future__ import annotations

import os
import types
from pathlib import Path

import pytest
import torch

from export.pipeline import local_threads
from export.precision import onnx_graph, timing
from tritonrepo.configs import instance_count, load_model_config, threads_per_instance
from tritonrepo.paths import REPOSITORY

# Milliseconds per call of a small TorchScript network at batch 1 as the profiling executor warms it up:
# recording, optimising, then about a millisecond and a quarter.
WARMING = [35.0, 18.0, 1.4, 1.25, 1.25, 1.25]


class Clock:
    """A perf_counter that moves only when a runner says a call took so long."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(timing, "time", types.SimpleNamespace(perf_counter=clock.perf_counter))
    return clock


def _runner(clock: Clock, milliseconds: list[float], then: float = 1.25):
    """A runner whose calls take ``milliseconds`` in turn, then ``then`` each; it counts its calls."""
    calls: list[float] = []

    def run(batch: object) -> None:
        cost = milliseconds[len(calls)] if len(calls) < len(milliseconds) else then
        calls.append(cost)
        clock.now += cost / 1000

    run.calls = calls  # type: ignore[attr-defined]
    return run


def test_warm_up_goes_on_until_the_time_per_call_stops_falling(clock: Clock) -> None:
    runner = _runner(clock, WARMING)
    assert timing.warm_up(runner, [(None, 1)]) == 6  # 35, 18, 1.4, 1.25 falling; two calls no faster
    assert timing.warm_up(_runner(clock, [], then=900.0), [(None, 32)]) == timing.WARMUP_MIN_CALLS


def test_the_first_calls_are_not_counted(clock: Clock) -> None:
    rate = timing.items_per_second(_runner(clock, WARMING), [(None, 1)], min_s=0.5)
    assert rate == pytest.approx(800.0)  # 1.25 ms per item; with the warm-up counted it would read less


def test_a_call_stalled_by_another_process_does_not_move_the_figure(clock: Clock) -> None:
    stalled = [1.25] * 50 + [200.0] + [1.25] * 50  # one call waited for a core during the timed window
    rate = timing.items_per_second(_runner(clock, WARMING + stalled), [(None, 4)], min_s=0.1)
    assert rate == pytest.approx(3200.0)


def test_a_warm_runner_gets_one_call_before_timing_not_a_warm_up(clock: Clock) -> None:
    runner = _runner(clock, [])
    timing.items_per_second(runner, [(None, 1)], min_s=0.01, warm=True)
    assert len(runner.calls) == 1 + 8  # one call, then 8 x 1.25 ms >= 10 ms  # type: ignore[attr-defined]


def test_torch_and_onnxruntime_get_the_servers_threads_inside_and_their_own_after(
    two_layer_onnx: Path,
) -> None:
    before = torch.get_num_threads()
    with timing.serving_threads(1):
        assert torch.get_num_threads() == 1
        options = onnx_graph.session(two_layer_onnx).get_session_options()
        assert (options.intra_op_num_threads, options.inter_op_num_threads) == (1, 1)
    assert torch.get_num_threads() == before
    assert onnx_graph.session(two_layer_onnx).get_session_options().intra_op_num_threads == 0


@pytest.mark.parametrize("model", ["efficientnet_lite0_torchscript", "mobilenet_v2_onnx"])
def test_the_export_times_with_the_threads_the_local_server_gives_each_instance(model: str) -> None:
    config = load_model_config(REPOSITORY / model)
    cores = os.cpu_count() or 1
    assert local_threads(REPOSITORY / model, config) == threads_per_instance(cores, instance_count(config))
