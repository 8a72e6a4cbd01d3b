"""What the benchmark shows while it runs: stage headers, points done and the time left from the
declared durations; plain lines off a terminal, a bar on one, nothing with --quiet."""

from __future__ import annotations

import io
import logging
from pathlib import Path

import pytest

from loadtest.bench import progress as bench_progress
from loadtest.bench.progress import EXPECTED_S, POINT_LOGGERS, BenchProgress, expected_stage_s
from loadtest.experiments import inprocess, plans, registry, served
from tritonrepo.progress import Progress, duration

SERVED = logging.getLogger(POINT_LOGGERS[0])
REPOSITORY = Path(__file__).resolve().parents[2] / "model_repository"


def test_every_mode_declares_how_long_each_experiment_takes() -> None:
    assert set(EXPECTED_S) == set(plans.PLANS)
    for mode, table in EXPECTED_S.items():
        assert set(registry.KEYS) <= set(table), mode
        assert all(seconds > 0 for seconds in table.values()), mode


def test_the_point_loggers_are_the_loggers_the_experiments_write_their_points_to() -> None:
    assert {served.logger.name, inprocess.logger.name} == set(POINT_LOGGERS)


def test_each_in_process_point_measured_is_counted_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="loadtest.experiments")
    (encoder,) = [e for e in plans.exported_models(REPOSITORY, 1, "onnxruntime") if e.pipeline == "text"]
    stream = io.StringIO()
    run = BenchProgress(Progress(stream=stream, bars=False), {"inprocess": 10.0})
    with run.stage("inprocess"):
        points = inprocess.measure(
            encoder, batch_sizes=(1, 2), items=4, rounds=1, arms=[inprocess.Arm(workers=1, threads=1)]
        )
    assert len(points) == 2
    assert stream.getvalue().splitlines()[-1].endswith(", 2 points")


def test_only_the_stages_left_in_are_expected_and_left_out_experiments_cost_nothing() -> None:
    everything = expected_stage_s("quick", ())
    assert list(everything) == list(registry.STAGES)
    only_profile = expected_stage_s("quick", tuple(k for k in registry.KEYS if k != "profile"))
    assert only_profile == {"profile": EXPECTED_S["quick"]["profile"]}
    without_ragged = expected_stage_s("quick", ("ragged",))
    assert everything["served"] - without_ragged["served"] == EXPECTED_S["quick"]["ragged"]


def test_the_time_left_is_the_rest_of_the_stage_and_every_later_stage() -> None:
    run = BenchProgress(Progress(stream=io.StringIO(), bars=False), {"served": 100.0, "profile": 20.0})
    assert run.time_left_s("served", 0.0) == 120.0
    assert run.time_left_s("served", 30.0) == 90.0
    assert run.time_left_s("served", 500.0) == 20.0  # past its estimate: the later stages remain
    assert run.time_left_s("profile", 5.0) == 15.0


def test_plain_output_names_the_stage_counts_its_points_and_says_the_time_left(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="loadtest.experiments")
    stream = io.StringIO()
    run = BenchProgress(Progress(stream=stream, bars=False), {"served": 100.0, "profile": 20.0})
    with run.stage("served"):
        for _ in range(3):
            SERVED.info("a point")
        SERVED.warning("not a point")
    lines = stream.getvalue().splitlines()
    assert lines[0] == "stage 1 of 2: served (expected about 1m40s; about 2m00s left in the run)"
    assert lines[-1].startswith("stage 1 of 2: served done in ") and lines[-1].endswith(", 3 points")


def test_a_plain_line_comes_with_new_points_or_after_a_minute_without_one() -> None:
    stream = io.StringIO()
    run = BenchProgress(Progress(stream=stream, bars=False), {"served": 100.0, "profile": 20.0})
    counter = bench_progress._PointCounter()
    status = bench_progress._Status(run, "served", "stage 1 of 2: served", counter, started=0.0)
    counter.points = 3
    status.tick(None, now=30.0)
    status.tick(None, now=31.0)  # nothing new
    status.tick(None, now=30.0 + bench_progress.PLAIN_HEARTBEAT_S)
    assert stream.getvalue().splitlines() == [
        "stage 1 of 2: served: 3 points, 30s in, about 1m30s left in the run",
        "stage 1 of 2: served: 3 points, 1m30s in, about 30s left in the run",
    ]


def test_a_terminal_gets_a_bar_and_quiet_gets_nothing(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="loadtest.experiments")
    terminal, quiet = io.StringIO(), io.StringIO()
    for progress in (Progress(stream=terminal, bars=True), Progress(stream=quiet, quiet=True, bars=True)):
        run = BenchProgress(progress, {"profile": 20.0})
        with run.stage("profile"):
            SERVED.info("a point")
    assert "stage 1 of 1: profile (expected about 20s" in terminal.getvalue()
    assert "stage 1/1 profile" in terminal.getvalue()  # the bar's label
    assert quiet.getvalue() == ""


def test_durations_read_as_people_write_them() -> None:
    assert [duration(s) for s in (0, 45.4, 185, 3720, -3)] == ["0s", "45s", "3m05s", "1h02m", "0s"]
