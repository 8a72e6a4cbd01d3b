"""Precision variants: the gates compute what they claim, and only a variant that passes is served."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from export.common import ExportError
from export.precision import records
from export.precision import selection as precision
from export.precision.device import Capabilities, CudaDevice, why_unavailable
from export.precision.gates import image_gate, nearest_neighbours, overlap, text_gate
from export.precision.selection import Variant, select_and_write

NO_BF16 = Capabilities(cpu_flags=frozenset({"avx2", "avx512f"}))
WITH_BF16 = Capabilities(cpu_flags=frozenset({"avx512_bf16", "avx512_vnni"}))


# -- timing workloads ----------------------------------------------------------------------------------------
def test_a_resized_workload_groups_the_batch_one_items_into_each_size_and_keeps_every_item() -> None:
    images = [(np.full((1, 3, 2, 2), i, np.float32), 1) for i in range(5)]
    resized = precision.resized_workload({1: images, 4: [(np.zeros((4, 3, 2, 2)), 4)]}, [8, 2, 1])
    assert list(resized) == [1, 2, 8]
    assert [[count for _, count in resized[size]] for size in (1, 2, 8)] == [[1] * 5, [2] * 3, [8]]
    twos = np.concatenate([batch for batch, _ in resized[2]])[:, 0, 0, 0]
    assert twos.tolist() == [0, 1, 2, 3, 4, 0]  # consecutive items, cycling past the last
    assert resized[8][0][0].shape == (8, 3, 2, 2)


def test_a_resized_ragged_text_batch_concatenates_token_ids_and_lengths() -> None:
    singles = [((np.arange(n, dtype=np.int64), np.array([n], np.int32)), 1) for n in (3, 5, 2)]
    ((ids, lengths), count), *_ = precision.resized_workload({1: singles}, [3])[3]
    assert count == 3 and lengths.tolist() == [3, 5, 2] and ids.tolist() == [0, 1, 2, 0, 1, 2, 3, 4, 0, 1]


@pytest.mark.parametrize(("workload", "sizes", "says"), [
    ({1: [(np.zeros((1, 2)), 1)]}, [0, 4], "must be positive, got [0, 4]"),
    ({32: [(np.zeros((32, 2)), 32)]}, [4], "no batch-1 items to form other sizes from (sizes [32])"),
])  # fmt: skip
def test_a_resized_workload_refuses_what_it_cannot_form(workload: dict, sizes: list, says: str) -> None:
    with pytest.raises(ValueError, match=re.escape(says)):
        precision.resized_workload(workload, sizes)


def test_every_variant_is_timed_on_the_powers_of_two_up_to_its_max_batch_size_or_32() -> None:
    assert precision.curve_sizes(64) == (1, 2, 4, 8, 16, 32)
    assert precision.curve_sizes(8) == (1, 2, 4, 8)
    assert precision.curve_sizes(24) == (1, 2, 4, 8, 16, 24)  # the full batch itself, as the kinds time it
    assert precision.curve_sizes(1) == (1,)


def test_the_curve_keeps_the_pipelines_own_batches_and_forms_the_sizes_between() -> None:
    images = [(np.full((1, 3, 2, 2), i, np.float32), 1) for i in range(5)]
    own_full = [(np.zeros((4, 3, 2, 2)), 4)]
    curve = precision.curve_workload({1: images, 4: own_full}, precision.curve_sizes(4))
    assert list(curve) == [1, 2, 4]
    assert curve[1] is images and curve[4] is own_full  # a length-sorted text batch stays as it was
    assert [count for _, count in curve[2]] == [2, 2, 2]
    many = [(np.full((1, 3, 2, 2), i, np.float32), 1) for i in range(64)]
    formed = precision.curve_workload({1: many}, precision.curve_sizes(8))
    assert [len(formed[size]) for size in (2, 4, 8)] == [precision.CURVE_BATCHES] * 3  # not 32, 16, 8
    assert len({float(batch[0, 0, 0, 0]) for batch, _ in formed[2]}) == precision.CURVE_BATCHES  # distinct


# -- gates --------------------------------------------------------------------------------------------------
def _unit(rows: np.ndarray) -> np.ndarray:
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def test_text_gate_passes_identical_embeddings_with_perfect_numbers() -> None:
    embeddings = _unit(np.random.default_rng(0).normal(size=(20, 8)))
    result = text_gate(embeddings, embeddings.copy())
    assert result.passed
    assert result.metrics["mean_cosine"] == pytest.approx(1.0)
    assert result.metrics["min_cosine"] == pytest.approx(1.0)
    assert result.metrics["neighbour_recall_at_5"] == 1.0


def test_text_gate_reports_the_worst_cosine_and_fails_below_the_minimum() -> None:
    reference = np.eye(8)[:7] * 1.0
    candidate = reference.copy()
    angle = np.arccos(0.98)  # one row turned to cosine 0.98; the other six unchanged
    candidate[0] = np.cos(angle) * reference[0] + np.sin(angle) * np.eye(8)[7]
    result = text_gate(reference, candidate, k=2)
    assert result.metrics["min_cosine"] == pytest.approx(0.98)
    assert result.metrics["mean_cosine"] == pytest.approx((6 + 0.98) / 7)
    assert not result.passed
    assert any(failure.startswith("min_cosine 0.98000 < 0.99") for failure in result.failures)


def test_text_gate_fails_a_variant_whose_embedding_depends_on_its_batch() -> None:
    embeddings = _unit(np.random.default_rng(2).normal(size=(20, 8)))
    alone = embeddings.copy()
    alone[3] = _unit(alone[3:4] + 0.05)[0]  # the same sentence, embedded alone, moves a little
    result = text_gate(embeddings, embeddings, alone=alone)
    assert result.metrics["min_cosine_batched_vs_alone"] < 0.9999
    assert not result.passed and "min_cosine_batched_vs_alone" in result.failures[0]
    assert text_gate(embeddings, embeddings, alone=embeddings.copy()).passed


def test_neighbour_recall_counts_the_share_of_reference_neighbours_kept() -> None:
    angles = np.deg2rad([0.0, 10.0, 20.0, 100.0])  # unit vectors: 0's nearest is 1, 3's nearest is 2
    reference = np.stack([np.cos(angles), np.sin(angles)], axis=1)
    assert nearest_neighbours(reference, 1)[:, 0].tolist() == [1, 0, 1, 2]
    assert overlap(np.array([[1, 2], [0, 3]]), np.array([[2, 5], [3, 0]])).tolist() == [0.5, 1.0]


def test_image_gate_allows_one_top1_change_in_a_hundred_but_not_two() -> None:
    rng = np.random.default_rng(1)
    reference = rng.normal(size=(100, 10))
    one, two = reference.copy(), reference.copy()
    for logits, rows in ((one, [0]), (two, [0, 1])):
        for row in rows:
            first, second = np.argsort(-logits[row])[:2]
            logits[row, [first, second]] = logits[row, [second, first]]  # swap the top two
    assert image_gate(reference, one).metrics["top1_agreement"] == pytest.approx(0.99)
    assert image_gate(reference, one).passed
    assert image_gate(reference, one).metrics["top5_overlap"] == 1.0  # the same five, reordered
    failed = image_gate(reference, two)
    assert failed.metrics["top1_agreement"] == pytest.approx(0.98) and not failed.passed


def test_image_gate_of_a_classifier_of_fewer_than_five_classes_ranks_all_of_them() -> None:
    reference = np.array([[3.0, 2.0, 1.0], [0.0, 1.0, 2.0]])
    swapped = reference[:, [1, 0, 2]]  # the first image's top two classes change places
    result = image_gate(reference, swapped)
    assert result.metrics["top1_agreement"] == 0.5 and result.metrics["top3_overlap"] == 1.0
    assert set(result.thresholds) == {"top1_agreement", "top3_overlap"} and not result.passed


def test_gates_reject_arrays_of_different_shapes() -> None:
    with pytest.raises(ValueError, match="one shape"):
        image_gate(np.zeros((3, 10)), np.zeros((4, 10)))


# -- capabilities -------------------------------------------------------------------------------------------
def test_bf16_and_fp16_are_unavailable_without_the_hardware_for_them() -> None:
    assert why_unavailable("bf16", "cpu", NO_BF16) is not None
    assert why_unavailable("bf16", "cpu", WITH_BF16) is None
    assert why_unavailable("fp16", "cpu", WITH_BF16) is not None
    assert "CUDA" in why_unavailable("fp16", "cuda", WITH_BF16)
    assert why_unavailable("int8", "cpu", NO_BF16) is None


def test_cpu_int8_is_not_offered_where_a_gpu_serves_the_model() -> None:
    gpu = CudaDevice(name="NVIDIA L4", compute_capability=(8, 9))
    with_gpu = Capabilities(cpu_flags=frozenset({"avx512_vnni"}), cuda=gpu)
    assert "GPU" in why_unavailable("int8", "cpu", with_gpu)
    assert why_unavailable("fp16", "cuda", with_gpu) is None
    assert with_gpu.as_dict()["served_on_gpu"] is True
    # ... and a GPU machine exporting for CPU servers (--served-on cpu).
    for_cpu_server = Capabilities(cpu_flags=frozenset({"avx512_vnni"}), cuda=gpu, served_on="cpu")
    assert why_unavailable("int8", "cpu", for_cpu_server) is None


def test_the_export_command_says_where_the_models_will_be_served() -> None:
    from export.__main__ import _parser

    assert _parser().parse_args([]).served_on == "here"
    assert _parser().parse_args(["--served-on", "gpu"]).served_on == "gpu"
    with pytest.raises(SystemExit):
        _parser().parse_args(["--served-on", "tpu"])


# -- selection ----------------------------------------------------------------------------------------------
def _variant(name: str, kind: str, output: float, built: list[str]) -> Variant:
    """A variant whose file holds its name and whose runner returns ``output`` for every input."""

    def build(path: Path):
        built.append(name)
        path.write_text(name)
        return lambda batch: np.full((len(batch), 4), output)

    return Variant(name=name, precision=kind, device="cpu", build=build)


def _gate(runner) -> object:
    """Passes when the runner reproduces the reference output 1.0."""
    reference = np.ones((10, 4))
    candidate = runner(np.zeros(10))
    return image_gate(reference + np.arange(4), candidate + np.arange(4) * (candidate[0, 0] == 1.0))


@pytest.fixture
def speeds(monkeypatch: pytest.MonkeyPatch) -> dict[str, float]:
    """Injected items/s per variant (set by each test), instead of timing on a shared machine."""
    table: dict[str, float] = {}
    monkeypatch.setattr(precision, "_time", _fake_time(table))
    return table


def _fake_time(table: dict[str, float]):
    def time(candidates, runners, workload, min_s, **_) -> None:
        for candidate in candidates:
            if candidate.status == "passed":
                candidate.items_per_s = {size: table[candidate.variant] for size in workload}

    return time


def _select(
    tmp_path: Path,
    variants: list[Variant],
    choice: str = "auto",
    capabilities=WITH_BF16,
    sizes: tuple[int, ...] = (1, 32),
    **options: object,
):
    """``select_and_write`` for model "m" into ``tmp_path/model.onnx`` (holding "old" before), gated by
    ``_gate`` on a workload of ``sizes``: (selection, destination)."""
    destination = tmp_path / "model.onnx"
    destination.write_text("old")
    selection = select_and_write(
        model="m",
        destination=destination,
        variants=variants,
        gate=_gate,
        workload={size: [(np.zeros(size), size)] for size in sizes},
        choice=choice,
        capabilities=capabilities,
        **options,  # type: ignore[arg-type]
    )
    return selection, destination


def test_the_fastest_variant_that_passes_is_served(tmp_path: Path, speeds: dict) -> None:
    built: list[str] = []
    speeds.update({"fp32": 100.0, "bf16": 250.0})
    variants = [_variant("fp32", "fp32", 1.0, built), _variant("bf16", "bf16", 1.0, built)]
    selection, destination = _select(tmp_path, variants)
    assert selection.served == "bf16" and destination.read_text() == "bf16"
    assert [c.status for c in selection.candidates] == ["passed", "served"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx"]  # no temporary left behind


def test_a_broken_variant_fails_its_gate_and_is_never_served(
    tmp_path: Path, speeds: dict[str, float]
) -> None:
    built: list[str] = []
    speeds.update({"fp32": 100.0, "int8": 1000.0})
    variants = [_variant("fp32", "fp32", 1.0, built), _variant("int8", "int8", 0.0, built)]
    selection, destination = _select(tmp_path, variants)
    broken = selection.candidates[1]
    assert broken.status == "failed gate" and not broken.gate.passed
    assert "top1_agreement" in broken.reason and broken.items_per_s == {}
    assert selection.served == "fp32" and destination.read_text() == "fp32"


def test_a_machine_without_bf16_falls_back_to_fp32(tmp_path: Path, speeds: dict) -> None:
    built: list[str] = []
    speeds.update({"fp32": 100.0, "bf16": 250.0})
    variants = [_variant("fp32", "fp32", 1.0, built), _variant("bf16", "bf16", 1.0, built)]
    selection, destination = _select(tmp_path, variants, capabilities=NO_BF16)
    assert built == ["fp32"]
    assert selection.candidates[1].status == "not runnable here" and "bf16" in selection.candidates[1].reason
    assert destination.read_text() == "fp32"


def test_precision_fp32_pins_fp32_even_when_another_is_faster(
    tmp_path: Path, speeds: dict[str, float]
) -> None:
    built: list[str] = []
    speeds.update({"fp32": 100.0, "bf16": 250.0, "int8": 400.0})
    variants = [_variant(name, name, 1.0, built) for name in ("fp32", "bf16", "int8")]
    selection, destination = _select(tmp_path, variants, choice="fp32")
    assert built == ["fp32"] and destination.read_text() == "fp32"
    assert [c.status for c in selection.candidates] == ["served", "not requested", "not requested"]


def test_when_no_variant_passes_the_old_file_is_kept_and_the_selection_says_why(
    tmp_path: Path, speeds: dict[str, float]
) -> None:
    built: list[str] = []
    selection, destination = _select(tmp_path, [_variant("int8", "int8", 0.0, built)], choice="int8")
    assert selection.served is None and destination.read_text() == "old"
    assert "no variant passed for --precision int8" in selection.failure
    assert "int8: failed gate (top1_agreement 0.00000 < 0.99" in selection.failure
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx"]
    assert selection.as_dict()["served"] is None and selection.as_dict()["failure"] == selection.failure


def _raising(name: str, kind: str, device: str = "cpu", *, when: str) -> Variant:
    """A variant that raises while it is built, or whose runner raises when called (gated or timed)."""

    def fail(*_args: object) -> np.ndarray:
        raise RuntimeError(f"CUDA error: an illegal memory access was encountered ({name})")

    def build(path: Path):
        path.write_text(name)
        if when == "building":
            fail()
        return fail

    return Variant(name=name, precision=kind, device=device, build=build)


def test_a_variant_that_raises_while_built_or_gated_is_recorded_and_the_others_still_served(
    tmp_path: Path, speeds: dict[str, float]
) -> None:
    built: list[str] = []
    speeds.update({"bf16": 250.0})
    variants = [
        _raising("fp32", "fp32", when="building"),  # the float32 variant is no exception
        _raising("int8", "int8", when="gating"),
        _variant("bf16", "bf16", 1.0, built),
    ]
    selection, destination = _select(tmp_path, variants)
    assert selection.served == "bf16" and destination.read_text() == "bf16"
    fp32, int8, _ = selection.candidates
    assert fp32.status == int8.status == "error"
    assert (
        fp32.reason == "building: RuntimeError: CUDA error: an illegal memory access was encountered (fp32)"
    )
    assert int8.reason.startswith("gating: RuntimeError: CUDA error") and int8.gate is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx"]  # no temporary left behind


def test_a_variant_that_raises_while_timed_is_recorded_and_not_served(tmp_path: Path) -> None:
    calls = {"n": 0}

    def passes_the_gate_then_raises(path: Path):
        path.write_text("bf16")

        def run(batch):
            calls["n"] += 1
            if calls["n"] > 1:  # the gate's call passes; timing's calls fail
                raise RuntimeError("CUDA out of memory")
            return np.full((len(batch), 4), 1.0)

        return run

    variants = [
        _variant("fp32", "fp32", 1.0, []),
        Variant(name="bf16", precision="bf16", device="cpu", build=passes_the_gate_then_raises),
    ]
    selection, destination = _select(tmp_path, variants, sizes=(1,), timing_min_s=0.001)
    bf16 = selection.candidates[1]
    assert bf16.status == "error" and bf16.reason == "timing: RuntimeError: CUDA out of memory"
    assert bf16.items_per_s == {} and bf16.gate is not None and bf16.gate.passed
    assert selection.served == "fp32" and destination.read_text() == "fp32"


def test_the_record_round_trips_into_the_reports_table(tmp_path: Path, speeds: dict) -> None:
    built: list[str] = []
    speeds.update({"fp32": 100.0, "int8": 1000.0})
    variants = [_variant("fp32", "fp32", 1.0, built), _variant("int8", "int8", 0.0, built)]
    selection, _ = _select(tmp_path, variants)
    records.write_record(selection.as_dict(), tmp_path / "records")
    loaded = records.load_records(tmp_path / "records")
    assert [r["served"] for r in loaded] == ["fp32"]
    assert records.served_variant("m", tmp_path / "records") == "fp32"
    rows = records.report_section(tmp_path / "records").splitlines()
    served = next(row for row in rows if row.startswith("| m | fp32 | served |"))
    failed = next(row for row in rows if row.startswith("| m | int8 | failed gate |"))
    assert "top1_agreement 1.0000" in served and "1: 100, 32: 100" in served
    assert "top1_agreement 0.0000" in failed
    assert records.report_section(tmp_path / "records").startswith(
        "Served variants: m: fp32 (--precision auto)"
    )
    assert records.report_section(tmp_path / "none").startswith("No precision records")
    assert records.served_variant("m", tmp_path / "none") == "fp32"


def test_a_curve_of_timed_batch_sizes_is_rendered_in_size_order_with_the_cost_of_its_largest_batch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record = {
        "format": records.RECORD_FORMAT, "model": "m", "choice": "auto", "served": "fp16", "failure": None,
        "reference": None,
        "candidates": [
            {"variant": "fp16", "precision": "fp16", "status": "served", "reason": "", "gate": None,
             "items_per_s": {"16": 1600.0, "1": 200.0, "2": 390.0}},
            {"variant": "fp32", "precision": "fp32", "status": "passed", "reason": "", "gate": None,
             "items_per_s": {"1": 100.0, "32": 800.0}},
        ],
    }  # fmt: skip
    records.write_record(record, tmp_path)
    assert records.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "| m | fp16 | served | 200 | 390 | 1600 | 2.00x |" in out  # 16 items at 200/s alone: 2x one
    assert "| batch 1 | batch 2 | batch 16 |" in out and "| m | fp32 |" not in out.split("Items/s")[1]
    assert "1: 200, 2: 390, 16: 1600 |" in out  # the gate table too, in size order
    assert records.main(["--help"]) == 2


def test_a_failed_export_is_recorded_and_nothing_reads_it_as_served(tmp_path: Path, speeds: dict) -> None:
    selection, _ = _select(tmp_path, [_variant("int8", "int8", 0.0, [])], choice="int8")
    records.write_record(selection.as_dict(), tmp_path / "records")
    section = records.report_section(tmp_path / "records")
    assert "m: nothing, the export failed: no variant passed for --precision int8" in section
    assert "| m | - | export failed, nothing served | no variant passed" in section
    assert "| m | int8 | failed gate | " in section
    with pytest.raises(ExportError, match="m: the last export wrote no servable file"):
        records.served_variant("m", tmp_path / "records")


def test_a_reference_noise_floor_is_recorded_and_listed_beside_the_variants(
    tmp_path: Path, speeds: dict
) -> None:
    speeds.update({"fp32": 100.0})
    logits = np.array([[1.0, 0.99, 0.0], [1.0, 0.0, 0.0]])
    floor = image_gate(logits, np.array([[0.99, 1.0, 0.0], [1.0, 0.0, 0.0]]), k=2)  # the first input flips
    selection, destination = _select(
        tmp_path, [_variant("fp32", "fp32", 1.0, [])], sizes=(1,), reference=floor
    )
    assert selection.served == "fp32" and selection.reference is floor
    records.write_record(selection.as_dict(), tmp_path / "records")
    (record,) = records.load_records(tmp_path / "records")
    assert record["reference"]["metrics"]["top1_agreement"] == 0.5 and not record["reference"]["passed"]
    rows = records.report_section(tmp_path / "records").splitlines()
    assert any(
        row.startswith("| m | image | reference, not a variant |") and "top1_agreement 0.5000" in row
        for row in rows
    )
    assert "reference (image): top1_agreement 0.50000" in precision.format_table(selection.candidates, floor)


def test_the_fp32_file_is_kept_for_the_benchmark_when_another_precision_is_served(
    tmp_path: Path, speeds: dict
) -> None:
    built: list[str] = []
    speeds.update({"fp32": 100.0, "bf16": 250.0})
    variants = [_variant("fp32", "fp32", 1.0, built), _variant("bf16", "bf16", 1.0, built)]
    selection, destination = _select(tmp_path, variants, sizes=(1,), keep_dir=tmp_path / "records" / "m")
    records.write_record(selection.as_dict(), tmp_path / "records")
    assert destination.read_text() == "bf16"
    assert records.served_variant("m", tmp_path / "records") == "bf16"
    kept = records.kept_file("m", "fp32", tmp_path / "records")
    assert kept == tmp_path / "records" / "m" / "fp32.onnx" and kept.read_text() == "fp32"
    assert records.kept_file("m", "bf16", tmp_path / "records") is None


def test_an_unknown_precision_is_refused_with_the_choices(tmp_path: Path) -> None:
    with pytest.raises(ExportError, match="use --precision auto"):
        _select(tmp_path, [], choice="int4")
