from __future__ import annotations

import io
from pathlib import Path

import pytest

from loadtest.soak.cli import build_parser, main, soak_config
from loadtest.soak.faults import phase_counts
from loadtest.soak.progress import SoakProgress
from loadtest.soak.report import growth, windows, write_report
from loadtest.soak.run import SoakConfig, Tally, sample_row
from tritonrepo.progress import Progress


def _rows(rss: list[float], *, warmup: int = 2, sample_s: float = 60.0) -> list[dict]:
    tally = Tally()
    rows = []
    for index, value in enumerate(rss):
        tally.record("image", 0.05, None)
        tally.record("text", 0.01, None if index else "text: ServerOverloadedError: queue full")
        phase = "warmup" if index < warmup else "soak"
        rows.append(sample_row(sample_s * (index + 1), phase, sample_s, tally.drain(), {"a_0_0": value}))
    return rows


def test_growth_compares_the_first_and_last_minutes_after_warmup() -> None:
    rows = _rows([500, 900, 1000, 1000, 1010, 1020, 1040, 1050])
    first, last = windows(rows, sample_s=60.0)
    assert [row["rss_total_mb"] for row in first] == [1000, 1000]
    assert [row["rss_total_mb"] for row in last] == [1040, 1050]
    assert growth(first, last, "rss_total_mb") == pytest.approx(0.045)


def test_the_summary_states_the_verdict_and_counts_only_errors_after_warmup(tmp_path: Path) -> None:
    config = SoakConfig(minutes=6, warmup_minutes=2, sample_s=60, output=tmp_path)
    rows = _rows([500, 900, 1000, 1000, 1010, 1020, 1080, 1100])
    result = {"capacity": {"image": 10.0, "text": 20.0}, "rates": {"image": 6.0, "text": 12.0}}
    summary = write_report({**result, "rows": rows, "error_messages": {}}, config, command="soak")
    assert "grew +9.0% over the soak (over the 5% limit); zero errors." in summary
    assert "| resident memory, a_0_0 (MB) | 1000.0 | 1090.0 | +9.0% |" in summary
    assert (tmp_path / "soak.png").stat().st_size > 0 and (tmp_path / "summary.md").read_text() == summary


def test_a_soak_needs_a_duration_and_a_fraction_of_capacity() -> None:
    with pytest.raises(ValueError, match="minutes must be positive"):
        SoakConfig(minutes=0)
    with pytest.raises(ValueError, match="fraction of capacity"):
        SoakConfig(minutes=1, fraction=1.5)


def test_the_command_line_sets_the_options_given_and_keeps_the_configs_defaults() -> None:
    args = build_parser().parse_args(["--minutes", "2", "--in-flight", "4", "--output", "out/soak"])
    assert soak_config(args) == SoakConfig(minutes=2.0, in_flight=4, output=Path("out", "soak"))


def test_the_fault_phase_counts_lost_requests_apart_from_arrivals_the_generator_shed(tmp_path: Path) -> None:
    config = SoakConfig(minutes=2, warmup_minutes=0, sample_s=60, fault_minutes=1, output=tmp_path)
    rows = _rows([1000, 1000], warmup=0)
    tally = Tally()
    for _ in range(5):
        tally.record("image", 0.05, None)
    tally.record("text", 0.05, "text: ServerUnavailableError: cannot reach the server")
    tally.record_shed("text")
    tally.record_shed("image")
    rows.append(sample_row(180.0, "fault", 60.0, tally.drain(), {}))
    assert phase_counts(rows, ("image", "text")) == {"sent": 6, "lost": 1, "shed": 2}
    result = {"capacity": {"image": 10.0, "text": 20.0}, "rates": {"image": 6.0, "text": 12.0}}
    faults = ["at 0 s: SIGKILL to the stub of text_tokenizer_0_0, served again 3.0 s later"]
    summary = write_report(
        {**result, "rows": rows, "error_messages": {"text: x": 1}, "faults": faults}, config, command="soak"
    )
    assert "- requests sent by the project's client during the phase: 6, lost: 1 (1 x text: x)" in summary
    assert "(arrivals past its backlog limit): 2" in summary and f"- {faults[0]}" in summary
    assert "errors after warm-up: 1" in summary.lower()  # the soak's own error, not the fault phase's


def test_each_sample_line_says_the_phase_the_time_elapsed_and_left() -> None:
    stream = io.StringIO()
    config = SoakConfig(minutes=2, warmup_minutes=1, fault_minutes=1, sample_s=60)
    progress = SoakProgress(Progress(stream=stream, bars=False), config)
    assert progress.plan() == "warmup 1m00s, soak 2m00s, fault 1m00s: 4m00s in all"
    with progress.running():
        for row in _rows([1000, 1010], warmup=1):
            progress.sample(row)
    lines = stream.getvalue().splitlines()
    assert [line.partition(")")[0] + ")" for line in lines] == [
        "warmup  1m00s of 4m00s (3m00s left)",
        "soak    2m00s of 4m00s (2m00s left)",
    ]
    assert lines[1].endswith("images    0.0/s texts    0.0/s errors 0 shed 0 rss   1010.0 MB")


def test_a_terminal_gets_a_bar_over_the_soak_and_quiet_gets_nothing() -> None:
    terminal, quiet = io.StringIO(), io.StringIO()
    config = SoakConfig(minutes=2, warmup_minutes=1, sample_s=60)
    for progress in (Progress(stream=terminal, bars=True), Progress(stream=quiet, bars=True, quiet=True)):
        soak = SoakProgress(progress, config)
        with soak.running():
            for row in _rows([1000, 1010], warmup=1):
                soak.sample(row)
    bar = terminal.getvalue()
    assert "soak:" in bar and "warmup:" in bar and "120/180" in bar  # the bar: phase, seconds of all
    assert quiet.getvalue() == ""


def test_a_bad_value_is_a_usage_error_naming_it_without_a_traceback(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--minutes", "-1"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "minutes must be positive" in err and "got -1.0" in err and "Traceback" not in err
