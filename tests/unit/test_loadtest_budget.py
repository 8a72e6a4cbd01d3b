"""The time budget's arithmetic on real recorded runs (tests/unit/budget_records/, captured from the local
tritonserver), its report section, and the Python models' own timings, written by the served batcher and
read back."""

from __future__ import annotations

import copy
import json
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from clients.stats import parse_statistics
from loadtest.budget.cli import build_parser, main, plan_of
from loadtest.experiments.budget import (
    CLIENT,
    COMPUTE,
    MODEL_CODE,
    QUEUE,
    REMAINDER,
    STUB,
    TOLERANCE,
    WRAPPER,
    Budget,
    from_record,
)
from loadtest.experiments.budget_stage import BudgetPlan
from loadtest.load.quantiles import quantile
from loadtest.load.stub_timings import read_stub_times, server_environment, stub_times_since
from loadtest.report.budget_section import part_labels, section
from tritonrepo.served_code import load_served_module

RECORDS = Path(__file__).resolve().parent / "budget_records"
HELPER = Path(__file__).resolve().parents[2] / "model_repository" / "pybackend_batching.py"


def record(name: str) -> dict:
    return json.loads((RECORDS / f"{name}.json").read_text())


def delta(run: dict, model: str, counter: str) -> tuple[int, int]:
    """(ns, count) of one counter of ``model`` between the record's two payloads."""
    before, after = (
        next(e for e in run[key]["model_stats"] if e["name"] == model)
        for key in ("statistics_before", "statistics_after")
    )
    if counter == "executions":
        return 0, after["execution_count"] - before["execution_count"]
    b, a = before["inference_stats"][counter], after["inference_stats"][counter]
    return int(a["ns"]) - int(b["ns"]), int(a["count"]) - int(b["count"])


def part(budget: Budget, step: str, kind: str) -> float:
    (found,) = [p.ms for p in budget.parts if p.step == step and p.kind == kind]
    return found


# -- the arithmetic ----------------------------------------------------------------------------------------
def test_a_steps_queue_is_its_counters_delta_divided_by_requests_not_executions() -> None:
    run = record("image_classifier_c8")
    budget = from_record(run)
    ns, requests = delta(run, "efficientnet_lite0_onnx", "queue")
    _, executions = delta(run, "efficientnet_lite0_onnx", "executions")
    assert executions < requests, "the recorded run batched requests: the two divisions differ"
    assert part(budget, "efficientnet_lite0_onnx", QUEUE) == pytest.approx(ns / requests / 1e6)
    facts = {f.model: f for f in budget.steps}["efficientnet_lite0_onnx"]
    assert (facts.requests, facts.executions) == (requests, executions)
    assert facts.average_batch == pytest.approx(requests / executions)


def test_the_client_share_is_the_round_trip_minus_the_services_request_time() -> None:
    run = record("text_embedder_c8")
    budget = from_record(run)
    ns, count = delta(run, "text_embedder", "success")
    mean = sum(run["latencies_ms"]) / len(run["latencies_ms"])
    assert budget.mean_ms == pytest.approx(mean) and budget.server_ms == pytest.approx(ns / count / 1e6)
    assert part(budget, "", CLIENT) == pytest.approx(mean - ns / count / 1e6)


def test_an_ensembles_own_compute_counters_are_its_steps_and_are_not_counted_again() -> None:
    run = record("image_classifier_c1")
    steps = run["steps"]
    own, _ = delta(run, "image_classifier", "compute_infer")
    assert own == sum(delta(run, step, "compute_infer")[0] for step in steps), "Triton sums them"
    budget = from_record(run)
    assert {p.step for p in budget.parts if p.step} == set(steps), "the ensemble itself is no step"
    computed = sum(p.ms for p in budget.parts if p.kind in (COMPUTE, MODEL_CODE, WRAPPER, STUB))
    assert computed == pytest.approx(own / len(run["latencies_ms"]) / 1e6)


@pytest.mark.parametrize(
    "name", ["image_classifier_c1", "image_classifier_c8", "text_embedder_c8", "diabetes_classifier_onnx_c1"]
)
def test_the_parts_and_the_remainder_make_the_mean_round_trip(name: str) -> None:
    budget = from_record(record(name))
    assert sum(p.ms for p in budget.parts) == pytest.approx(budget.mean_ms)
    assert [p.kind for p in budget.parts].count(REMAINDER) == 1 and budget.parts[-1].kind == REMAINDER
    assert budget.adds_up, f"{name}: {budget.remainder_ms:.3f} ms of {budget.mean_ms:.3f} unaccounted"


def test_a_step_without_statistics_is_missed_and_the_budget_says_so() -> None:
    run = record("image_classifier_c8")
    for key in ("statistics_before", "statistics_after"):
        run[key]["model_stats"] = [
            e for e in run[key]["model_stats"] if e["name"] != "efficientnet_lite0_onnx"
        ]
    budget = from_record(run)
    assert budget.remainder_ms > TOLERANCE * budget.mean_ms and not budget.adds_up
    assert any("efficientnet_lite0_onnx: no statistics" in note for note in budget.notes)
    text = section([budget], Path("/nonexistent"), plots=False)
    assert "does not add up" in text and "the parts miss" in text and "**not accounted for**" in text


def test_a_python_steps_compute_splits_into_its_code_the_batching_around_it_and_the_stubs_share() -> None:
    run = record("text_embedder_c1")
    budget = from_record(run)
    for step in run["steps"]:
        ns, requests = delta(run, step, "compute_infer")
        before = run["stub_before"].get(step, {"model_ns": 0, "execute_ns": 0})
        timed = run["stub_after"][step]["model_ns"] - before["model_ns"]
        executed = run["stub_after"][step]["execute_ns"] - before["execute_ns"]
        assert part(budget, step, MODEL_CODE) == pytest.approx(timed / requests / 1e6)
        assert part(budget, step, WRAPPER) == pytest.approx((executed - timed) / requests / 1e6)
        assert part(budget, step, STUB) == pytest.approx((ns - executed) / requests / 1e6)
        assert part(budget, step, WRAPPER) > 0 and part(budget, step, STUB) > 0


def test_timings_that_counted_other_requests_leave_the_compute_whole() -> None:
    run = record("diabetes_classifier_onnx_c1")
    run["stub_after"]["diabetes_classifier_onnx"]["requests"] += 1
    budget = from_record(run)
    assert [p.kind for p in budget.parts if p.step] == [QUEUE, "input copy", COMPUTE, "output copy"]
    assert any("its compute is left whole" in note for note in budget.notes)


def test_a_server_without_timings_leaves_every_compute_whole_and_says_why() -> None:
    run = record("image_classifier_c1")
    run["stub_before"] = run["stub_after"] = None
    budget = from_record(run)
    assert not any(p.kind in (MODEL_CODE, WRAPPER, STUB) for p in budget.parts)
    assert any("PYBACKEND_TIMINGS_DIR" in note for note in budget.notes)


def test_a_budget_reads_back_from_its_results_json_form() -> None:
    budget = from_record(record("image_classifier_c8"))
    again = Budget.from_dict(json.loads(json.dumps(budget.to_dict())))
    assert again == budget and again.adds_up == budget.adds_up


def test_time_per_execution_comes_from_the_batch_statistics() -> None:
    run = record("image_classifier_c8")
    after = next(e for e in run["statistics_after"]["model_stats"] if e["name"] == "image_postprocess")
    before = next(e for e in run["statistics_before"]["model_stats"] if e["name"] == "image_postprocess")
    ns = sum(int(b["compute_infer"]["ns"]) for b in after["batch_stats"])
    ns -= sum(int(b["compute_infer"]["ns"]) for b in before["batch_stats"])
    executions = after["execution_count"] - before["execution_count"]
    facts = {f.model: f for f in from_record(run).steps}["image_postprocess"]
    assert facts.ms_per_execution == pytest.approx(ns / executions / 1e6)


# -- the report ------------------------------------------------------------------------------------------
def test_the_section_lists_the_parts_in_the_order_a_request_meets_them(tmp_path: Path) -> None:
    runs = [from_record(record("image_classifier_c1")), from_record(record("image_classifier_c8"))]
    runs[1].parts = [p for p in runs[1].parts if not (p.step == "image_postprocess" and p.kind == STUB)]
    labels = part_labels(runs)
    assert labels[0] == CLIENT and labels[-1] == REMAINDER
    assert labels.index("image_preprocess: queue") < labels.index("efficientnet_lite0_onnx: queue")
    assert labels.index("image_postprocess: Python stub") < labels.index("image_postprocess: output copy")
    text = section(runs, tmp_path)
    stub_row = next(line for line in text.splitlines() if line.startswith("| image_postprocess: Python stub"))
    assert stub_row.endswith("| - |"), "a part missing from one load reads '-', not 0"
    assert (tmp_path / "budget_image_classifier.png").stat().st_size > 0


# -- the Python models' timings ---------------------------------------------------------------------------
@pytest.fixture
def helper(fake_pb_utils) -> types.ModuleType:
    name = "_test_budget_batching_helper"
    yield load_served_module(HELPER, name=name)
    sys.modules.pop(name, None)


def _batcher(helper: types.ModuleType, name: str):
    config = {
        "name": name,
        "input": [{"name": "X", "data_type": "TYPE_FP32"}],
        "output": [{"name": "Y", "data_type": "TYPE_FP32"}],
    }
    return helper.RequestBatcher(config, prepare=lambda x: x * 2, run=lambda x: x + 1)


def test_the_batcher_writes_its_timings_where_the_servers_environment_says(
    helper, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in server_environment(tmp_path).items():
        monkeypatch.setenv(key, value)
    batcher = _batcher(helper, "scaler")
    before = read_stub_times(tmp_path)
    assert before == {}, "an instance that has not executed has nothing to say"
    responses = batcher.execute([{"X": np.ones((1, 2))}, {"X": np.ones((3, 2))}])
    batcher.execute([{"X": np.zeros((1, 2))}])
    assert responses[1].outputs["Y"].tolist() == [[3.0, 3.0]] * 3, "timed, the answers are the same"
    times = read_stub_times(tmp_path)["scaler"]
    assert (times.executions, times.requests) == (2, 3)
    assert 0 < times.model_ns < times.execute_ns, "the model's callables run inside execute()"
    assert stub_times_since(before, {"scaler": times})["scaler"] == times


def test_without_the_variable_the_batcher_times_nothing(
    helper, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in server_environment(tmp_path):
        monkeypatch.delenv(key, raising=False)
    batcher = _batcher(helper, "scaler")
    batcher.execute([{"X": np.ones((1, 2))}])
    assert batcher.timings is None and list(tmp_path.iterdir()) == []


def test_a_models_instances_are_summed_and_an_unreadable_file_is_skipped(tmp_path: Path) -> None:
    for pid, requests in ((1, 3), (2, 4)):
        record_ = {
            "model": "m",
            "pid": pid,
            "executions": 1,
            "requests": requests,
            "execute_ns": 10,
            "model_ns": 5,
        }
        (tmp_path / f"m.{pid}.json").write_text(json.dumps(record_).ljust(512))
    (tmp_path / "m.3.json").write_text('{"model": "m", "pid"')  # caught mid-write
    times = read_stub_times(tmp_path)["m"]
    assert (times.executions, times.requests, times.execute_ns, times.model_ns) == (2, 7, 20, 10)


# -- the command's options -------------------------------------------------------------------------------
def test_a_plan_refuses_a_load_it_cannot_send() -> None:
    with pytest.raises(ValueError, match="in_flight and requests must be at least 1"):
        BudgetPlan(in_flight=(0,))
    with pytest.raises(ValueError, match="protocol must be grpc or http"):
        BudgetPlan(protocol="udp")


def test_the_command_refuses_a_bad_in_flight_list_with_a_usage_error(capsys: pytest.CaptureFixture) -> None:
    assert main(["--in-flight", "1,many", "--output", "/nonexistent"]) == 2
    assert "--in-flight takes comma-separated whole numbers" in capsys.readouterr().err
    assert plan_of(build_parser().parse_args(["--in-flight", "4"])).in_flight == (4,)


def test_recorded_statistics_parse_with_the_clients_own_parser() -> None:
    run = copy.deepcopy(record("image_classifier_c1"))
    parsed = {s.model: s for s in parse_statistics(run["statistics_after"])}
    assert set(parsed) == {"image_classifier", *run["steps"]}


def test_a_quantile_is_a_latency_some_request_had_and_nothing_without_requests() -> None:
    latencies = [float(ms) for ms in range(100, 0, -1)]  # 1..100 ms, in no particular order
    assert [quantile(latencies, q) for q in (0.5, 0.99, 1.0)] == [51.0, 100.0, 100.0]
    assert quantile([7.5, 2.5], 0.5) == 7.5  # one of them, not their mean
    assert quantile([], 0.99) == 0.0
