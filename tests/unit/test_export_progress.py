"""The export's progress (export/progress.py): models and variants as N of M, what runs now, the time
elapsed and left (from the variants done), through the project's one display (tritonrepo/progress.py):
a bar on a terminal, plain lines elsewhere, or nothing; results apart from it on standard output."""

from __future__ import annotations

import contextlib
import io

import pytest

from export.__main__ import _parser
from export.progress import ExportProgress
from tritonrepo.progress import Progress


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


ESTIMATES = {"first": {"first_onnx": 2}, "second": {"second_onnx": 2, "second_torchscript": 1}}


def _lines(stream: io.StringIO) -> list[str]:
    return stream.getvalue().splitlines()


def test_plain_lines_say_the_model_the_variants_what_runs_and_the_time_left() -> None:
    clock, stream = Clock(), io.StringIO()
    progress = ExportProgress(Progress(stream=stream), clock=clock)
    progress.start(ESTIMATES)
    progress.model("first")
    progress.step("first_onnx onnx-fp32: building")
    assert _lines(stream)[-1] == (
        "[0s elapsed, ? left] model 1/2 first, variants 0/5 - first_onnx onnx-fp32: building"
    )
    clock.now += 30
    progress.variant_done("first_onnx")
    progress.step("first_onnx onnx-fp32: timing, round 1 of 3")
    assert _lines(stream)[-1].startswith("[30s elapsed, 2m00s left] model 1/2 first, variants 1/5 - ")
    progress.expect("first_onnx", 4)  # the plan is known: two more than estimated
    clock.now += 30
    progress.step("first_onnx onnx-int8: gating")
    assert _lines(stream)[-1] == (
        "[1m00s elapsed, 6m00s left] model 1/2 first, variants 1/7 - first_onnx onnx-int8: gating"
    )


def test_an_up_to_date_or_failed_file_expects_no_more_variants() -> None:
    progress = ExportProgress(clock=Clock())
    progress.start(ESTIMATES)
    progress.variant_done("second_onnx")
    progress.settle("second_onnx")  # failed after its first variant
    progress.settle("second_torchscript")  # up to date
    assert (progress.done, progress.total) == (1, 3)
    progress.expect("first_onnx", 0)
    assert progress.total == 1 and progress.left_s == 0


def test_a_terminal_gets_a_bar_with_the_same_facts_and_results_go_to_stdout(
    capsys: pytest.CaptureFixture[str],
) -> None:
    clock, stream = Clock(), io.StringIO()
    progress = ExportProgress(Progress(stream=stream, bars=True), clock=clock)
    with contextlib.closing(progress):
        progress.start(ESTIMATES)
        progress.model("second")
        progress.step("second_onnx onnx-fp32: gating")
        clock.now += 185
        progress.variant_done("second_onnx")
        progress.step("second_onnx onnx-fp16: gating")
        progress.write("second: done in 1.0 s")
    shown = stream.getvalue()
    assert "model 2/2 second" in shown and "1/5 variants" in shown
    assert "[3m05s elapsed, 12m20s left] now: second_onnx onnx-fp16: gating" in shown
    assert "second: done in 1.0 s" not in shown
    assert capsys.readouterr().out == "second: done in 1.0 s\n"


def test_quiet_shows_nothing_but_the_results() -> None:
    stream = io.StringIO()
    progress = ExportProgress(Progress(stream=stream, quiet=True))
    progress.start(ESTIMATES)
    progress.model("first")
    progress.step("first_onnx onnx-fp32: building")
    progress.variant_done("first_onnx")
    assert stream.getvalue() == "" and progress.done == 1
    assert _parser().parse_args(["--quiet"]).quiet and not _parser().parse_args([]).quiet
