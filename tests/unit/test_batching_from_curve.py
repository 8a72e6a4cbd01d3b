"""The batcher's settings chosen from a measured batch-cost curve (description/batching.py), the latency
budget a description states (description/module_spec.py) and the choice the export records and reports
(export/precision/records.py). The curves' batch 1 and largest rates are the export's records on the
2-core CPU (docs/measurements.md, "Steady-state timing in the export"); the sizes between follow them."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from description.batching import PAYING_RATIO, UNPAID_LARGEST_BATCH, UNPAID_LEVEL, choose_batching
from description.errors import DescriptionError
from description.model import load_description, parse_description
from export.precision.records import batching_choice, batching_table

ROOT = Path(__file__).resolve().parents[2]
TABULAR = ROOT / "model_descriptions" / "diabetes_classifier.yaml"

# A batch does not pay: efficientnet_lite0_onnx, 85 items/s alone and 72 in batches of 32.
IMAGE = {1: 85.0, 2: 86.0, 4: 84.0, 8: 82.0, 16: 78.0, 32: 72.0}
# A batch does not pay and a batch of 8 runs slower than one of 4: efficientnet_lite0_torchscript.
SLOWER_AT_8 = {1: 66.6, 2: 72.2, 4: 72.9, 8: 62.1, 16: 52.5, 32: 40.9}
# It pays: minilm_onnx, 139 alone and 315 in batches of 32.
TEXT = {1: 139.0, 2: 180.0, 4: 230.0, 8: 270.0, 16: 300.0, 32: 315.0}
# It pays hugely: the tabular model, 27,900 rows/s alone and 692,000 in batches of 32.
TABULAR_CURVE = {1: 27_900.0, 2: 55_000.0, 4: 105_000.0, 8: 200_000.0, 16: 380_000.0, 32: 692_000.0}
# Linear cost: every item costs the same, batched or not.
LINEAR = {1: 50.0, 2: 50.0, 4: 50.0, 8: 50.0, 16: 50.0, 32: 50.0}


def test_a_curve_where_a_batch_does_not_pay_gets_small_preferred_sizes_and_no_delay() -> None:
    for curve in (IMAGE, LINEAR):
        choice = choose_batching(curve, max_batch_size=64, latency_budget_ms=1000)
        assert choice.max_queue_delay_us == 0, choice
        assert max(choice.preferred_batch_sizes) <= UNPAID_LARGEST_BATCH, choice
        assert choice.preferred_batch_sizes == (4, 8)
        assert "does not pay" in choice.preferred_reason and "no waiting" in choice.delay_reason


def test_an_unpaid_curve_stops_below_a_size_that_runs_slower_than_the_best_small_one() -> None:
    choice = choose_batching(SLOWER_AT_8, max_batch_size=64, latency_budget_ms=1000)
    assert choice.preferred_batch_sizes == (2, 4) and choice.max_queue_delay_us == 0
    assert "up to 4" in choice.preferred_reason
    assert "a batch of 8 runs at 0.85x the best rate up to 8 (73 items/s)" in choice.preferred_reason


def test_the_level_threshold_separates_noise_from_a_slower_batch() -> None:
    level = {1: 100.0, 2: 100.0, 4: 100.0, 8: 100.0 * UNPAID_LEVEL + 0.5, 16: 80.0, 32: 70.0}
    slower = {1: 100.0, 2: 100.0, 4: 100.0, 8: 100.0 * UNPAID_LEVEL - 0.5, 16: 80.0, 32: 70.0}
    assert choose_batching(level, max_batch_size=32, latency_budget_ms=1000).preferred_batch_sizes == (4, 8)
    assert choose_batching(slower, max_batch_size=32, latency_budget_ms=1000).preferred_batch_sizes == (2, 4)


def test_a_paying_curve_is_capped_at_its_peak_and_waits_for_nothing() -> None:
    choice = choose_batching(TEXT, max_batch_size=64, latency_budget_ms=1000)
    assert choice.preferred_batch_sizes == (16, 32)
    assert choice.max_queue_delay_us == 0 and "no waiting" in choice.delay_reason
    assert "peaks at 32" in choice.preferred_reason
    rows = choose_batching(TABULAR_CURVE, max_batch_size=64, latency_budget_ms=20)
    assert rows.preferred_batch_sizes == (16, 32) and rows.max_queue_delay_us == 0


def test_a_budget_below_the_peak_batchs_compute_lowers_the_cap() -> None:
    # Batches of 32 sentences compute in 102 ms, of 16 in 53 ms, of 8 in 30 ms.
    choice = choose_batching(TEXT, max_batch_size=64, latency_budget_ms=60)
    assert choice.preferred_batch_sizes == (8, 16)
    assert "a batch of 32 would exceed the budget" in choice.preferred_reason
    tight = choose_batching(TEXT, max_batch_size=64, latency_budget_ms=32)
    assert tight.preferred_batch_sizes == (4, 8) and tight.max_queue_delay_us == 0


def test_a_budget_shorter_than_one_item_alone_serves_batches_of_one() -> None:
    choice = choose_batching(IMAGE, max_batch_size=64, latency_budget_ms=5)
    assert (choice.preferred_batch_sizes, choice.max_queue_delay_us) == ((1,), 0)
    assert "over the 5 ms budget" in choice.preferred_reason


def test_the_paying_threshold_separates_noise_from_a_gain() -> None:
    just_under = {1: 100.0, 2: 100.0, 4: 100.0 * PAYING_RATIO - 1, 8: 110.0, 16: 80.0, 32: 70.0}
    just_over = {1: 100.0, 2: 100.0, 4: 100.0 * PAYING_RATIO + 1, 8: 110.0, 16: 80.0, 32: 70.0}
    under = choose_batching(just_under, max_batch_size=32, latency_budget_ms=1000)
    over = choose_batching(just_over, max_batch_size=32, latency_budget_ms=1000)
    assert under.preferred_batch_sizes == (4, 8) and "does not pay" in under.preferred_reason
    assert over.preferred_batch_sizes == (2, 4) and "peaks at 4" in over.preferred_reason


def test_max_batch_size_is_the_clients_contract_and_stays() -> None:
    choice = choose_batching(TEXT, max_batch_size=64, latency_budget_ms=1000)
    assert choice.max_batch_size == 64 and "contract" in choice.max_batch_size_reason


@pytest.mark.parametrize(
    ("curve", "budget", "says"),
    [
        ({1: 10.0, 2: 20.0}, 100, "at 2 more sizes"),
        ({2: 10.0, 4: 20.0, 8: 30.0}, 100, "batch 1"),
        ({1: 10.0, 2: 0.0, 4: 30.0}, 100, "wrong: {2: 0.0}"),
        ({1: 10.0, 2: 20.0, 128: 30.0}, 100, "max_batch_size 64"),
        (TEXT, 0, "latency_budget_ms must be a positive number"),
    ],
)
def test_a_curve_or_budget_the_rule_cannot_use_is_refused_saying_why(
    curve: dict, budget: float, says: str
) -> None:
    with pytest.raises(ValueError) as raised:
        choose_batching(curve, max_batch_size=64, latency_budget_ms=budget)
    assert says in str(raised.value)


def test_a_description_states_its_latency_budget_once_and_a_bad_one_is_refused(tmp_path: Path) -> None:
    assert load_description(TABULAR).module.dynamic_batching.latency_budget_ms == 20.0  # type: ignore[union-attr]
    for bad in (0, -5, "fast", True, 120_000):
        data = yaml.safe_load(TABULAR.read_text())
        data["module"]["dynamic_batching"]["latency_budget_ms"] = bad
        with pytest.raises(DescriptionError) as raised:
            parse_description(data, source=tmp_path / "model.yaml")
        message = str(raised.value)
        assert "module.dynamic_batching.latency_budget_ms" in message and repr(bad) in message, message
    data = yaml.safe_load(TABULAR.read_text())
    del data["module"]["dynamic_batching"]["latency_budget_ms"]
    assert (
        parse_description(data, source=tmp_path / "m.yaml").module.dynamic_batching.latency_budget_ms is None
    )  # type: ignore[union-attr]


def test_a_latency_budget_on_a_python_model_is_refused_as_it_has_no_curve(tmp_path: Path) -> None:
    data = yaml.safe_load((ROOT / "model_descriptions" / "all_minilm_l6_v2.yaml").read_text())
    data["configs"]["python_models"][0]["dynamic_batching"]["latency_budget_ms"] = 50
    with pytest.raises(
        DescriptionError, match=r"python_models\[0\]\.dynamic_batching\.latency_budget_ms: a Python"
    ):
        parse_description(data, source=tmp_path / "model.yaml")


def _record(curve: dict[int, float], device: str = "cpu") -> dict:
    served = {"variant": "onnx-fp32", "device": device, "status": "served", "items_per_s": curve}
    passed = {"variant": "onnx-int8", "device": device, "status": "passed", "items_per_s": LINEAR}
    return {"model": "minilm_onnx", "candidates": [passed, served]}


def test_the_export_records_what_the_served_variants_curve_chooses_and_the_report_shows_it() -> None:
    record = _record({str(size): rate for size, rate in TEXT.items()})  # as JSON holds it
    chosen = batching_choice(record, max_batch_size=64, latency_budget_ms=1000)
    assert chosen is not None
    assert (chosen["device"], chosen["variant"], chosen["preferred_batch_sizes"]) == (
        "cpu",
        "onnx-fp32",
        [16, 32],
    )
    assert set(chosen["reasons"]) == {"preferred_batch_sizes", "max_queue_delay_us", "max_batch_size"}
    table = batching_table([record | {"batching": chosen}])
    assert "| minilm_onnx | onnx-fp32 (cpu) | 1000 ms | [16, 32] | 0 us |" in table
    assert "peaks at 32" in table


def test_nothing_is_recorded_without_a_budget_or_a_curve() -> None:
    assert batching_choice(_record(TEXT), max_batch_size=64, latency_budget_ms=None) is None
    assert batching_choice(_record({1: 139.0, 32: 315.0}), max_batch_size=64, latency_budget_ms=200) is None
