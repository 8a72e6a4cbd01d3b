"""The export's progress (export/progress.py): models and variants as N of M, what runs now, the time
elapsed and left (from the variants done), as a bar on a terminal, plain lines elsewhere, or nothing."""

from __future__ import annotations

import contextlib
import fcntl
import io
import os
import struct
import termios

import pytest

from export.__main__ import _parser
from export.progress import Progress, duration, mode_for


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


ESTIMATES = {"first": {"first_onnx": 2}, "second": {"second_onnx": 2, "second_torchscript": 1}}


def _lines(stream: io.StringIO) -> list[str]:
    return stream.getvalue().splitlines()


def test_plain_lines_say_the_model_the_variants_what_runs_and_the_time_left() -> None:
    clock, stream = Clock(), io.StringIO()
    progress = Progress(mode="lines", stream=stream, clock=clock)
    progress.start(ESTIMATES)
    progress.model("first")
    progress.step("first_onnx onnx-fp32: building")
    assert _lines(stream)[-1] == (
        "[00:00 elapsed, ? left] model 1/2 first, variants 0/5 - first_onnx onnx-fp32: building"
    )
    clock.now += 30
    progress.variant_done("first_onnx")
    progress.step("first_onnx onnx-fp32: timing, round 1 of 3")
    assert _lines(stream)[-1].startswith("[00:30 elapsed, 02:00 left] model 1/2 first, variants 1/5 - ")
    progress.expect("first_onnx", 4)  # the plan is known: two more than estimated
    clock.now += 30
    progress.step("first_onnx onnx-int8: gating")
    assert _lines(stream)[-1] == (
        "[01:00 elapsed, 06:00 left] model 1/2 first, variants 1/7 - first_onnx onnx-int8: gating"
    )


def test_an_up_to_date_or_failed_file_expects_no_more_variants() -> None:
    progress = Progress(mode="quiet", clock=Clock())
    progress.start(ESTIMATES)
    progress.variant_done("second_onnx")
    progress.settle("second_onnx")  # failed after its first variant
    progress.settle("second_torchscript")  # up to date
    assert (progress.done, progress.total) == (1, 3)
    progress.expect("first_onnx", 0)
    assert progress.total == 1 and progress.left_s == 0


def test_a_terminal_gets_a_bar_with_the_same_facts(monkeypatch: pytest.MonkeyPatch) -> None:
    clock, stream = Clock(), Terminal()
    progress = Progress(mode=mode_for(stream, quiet=False), stream=stream, clock=clock)
    with contextlib.closing(progress):
        assert progress.mode == "bar"
        progress.start(ESTIMATES)
        progress.model("second")
        progress.step("second_onnx onnx-fp32: gating")
        progress.variant_done("second_onnx")
        progress.write("second: done in 1.0 s")
    shown = stream.getvalue()
    assert "model 2/2 second" in shown and "1/5 variants" in shown
    assert "now: second_onnx onnx-fp32: gating" in shown and "elapsed" in shown and "left" in shown
    assert "second: done in 1.0 s\n" in shown


def test_quiet_shows_nothing_and_a_log_gets_plain_lines() -> None:
    stream = io.StringIO()
    progress = Progress(mode=mode_for(stream, quiet=True), stream=stream)
    progress.start(ESTIMATES)
    progress.model("first")
    progress.variant_done("first_onnx")
    assert stream.getvalue() == "" and progress.done == 1
    assert mode_for(io.StringIO(), quiet=False) == "lines"
    assert _parser().parse_args(["--quiet"]).quiet and not _parser().parse_args([]).quiet
    with pytest.raises(ValueError, match="progress mode must be one of"):
        Progress(mode="fancy")


def test_a_terminal_without_a_width_gets_lines_not_a_bar_cut_to_nothing() -> None:
    leader, follower = os.openpty()  # a pseudo-terminal, 0 columns until its size is set
    with os.fdopen(follower, "w") as terminal:
        assert terminal.isatty() and mode_for(terminal, quiet=False) == "lines"
        fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        assert mode_for(terminal, quiet=False) == "bar"
    os.close(leader)


def test_durations_read_as_minutes_and_seconds() -> None:
    assert duration(None) == "?"
    assert duration(75) == "01:15" and duration(3725) == "1:02:05"
