"""The one progress display (tritonrepo/progress.py) of the export, the load tests and the batch job:
one duration format, progress on standard error, results on standard output, a bar only on a terminal
that has a width."""

from __future__ import annotations

import fcntl
import io
import os
import struct
import sys
import termios

import pytest

from tritonrepo.progress import Progress, duration, is_terminal


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_durations_read_one_way_everywhere() -> None:
    assert [duration(s) for s in (0, 45.4, 185, 3720, -3)] == ["0s", "45s", "3m05s", "1h02m", "0s"]
    assert duration(None) == "?"


def test_progress_goes_to_stderr_and_results_to_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    progress = Progress()
    assert progress.stream is sys.stderr
    progress.line("stage 1 of 2")
    progress.result("image_classifier: 12.5 images/s")
    captured = capsys.readouterr()
    assert captured.err == "stage 1 of 2\n" and captured.out == "image_classifier: 12.5 images/s\n"


def test_a_count_off_a_terminal_prints_a_line_each_tenth_and_after_a_silence() -> None:
    clock, stream = Clock(), io.StringIO()
    with Progress(stream=stream).count(total=20, unit="input", clock=clock) as count:
        count.update(ok=True)  # 1 of 20: not yet a tenth
        clock.now = 12.0
        count.update(ok=False)  # 2 of 20: a tenth, and a silence of 12 s
        count.update(ok=True)  # 3 of 20
        clock.now = 30.0
        count.update(ok=True)  # 4 of 20: a tenth, 18 s after the last line
    lines = stream.getvalue().splitlines()
    assert lines == [
        "progress: 2/20 inputs (1 ok, 1 errors), 0.2/s, 12s elapsed",
        "progress: 4/20 inputs (3 ok, 1 errors), 0.1/s, 30s elapsed",
    ]
    assert (count.done, count.ok, count.errors) == (4, 3, 1)


def test_a_quiet_count_shows_nothing_and_a_bar_shows_the_errors_and_the_time() -> None:
    quiet, terminal = io.StringIO(), io.StringIO()
    with Progress(stream=quiet, quiet=True).count(total=3, unit="input") as count:
        for ok in (True, False, True):
            count.update(ok=ok)
    assert quiet.getvalue() == "" and count.errors == 1
    clock = Clock()
    with Progress(stream=terminal, bars=True).count(total=3, unit="input", clock=clock) as count:
        for ok in (True, False, True):
            clock.now += 62
            count.update(ok=ok)
        count.bar.refresh()
    assert "3/3 inputs, 1 errors, 3m06s elapsed" in terminal.getvalue()
    assert "<" not in terminal.getvalue(), "no tqdm clock: one duration format"


def test_a_terminal_without_a_width_gets_lines_not_a_bar_cut_to_nothing() -> None:
    leader, follower = os.openpty()  # a pseudo-terminal, 0 columns until its size is set
    with os.fdopen(follower, "w") as terminal:
        assert terminal.isatty() and not is_terminal(terminal)
        assert not Progress(stream=terminal).bars
        fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        assert is_terminal(terminal) and Progress(stream=terminal).bars
        assert not Progress(stream=terminal, quiet=True).bars
    os.close(leader)
    assert not is_terminal(io.StringIO())
