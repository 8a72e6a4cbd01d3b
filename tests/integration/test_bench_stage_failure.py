"""A stage that crashes fails the benchmark (exit code 1) without losing the other stages' results: the
real runner, its central stage made to raise, its profile stage measuring the exported models for real."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadtest.bench import run

FORCED = "forced failure of the central stage"


def test_a_crashed_stage_exits_1_and_the_other_stages_results_are_still_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real_runners = run.stage_runners

    def central_raises(*args: object, **kwargs: object) -> dict:
        def crash() -> dict:
            raise RuntimeError(FORCED)

        return {**real_runners(*args, **kwargs), "central": crash}  # type: ignore[arg-type]

    monkeypatch.setattr(run, "stage_runners", central_raises)
    argv = ["--mode", "quick", "--only", "central,profile", "--output", str(tmp_path), "--run-id", "crash"]
    assert run.main([*argv, "--quiet"]) == 1

    folder = tmp_path / "crash"
    results = json.loads((folder / "results.json").read_text())
    assert results["errors"] == [f"central: RuntimeError: {FORCED}"]
    assert set(results["stage_durations_s"]) == {"central", "profile"}
    assert results["profiles"], "the profile stage after the crash ran and was recorded"
    assert sorted(p.name for p in (folder / "raw" / "profiles").iterdir())
    assert FORCED in (folder / "report.md").read_text()
    out, err = capsys.readouterr()
    assert out.strip() == f"report: {folder / 'report.md'}"
    assert f"failed: central: RuntimeError: {FORCED}" in err
    assert "Traceback" not in out
