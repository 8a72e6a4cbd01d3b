"""Any model of a repository can be measured by option: its encoder and kind come from its configs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from tritonclient.grpc import model_config_pb2 as pb

from loadtest.bench.run import BenchOptions, main
from loadtest.experiments import plans as experiments_plan
from loadtest.report.records import ServedRun
from tritonrepo.configs import load_repository, pipeline_steps
from tritonrepo.errors import RepositoryError
from tritonrepo.paths import REPOSITORY

ONNX = "onnxruntime_onnx"


@pytest.fixture
def repository(tmp_path: Path, write_config: Callable[..., Path]) -> Path:
    """Two exported encoders, a model of rows, a Python model and three ensembles of them."""
    write_config(tmp_path, "vision_onnx", ("X", "FP32", [3, 8, 8]), platform=ONNX)
    write_config(tmp_path, "words_onnx", ("X", "INT64", [-1]), platform=ONNX)
    batcher = pb.ModelDynamicBatching()
    # a model of any other inputs: rows of features and a categorical id, batched by its own batcher
    rows = (("FEATURES", "FP32", [9]), ("SEX", "INT64", [1]))
    write_config(tmp_path, "rows_onnx", *rows, platform=ONNX, dynamic_batching=batcher)
    write_config(tmp_path, "prep", ("A", "FP32", [4]), backend="python", dynamic_batching=batcher)
    for name, input_name, steps in (
        ("see", "IMAGE_BYTES", ("prep", "vision_onnx")),
        ("read", "TEXT", ("prep", "words_onnx")),
        ("both", "TEXT", ("vision_onnx", "words_onnx")),
    ):
        write_config(tmp_path, name, (input_name, "STRING", [1]), steps=steps, platform="ensemble")
    return tmp_path


def test_an_ensembles_encoder_and_kind_come_from_its_configs(repository: Path) -> None:
    models = load_repository(repository)
    see, read = pipeline_steps(models, "see"), pipeline_steps(models, "read")
    assert (see.encoder, see.kind) == ("vision_onnx", "image")
    assert (read.encoder, read.kind) == ("words_onnx", "text")


def test_a_native_model_is_its_own_encoder_and_its_inputs_give_its_kind(repository: Path) -> None:
    models = load_repository(repository)
    assert pipeline_steps(models, "vision_onnx").kind == "pixels"
    assert pipeline_steps(models, "words_onnx").kind == "tokens"
    rows = pipeline_steps(models, "rows_onnx")
    assert (rows.encoder, rows.kind) == ("rows_onnx", "tensors")  # neither pixels nor token ids
    prep = pipeline_steps(models, "prep")
    assert (prep.encoder, prep.kind) == (None, "tensors")


def test_the_shipped_tabular_model_is_measured_as_rows_of_tensors() -> None:
    models = load_repository(REPOSITORY)
    for name in ("diabetes_classifier_onnx", "diabetes_classifier_torchscript"):
        steps = pipeline_steps(models, name)
        assert (steps.encoder, steps.kind) == (name, "tensors")


def test_an_ensemble_of_two_exported_steps_or_an_unknown_model_is_refused(repository: Path) -> None:
    models = load_repository(repository)
    with pytest.raises(RepositoryError, match="2 exported steps"):
        pipeline_steps(models, "both")
    with pytest.raises(RepositoryError, match="no model 'nope'.*read, rows_onnx, see"):
        pipeline_steps(models, "nope")


def test_the_shipped_lite2_classifier_derives_its_own_encoder() -> None:
    steps = pipeline_steps(load_repository(REPOSITORY), "image_classifier_lite2")
    assert (steps.encoder, steps.kind) == ("efficientnet_lite2_onnx", "image")


def test_models_replace_the_sweep_and_the_batching_experiment_takes_those_that_batch(
    tmp_path: Path, repository: Path
) -> None:
    root = repository
    models = ("see", "words_onnx", "rows_onnx")
    plan = experiments_plan.with_models(experiments_plan.PLANS["quick"], models, root)
    assert plan.sweep_models == models
    assert plan.batching_models == ("see", "rows_onnx")  # a step's batcher or its own; words_onnx has none
    variants = experiments_plan.served_clones(plan, REPOSITORY, tmp_path / "pad_nodes.onnx")
    nobatch = [v for v in variants if not v.batching]
    assert [v.served_name for v in nobatch] == [m + experiments_plan.NOBATCH for m in ("see", "rows_onnx")]


def test_without_models_the_plans_measure_what_they_always_did() -> None:
    quick = experiments_plan.PLANS["quick"]
    assert experiments_plan.with_models(quick, (), REPOSITORY) is quick
    assert quick.sweep_models == ("text_embedder", "image_classifier")
    assert all(p.batching_models == ("text_embedder",) for p in experiments_plan.PLANS.values())


def test_an_unknown_model_is_refused_naming_the_models_available(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(
        ValueError,
        match=r"--models names not_a_model, which .* does not hold; it holds .*image_classifier_lite2",
    ):
        BenchOptions(mode="quick", output=Path("out"), run_id="r", models=("not_a_model",))
    assert main(["--mode", "quick", "--only", "sweeps", "--models", "not_a_model"]) == 2
    assert "image_classifier_lite2" in capsys.readouterr().err


def test_a_run_names_its_encoder_so_the_report_finds_any_models_batches() -> None:
    stats = {"inferences": 8, "executions": 2, "average_batch_size": 4, "queue_us": 1, "compute_infer_us": 2}
    perf = {"model": "m", "protocol": "grpc", "concurrency": 8, "throughput_per_s": 10.0}
    data = {
        "arm": "batching on",
        "served_model": "image_classifier_lite2",
        "encoder": "efficientnet_lite2_onnx",
        "perf": perf,
        "server": {"efficientnet_lite0_onnx": stats, "efficientnet_lite2_onnx": {**stats, "executions": 1}},
    }
    found = ServedRun.from_dict(data).encoder_stats()
    assert found is not None and found.model == "efficientnet_lite2_onnx"
    without = ServedRun.from_dict({k: v for k, v in data.items() if k != "encoder"}).encoder_stats()
    assert without is not None and without.model == "efficientnet_lite0_onnx"  # an older run's search


def test_the_gpu_mode_refuses_models_it_would_not_measure(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--mode", "gpu", "--models", "image_classifier_lite2"]) == 2
    assert "--models" in capsys.readouterr().err


def _point(model: str, arm: str, throughput: float) -> dict:
    served = model if arm == "batching on" else model + "__nobatch"
    perf = {"model": served, "protocol": "grpc", "concurrency": 32, "throughput_per_s": throughput}
    return {"arm": arm, "model": model, "served_model": served, "perf": perf, "server": {}}


def test_the_report_keeps_each_models_batching_arms_apart_and_its_targets_on_the_text_ensemble() -> None:
    from loadtest.report import figures, markdown
    from loadtest.report.records import served_runs

    results = {
        "batching": [
            _point("text_embedder", "batching on", 400.0),
            _point("text_embedder", "batching off", 100.0),
            _point("image_classifier_lite2", "batching on", 20.0),
            _point("image_classifier_lite2", "batching off", 10.0),
        ]
    }
    rows = figures.arm_summary(results, "batching")
    assert sorted((r.served_model, r.throughput_per_s) for r in rows) == [
        ("image_classifier_lite2", 20.0),
        ("image_classifier_lite2__nobatch", 10.0),
        ("text_embedder", 400.0),
        ("text_embedder__nobatch", 100.0),
    ]
    on, off = figures.batching_arms(results, 32)
    assert on is not None and off is not None
    assert (on.throughput_per_s, off.throughput_per_s) == (400.0, 100.0)
    lite2_only = {"batching": results["batching"][2:]}
    assert figures.batching_arms(lite2_only, 32) == (None, None)  # no text target from another model
    on, off = figures.batching_arms(results, 32, "image_classifier_lite2")
    assert on is not None and off is not None and (on.throughput_per_s, off.throughput_per_s) == (20.0, 10.0)
    ratios = markdown._on_off_ratios(results, served_runs(results, "batching"))
    assert (
        "| image_classifier_lite2 | 32 | 1 | 2.00x |" in ratios
        and "| text_embedder | 32 | 1 | 4.00x |" in ratios
    )


def test_a_run_with_models_measures_them_alone_and_refuses_the_shipped_experiments() -> None:
    from loadtest.bench.run import skipped
    from loadtest.experiments import registry

    left_in = [k for k in registry.KEYS if k not in skipped("", "", ("rows_onnx",))]
    assert left_in == ["sweeps", "batching"]
    assert [k for k in registry.KEYS if k not in skipped("", "sweeps", ("rows_onnx",))] == ["sweeps"]
    assert [k for k in registry.KEYS if k not in skipped("batching", "", ("rows_onnx",))] == ["sweeps"]
    with pytest.raises(
        ValueError, match=r"\['ragged'\] measure the shipped models: run them without --models"
    ):
        skipped("", "sweeps,ragged", ("rows_onnx",))
    assert "ragged" not in skipped("", "", ())  # without --models, everything runs


def test_a_run_with_models_serves_them_and_their_clones_and_nothing_shipped(
    tmp_path: Path, repository: Path
) -> None:
    from loadtest.bench.run import skipped

    models = ("see", "words_onnx", "rows_onnx")
    plan = experiments_plan.with_models(experiments_plan.PLANS["quick"], models, repository)
    skip = skipped("", "", models)
    variants = experiments_plan.served_clones(plan, repository, tmp_path / "pad_nodes.onnx", skip)
    assert [v.served_name for v in variants] == [*models, "see__nobatch", "rows_onnx__nobatch"]


def test_a_run_with_models_exports_the_descriptions_serving_their_files_only() -> None:
    from export.needed import needed

    def names(*models: str) -> list[str]:
        return [description.name for description in needed(models, REPOSITORY)]

    assert names("diabetes_classifier_onnx") == ["diabetes_classifier"]
    # its ensemble ends with image_postprocess, which Lite0's description configures: Lite0 is not exported
    assert names("image_classifier_mobilenet_v2") == ["mobilenet_v2"]
    assert names("text_embedder", "image_classifier_lite2") == ["all_minilm_l6_v2", "efficientnet_lite2"]
