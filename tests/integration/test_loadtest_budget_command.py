"""``python -m loadtest.budget`` end to end at tiny counts: it derives a repository for the text ensemble,
starts the real local tritonserver with the Python models timing themselves, sends real sentences at two
loads, stops the server, and writes a budget whose parts make the measured mean round trip, the
unaccounted remainder named in its own row, every step's compute split into the model's code, the
batching and tensors around it and the Python stub's share."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from loadtest.experiments.budget import MODEL_CODE, REMAINDER, STUB, TOLERANCE, WRAPPER, Budget

SERVICE = "text_embedder"


@pytest.fixture(scope="module")
def budget_run(tmp_path_factory: pytest.TempPathFactory, run_python: Callable[..., object]) -> Path:
    output = tmp_path_factory.mktemp("budget")
    run_python(
        *["-m", "loadtest.budget", "--services", SERVICE, "--in-flight", "1,4", "--requests", "16"],
        *["--inprocess-repeats", "1", "--output", output, "--run-id", "run"],
        timeout_s=900,
    )
    return output / "run"


def test_each_budget_adds_up_or_names_what_is_missing(budget_run: Path) -> None:
    written = json.loads((budget_run / "budget.json").read_text())
    budgets = [Budget.from_dict(b) for b in written["budgets"]]
    assert [(b.service, b.in_flight, b.requests) for b in budgets] == [(SERVICE, 1, 16), (SERVICE, 4, 16)]
    for budget in budgets:
        assert sum(p.ms for p in budget.parts) == pytest.approx(budget.mean_ms)
        assert budget.parts[-1].kind == REMAINDER
        assert budget.adds_up == (abs(budget.remainder_ms) <= TOLERANCE * budget.mean_ms)
        assert budget.server_ms > 0 and budget.inprocess is not None
    report = (budget_run / "budget.md").read_text()
    assert "**not accounted for**" in report
    assert f"python -m loadtest.budget --services {SERVICE}" in report, "the header gives the command"
    assert (budget_run / f"budget_{SERVICE}.png").stat().st_size > 0


def test_the_servers_python_models_timed_themselves_for_every_step(budget_run: Path) -> None:
    budgets = [Budget.from_dict(b) for b in json.loads((budget_run / "budget.json").read_text())["budgets"]]
    for budget in budgets:
        steps = {f.model for f in budget.steps}
        assert steps == {"text_tokenizer", "minilm_onnx"}
        for step in steps:
            kinds = {p.kind for p in budget.parts if p.step == step}
            assert {MODEL_CODE, WRAPPER, STUB} <= kinds, (
                f"{step} at {budget.in_flight}: {kinds}; {budget.notes}"
            )
    records = sorted((budget_run / "raw").glob("budget_*.json"))
    assert [r.name for r in records] == [f"budget_{SERVICE}_c1.json", f"budget_{SERVICE}_c4.json"]
