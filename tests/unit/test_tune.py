from __future__ import annotations

import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

from loadtest.tune.adopt import adopt
from loadtest.tune.plan import SWEEPS, make_plan, model_config_parameters
from loadtest.tune.results import Measurement, Settings, outcomes
from tritonrepo import cpu_overlay
from tritonrepo.configs import load_repository
from tritonrepo.derive import derive_local_config, derive_repository
from tritonrepo.errors import RepositoryError

REPOSITORY = Path(__file__).resolve().parents[2] / "model_repository"

NATIVE_CONFIG = """
name: "classifier"
platform: "onnxruntime_onnx"
max_batch_size: 16
input [ { name: "PIXELS__0" data_type: TYPE_FP32 dims: [ 3, 4, 4 ] } ]
output [ { name: "LOGITS__0" data_type: TYPE_FP32 dims: [ 10 ] } ]
dynamic_batching {
  preferred_batch_size: [ 4, 8 ]
  max_queue_delay_microseconds: 1000
  default_queue_policy { max_queue_size: 32 }
}
instance_group [ { count: 2 kind: KIND_GPU gpus: [ 0 ] } ]
"""


def _model(tmp_path: Path, overlay: str | None = None) -> Path:
    folder = tmp_path / "repo" / "classifier"
    (folder / "1").mkdir(parents=True)
    (folder / "1" / "model.onnx").write_text("not a real model")
    (folder / "config.pbtxt").write_text(textwrap.dedent(NATIVE_CONFIG))
    if overlay is not None:
        (folder / cpu_overlay.FILENAME).write_text(textwrap.dedent(overlay))
    return folder


def _measurement(
    variant: str,
    throughput: float,
    p99: float,
    *,
    within: bool,
    instances: int = 1,
    preferred: tuple[int, ...] = (8, 16),
) -> Measurement:
    return Measurement(
        model="classifier",
        variant=variant,
        concurrency=8,
        throughput_per_s=throughput,
        p99_ms=p99,
        within_budget=within,
        settings=Settings(
            instances=instances, max_queue_delay_us=4000, preferred_batch_sizes=preferred, max_batch_size=16
        ),
    )


def test_a_cpu_overlay_replaces_instances_and_batching_but_keeps_the_queue_policy(tmp_path: Path) -> None:
    _model(
        tmp_path,
        "instance_group [ { count: 1 kind: KIND_CPU } ]\n"
        "dynamic_batching { max_queue_delay_microseconds: 8000 preferred_batch_size: [ 16 ] }\n",
    )
    entry = load_repository(tmp_path / "repo")["classifier"]
    config = derive_local_config(entry, gpu_available=False, intra_op_threads=None)
    assert [(g.count, g.kind) for g in config.instance_group] == [
        (1, g.KIND_CPU) for g in config.instance_group
    ]
    assert config.dynamic_batching.max_queue_delay_microseconds == 8000
    assert list(config.dynamic_batching.preferred_batch_size) == [16]
    assert config.dynamic_batching.default_queue_policy.max_queue_size == 32
    assert config.max_batch_size == 16


def test_a_cpu_overlay_with_no_queue_delay_removes_the_deployable_delay(tmp_path: Path) -> None:
    # proto3 leaves a zero out of ListFields(); the overlay's 0 must still replace the deployable 1000 us.
    _model(tmp_path, "dynamic_batching { max_queue_delay_microseconds: 0 preferred_batch_size: [ 4, 8 ] }\n")
    entry = load_repository(tmp_path / "repo")["classifier"]
    assert entry.config.dynamic_batching.max_queue_delay_microseconds == 1000
    config = derive_local_config(entry, gpu_available=False, intra_op_threads=None)
    assert config.dynamic_batching.max_queue_delay_microseconds == 0
    assert list(config.dynamic_batching.preferred_batch_size) == [4, 8]
    assert config.dynamic_batching.default_queue_policy.max_queue_size == 32


def test_a_cpu_overlay_is_ignored_when_a_gpu_is_present(tmp_path: Path) -> None:
    _model(tmp_path, "instance_group [ { count: 1 kind: KIND_CPU } ]\n")
    entry = load_repository(tmp_path / "repo")["classifier"]
    config = derive_local_config(entry, gpu_available=True, intra_op_threads=None)
    assert config.instance_group[0].count == 2
    assert config.instance_group[0].kind == config.instance_group[0].KIND_GPU


def test_a_cpu_overlay_may_not_change_the_models_interface(tmp_path: Path) -> None:
    _model(tmp_path, 'input [ { name: "OTHER" data_type: TYPE_FP32 dims: [ 1 ] } ]\n')
    with pytest.raises(RepositoryError, match="input"):
        cpu_overlay.read_overlay(tmp_path / "repo" / "classifier")


def test_the_overlay_file_is_not_linked_into_the_local_repository(tmp_path: Path) -> None:
    _model(tmp_path, "instance_group [ { count: 1 kind: KIND_CPU } ]\n")
    derive_repository(tmp_path / "repo", tmp_path / "local")
    assert not (tmp_path / "local" / "classifier" / cpu_overlay.FILENAME).exists()
    assert "count: 1" in (tmp_path / "local" / "classifier" / "config.pbtxt").read_text()


def test_an_ensemble_is_tuned_through_its_exported_step() -> None:
    plan = make_plan(["image_classifier"], sweep="minimal", latency_budget_ms=500, source=REPOSITORY)
    assert plan.targets == {"image_classifier": "efficientnet_lite0_onnx"}


def test_the_load_to_tune_for_replaces_the_sweeps_concurrency_and_changes_the_plan() -> None:
    default = make_plan(["text_embedder"], sweep="quick", latency_budget_ms=250, source=REPOSITORY)
    at_32 = make_plan(
        ["text_embedder"], sweep="quick", latency_budget_ms=250, concurrency=[32], source=REPOSITORY
    )
    assert default.sweep.concurrency == (8,) and at_32.sweep.concurrency == (32,)
    assert at_32.sweep.instance_counts == default.sweep.instance_counts
    models = load_repository(REPOSITORY)
    assert at_32.fingerprint(models) != default.fingerprint(models)  # a resumed run never mixes two loads


def test_a_python_model_cannot_be_tuned() -> None:
    with pytest.raises(ValueError, match="python model"):
        make_plan(["image_preprocess"], sweep="minimal", latency_budget_ms=500, source=REPOSITORY)


def test_a_model_of_any_tensors_with_its_own_batcher_is_tuned_itself() -> None:
    plan = make_plan(["diabetes_classifier_onnx"], sweep="quick", latency_budget_ms=500, source=REPOSITORY)
    assert plan.targets == {"diabetes_classifier_onnx": "diabetes_classifier_onnx"}
    assert plan.profiles == SWEEPS["quick"].variants + 1


def test_preferred_batch_sizes_above_the_models_max_batch_size_are_refused_naming_a_sweep_that_fits(
    tmp_path: Path,
) -> None:
    _model(tmp_path)  # max_batch_size 16: the quick sweep prefers 32
    with pytest.raises(
        ValueError, match=r"'quick' prefers batch sizes \[32\], above classifier's max_batch_size 16.*minimal"
    ):
        make_plan(["classifier"], sweep="quick", latency_budget_ms=500, source=tmp_path / "repo")
    assert make_plan(["classifier"], sweep="minimal", latency_budget_ms=500, source=tmp_path / "repo").targets


def test_a_model_without_a_batch_dimension_is_refused(tmp_path: Path) -> None:
    config = _model(tmp_path) / "config.pbtxt"
    unbatched = config.read_text().replace("max_batch_size: 16", "max_batch_size: 0")
    config.write_text(unbatched.replace("dims: [ 3, 4, 4 ]", "dims: [ 1, 3, 4, 4 ]"))
    with pytest.raises(ValueError, match="max_batch_size 0: a model without a batch dimension"):
        make_plan(["classifier"], sweep="minimal", latency_budget_ms=500, source=tmp_path / "repo")


def test_the_sweep_gives_model_analyzer_one_list_per_swept_field() -> None:
    sweep = SWEEPS["quick"]
    parameters = model_config_parameters(sweep)
    assert len(parameters["instance_group"]) == len(sweep.instance_counts)
    assert parameters["dynamic_batching"]["preferred_batch_size"] == [
        list(s) for s in sweep.preferred_batch_sizes
    ]
    assert sweep.variants == 8


def test_no_sweep_tries_fewer_instances_than_a_bounded_queue_needs() -> None:
    assert all(min(sweep.instance_counts) >= 2 for sweep in SWEEPS.values())
    refused = r"instance_counts \(1, 2\); every batching model has a bounded queue\. At least two.*500 ms"
    with pytest.raises(ValueError, match=refused):
        replace(SWEEPS["quick"], instance_counts=(1, 2))


def test_the_winner_is_the_fastest_within_the_budget_not_the_fastest_overall() -> None:
    rows = [
        _measurement("classifier_config_default", 50.0, 300, within=True),
        _measurement("classifier_config_0", 90.0, 900, within=False),
        _measurement("classifier_config_1", 60.0, 400, within=True),
    ]
    (outcome,) = outcomes(rows, ["classifier"], min_gain=0.05)
    assert outcome.winner is not None and outcome.winner.variant == "classifier_config_1"
    assert outcome.shipped is not None and outcome.shipped.variant == "classifier_config_default"
    assert outcome.ratio == pytest.approx(1.2)


def test_a_tie_keeps_the_shipped_configuration_and_adopts_nothing(tmp_path: Path) -> None:
    folder = _model(tmp_path)
    rows = [
        _measurement("classifier_config_0", 50.0, 300, within=True),
        _measurement("classifier_config_default", 50.0, 300, within=True),
    ]
    results = outcomes(rows, ["classifier"], min_gain=0.05)
    assert results[0].winner is not None and results[0].winner.shipped
    assert adopt(results, tmp_path / "repo", command="tune", latency_budget_ms=500) == []
    assert not (folder / cpu_overlay.FILENAME).exists()


def test_no_configuration_within_the_budget_means_no_winner() -> None:
    (outcome,) = outcomes(
        [_measurement("classifier_config_default", 50.0, 900, within=False)], ["classifier"], min_gain=0.05
    )
    assert outcome.winner is None and outcome.ratio is None


def test_an_adopted_winner_is_what_derive_then_serves(tmp_path: Path) -> None:
    _model(tmp_path)
    rows = [
        _measurement("classifier_config_default", 50.0, 300, within=True),
        _measurement("classifier_config_3", 70.0, 350, within=True, instances=3),
    ]
    written = adopt(
        outcomes(rows, ["classifier"], min_gain=0.05),
        tmp_path / "repo",
        command="tune",
        latency_budget_ms=500,
    )
    assert written == [tmp_path / "repo" / "classifier" / cpu_overlay.FILENAME]
    entry = load_repository(tmp_path / "repo")["classifier"]
    config = derive_local_config(entry, gpu_available=False, intra_op_threads=None)
    assert [g.count for g in config.instance_group] == [3]
    assert config.dynamic_batching.max_queue_delay_microseconds == 4000
    assert list(config.dynamic_batching.preferred_batch_size) == [8, 16]


def test_a_winner_preferring_a_batch_over_max_batch_size_is_refused_and_nothing_is_written(
    tmp_path: Path,
) -> None:
    folder = _model(tmp_path)
    rows = [
        _measurement("classifier_config_default", 50.0, 300, within=True),
        _measurement("classifier_config_3", 70.0, 350, within=True, preferred=(16, 32)),
    ]
    with pytest.raises(ValueError, match=r"prefers batch sizes \[32\], above the model's max_batch_size 16"):
        adopt(
            outcomes(rows, ["classifier"], min_gain=0.05),
            tmp_path / "repo",
            command="t",
            latency_budget_ms=500,
        )
    assert not (folder / cpu_overlay.FILENAME).exists()


def test_a_gain_smaller_than_min_gain_is_a_tie_that_keeps_the_shipped_configuration() -> None:
    rows = [
        _measurement("classifier_config_default", 100.0, 300, within=True),
        _measurement("classifier_config_2", 103.0, 280, within=True),
    ]
    (tie,) = outcomes(rows, ["classifier"], min_gain=0.05)
    assert tie.winner is not None and tie.winner.shipped and tie.tie
    assert tie.fastest is not None and tie.fastest.variant == "classifier_config_2"
    (change,) = outcomes(rows, ["classifier"], min_gain=0.02)
    assert change.winner is not None and change.winner.variant == "classifier_config_2" and not change.tie
