from __future__ import annotations

import logging
import shutil
import sys
import textwrap
from pathlib import Path

import pytest

from tritonrepo.configs import exported_step, load_model_config, load_repository, parse_config
from tritonrepo.derive import derive_local_config, derive_repository
from tritonrepo.errors import RepositoryError
from tritonrepo.files import EXPORT_OUTPUTS, exported_file
from tritonrepo.served_code import BATCHING_HELPER, PARAMETERS_HELPER, load_served_module
from tritonrepo.writer import EXPORTED_RUNTIME, NATIVE_RUNNER

REPOSITORY = Path(__file__).resolve().parents[2] / "model_repository"
RUNNER = NATIVE_RUNNER
COMMITTED_CONFIGS = sorted(REPOSITORY.glob("*/config.pbtxt"))

# Configs written into test repositories: a native classifier and an ensemble of it.
CONFIGS = Path(__file__).parent / "configs"
NATIVE_CONFIG = (CONFIGS / "classifier.pbtxt").read_text()
ENSEMBLE_CONFIG = (CONFIGS / "pipeline.pbtxt").read_text()


def _write(repo: Path, name: str, config: str, files: dict[str, str] | None = None) -> Path:
    folder = repo / name
    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text(textwrap.dedent(config))
    for filename, content in (files or {}).items():
        (folder / "1" / filename).write_text(content)
    return folder


def test_the_repository_has_models() -> None:
    assert COMMITTED_CONFIGS, "model_repository/ holds no config.pbtxt"


@pytest.mark.parametrize("path", COMMITTED_CONFIGS, ids=lambda p: p.parent.name)
def test_every_committed_config_parses_with_tritons_schema(path: Path) -> None:
    config = parse_config(path)
    assert config.name == path.parent.name
    assert config.max_batch_size > 0, "every model in this project batches"
    if config.platform != "ensemble":
        assert config.HasField("dynamic_batching"), f"{path} has no dynamic_batching"
        assert len(config.instance_group) >= 1, f"{path} declares no instance_group"


def test_the_deployable_repository_loads_whole_and_every_ensemble_step_exists() -> None:
    models = load_repository(REPOSITORY)
    for entry in models.values():
        for step in entry.ensemble_steps():
            assert step in models, f"ensemble {entry.name} chains {step!r}, which is not in the repository"


def test_an_unknown_config_field_is_an_error_naming_the_file(tmp_path: Path) -> None:
    folder = _write(tmp_path, "typo", 'name: "typo"\nbackend: "python"\nmax_batch_sise: 8\n')
    with pytest.raises(RepositoryError, match=r"typo/config.pbtxt.*max_batch_sise"):
        parse_config(folder / "config.pbtxt")


def test_a_config_name_that_differs_from_its_folder_is_rejected(tmp_path: Path) -> None:
    _write(tmp_path, "folder_name", 'name: "other_name"\nbackend: "python"\n')
    with pytest.raises(RepositoryError, match="differs from its folder"):
        load_repository(tmp_path)


def test_derive_turns_a_native_model_into_a_python_model_with_the_same_interface(tmp_path: Path) -> None:
    source = tmp_path / "source"
    _write(source, "classifier", NATIVE_CONFIG, {"model.onnx": "not really onnx"})
    _write(source, "pipeline", ENSEMBLE_CONFIG)
    result = derive_repository(source, tmp_path / "local", gpu_available=False, intra_op_threads=2)
    assert sorted(result.written) == ["classifier", "pipeline"] and not result.skipped

    original = parse_config(source / "classifier" / "config.pbtxt")
    derived = parse_config(tmp_path / "local" / "classifier" / "config.pbtxt")
    assert (derived.backend, derived.platform) == ("python", "")
    assert derived.input == original.input and derived.output == original.output
    assert derived.max_batch_size == original.max_batch_size
    assert derived.dynamic_batching == original.dynamic_batching
    assert [(g.count, g.kind, list(g.gpus)) for g in derived.instance_group] == [
        (2, derived.instance_group[0].KIND_CPU, [])
    ]
    assert derived.parameters["runtime"].string_value == "onnxruntime"
    assert derived.parameters["model_filename"].string_value == "model.onnx"
    assert derived.parameters["intra_op_threads"].string_value == "2"

    version = tmp_path / "local" / "classifier" / "1"
    assert (version / "model.onnx").resolve() == (source / "classifier" / "1" / "model.onnx").resolve()
    assert (version / "model.py").resolve() == RUNNER
    assert parse_config(tmp_path / "local" / "pipeline" / "config.pbtxt") == parse_config(
        source / "pipeline" / "config.pbtxt"
    )


def test_derive_divides_the_cores_between_instances_unless_told(tmp_path: Path) -> None:
    import os

    source = tmp_path / "source"
    _write(source, "classifier", NATIVE_CONFIG, {"model.onnx": "x"})
    derive_repository(source, tmp_path / "local")
    derived = parse_config(tmp_path / "local" / "classifier" / "config.pbtxt")
    expected = max(1, (os.cpu_count() or 1) // 2)  # NATIVE_CONFIG has two instances
    assert derived.parameters["intra_op_threads"].string_value == str(expected)


def test_derive_keeps_gpu_instances_when_a_gpu_is_present(tmp_path: Path) -> None:
    source = tmp_path / "source"
    _write(source, "classifier", NATIVE_CONFIG, {"model.onnx": "x"})
    derive_repository(source, tmp_path / "local", gpu_available=True)
    derived = parse_config(tmp_path / "local" / "classifier" / "config.pbtxt")
    assert derived.instance_group[0].kind == derived.instance_group[0].KIND_GPU


def test_derive_skips_unexported_models_and_the_ensembles_that_need_them(tmp_path: Path) -> None:
    source = tmp_path / "source"
    _write(source, "classifier", NATIVE_CONFIG)
    _write(source, "pipeline", ENSEMBLE_CONFIG)
    result = derive_repository(source, tmp_path / "local")
    assert result.written == []
    assert "run `python -m export`" in result.skipped["classifier"]
    assert "classifier" in result.skipped["pipeline"]


def test_the_exported_file_is_the_platforms_default_unless_the_config_names_one(tmp_path: Path) -> None:
    onnx = _write(tmp_path, "classifier", NATIVE_CONFIG)
    assert exported_file(onnx, load_model_config(onnx)) == onnx / "1" / "model.onnx"
    scripted = _write(tmp_path, "scripted", NATIVE_CONFIG.replace("onnxruntime_onnx", "pytorch_libtorch"))
    assert exported_file(scripted, load_model_config(scripted)) == scripted / "1" / "model.pt"
    named = _write(tmp_path, "named", NATIVE_CONFIG + 'default_model_filename: "weights.onnx"\n')
    assert exported_file(named, load_model_config(named), version=2) == named / "2" / "weights.onnx"
    with pytest.raises(RepositoryError, match="'ensemble', which loads no exported file"):
        exported_file(tmp_path, parse_config(_write(tmp_path, "pipeline", ENSEMBLE_CONFIG) / "config.pbtxt"))


def test_a_missing_config_is_a_repository_error_naming_the_file(tmp_path: Path) -> None:
    with pytest.raises(RepositoryError, match=r"cannot read the model config .*nothing.config\.pbtxt"):
        load_model_config(tmp_path / "nothing")


def test_a_served_module_imports_its_siblings_by_bare_name_and_leaves_none_behind(tmp_path: Path) -> None:
    (tmp_path / "sibling_helper_for_test.py").write_text("ANSWER = 42\n")
    (tmp_path / "model.py").write_text("from sibling_helper_for_test import ANSWER\n\nDOUBLE = 2 * ANSWER\n")
    module = load_served_module(tmp_path / "model.py", name="_served_module_for_test")
    try:
        assert module.DOUBLE == 84
        assert "sibling_helper_for_test" not in sys.modules
        assert sys.modules["_served_module_for_test"] is module  # dataclasses look their module up there
    finally:
        sys.modules.pop("_served_module_for_test", None)


def test_a_served_module_that_fails_to_import_is_not_left_half_loaded(tmp_path: Path) -> None:
    (tmp_path / "model.py").write_text("import module_that_does_not_exist_anywhere\n")
    with pytest.raises(ModuleNotFoundError):
        load_served_module(tmp_path / "model.py", name="_broken_module_for_test")
    assert "_broken_module_for_test" not in sys.modules
    with pytest.raises(RepositoryError, match="no such file"):
        load_served_module(tmp_path / "absent.py", name="_absent_module_for_test")


def test_a_derived_native_model_gets_the_runtime_and_the_helpers_beside_its_runner(tmp_path: Path) -> None:
    source = tmp_path / "source"
    _write(source, "classifier", NATIVE_CONFIG, {"model.onnx": "x"})
    (source / BATCHING_HELPER).write_text("# the helper\n")
    derive_repository(source, tmp_path / "local")
    version = tmp_path / "local" / "classifier" / "1"
    assert (version / "model.py").is_symlink() and (version / "model.py").resolve() == RUNNER
    # the runner imports it by this bare name; the one file, so the baselines run the same code
    runtime = version / "exported_runtime.py"
    assert runtime.is_symlink() and runtime.resolve() == EXPORTED_RUNTIME.resolve()
    assert not runtime.readlink().is_absolute()  # relative: resolves inside a mount
    assert (version / BATCHING_HELPER).resolve() == (source / BATCHING_HELPER).resolve()
    assert (version / PARAMETERS_HELPER).resolve() == REPOSITORY / PARAMETERS_HELPER  # none in source


def test_the_local_cpu_runner_gets_onnxruntimes_memory_pattern_off_unless_the_config_sets_it() -> None:
    models = load_repository(REPOSITORY)
    onnx = derive_local_config(models["efficientnet_lite0_onnx"], gpu_available=False, intra_op_threads=1)
    assert onnx.parameters["enable_mem_pattern"].string_value == "false"
    torchscript = models["efficientnet_lite0_torchscript"]
    assert (
        "enable_mem_pattern"
        not in derive_local_config(torchscript, gpu_available=False, intra_op_threads=1).parameters
    )
    on_gpu = derive_local_config(models["efficientnet_lite0_onnx"], gpu_available=True, intra_op_threads=1)
    assert "enable_mem_pattern" not in on_gpu.parameters


def test_each_pipeline_names_the_one_exported_model_it_calls() -> None:
    models = load_repository(REPOSITORY)
    assert exported_step(models, "text_embedder") == "minilm_onnx"
    assert exported_step(models, "text_embedder_torchscript") == "minilm_torchscript"
    assert exported_step(models, "image_classifier") == "efficientnet_lite0_onnx"
    with pytest.raises(RepositoryError, match="not an ensemble"):
        exported_step(models, "minilm_onnx")


def test_a_python_model_whose_files_are_missing_is_skipped_as_an_unexported_model_is(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The shipped repository before any export (no tokenizer.json), and without the labels file the
    postprocessing names: the derived repository serves what is there, naming what it left out."""
    source = tmp_path / "source"
    shutil.copytree(REPOSITORY, source, symlinks=True, ignore=shutil.ignore_patterns(*EXPORT_OUTPUTS))
    (source / "image_postprocess" / "1" / "imagenet_labels.txt").unlink()
    with caplog.at_level(logging.WARNING, logger="tritonrepo.derive"):
        result = derive_repository(source, tmp_path / "local")
    tokenizer = source / "text_tokenizer" / "1" / "tokenizer.json"
    expected = f"exported file(s) missing: {tokenizer} (run `python -m export`)"
    assert result.skipped["text_tokenizer"] == expected
    assert result.skipped["image_postprocess"].startswith("file(s) missing: ")
    assert "imagenet_labels.txt (its parameter labels_file)" in result.skipped["image_postprocess"]
    assert "text_tokenizer" in result.skipped["text_embedder"]
    assert {"image_preprocess", "l2_normalize"} <= set(result.written)
    assert not (tmp_path / "local" / "text_tokenizer").exists()
    warned = [r.getMessage() for r in caplog.records]
    assert f"not serving text_tokenizer locally: {result.skipped['text_tokenizer']}" in warned


# The text encoder's recorded curve on the 2-core CPU (tests/unit/test_batching_from_curve.py): within a
# 60 ms budget it peaks at 16, so the derivation would serve preferred sizes 8 and 16 with a short delay.
CURVE = {"1": 139.0, "2": 180.0, "4": 230.0, "8": 270.0, "16": 300.0}


def _record_curve(records: Path, device: str = "cpu", budget_ms: float = 60) -> dict:
    from export.precision.records import batching_choice, write_record

    served = {"variant": "onnx-fp32", "device": device, "status": "served", "items_per_s": CURVE}
    record = {"model": "classifier", "candidates": [served]}
    record["batching"] = batching_choice(record, max_batch_size=16, latency_budget_ms=budget_ms)
    write_record(record, records)
    return record["batching"]


def test_derive_serves_the_batching_the_recorded_curve_chose_with_its_reasons(tmp_path: Path) -> None:
    source, records = tmp_path / "source", tmp_path / "records"
    _write(source, "classifier", NATIVE_CONFIG, {"model.onnx": "x"})
    chosen = _record_curve(records)
    derive_repository(source, tmp_path / "local", records=records)
    path = tmp_path / "local" / "classifier" / "config.pbtxt"
    derived = parse_config(path)
    assert list(derived.dynamic_batching.preferred_batch_size) == [8, 16] == chosen["preferred_batch_sizes"]
    assert (
        derived.dynamic_batching.max_queue_delay_microseconds == chosen["max_queue_delay_us"] == 0
    )  # not 1000
    assert derived.dynamic_batching.default_queue_policy.max_queue_size == 32  # the rest is kept
    text = " ".join(
        line.strip("# ") for line in path.read_text().splitlines() if line.lstrip().startswith("#")
    )
    for reason in chosen["reasons"].values():
        assert " ".join(reason.split()) in text, reason
    lines = path.read_text().splitlines()
    first = lines.index("  preferred_batch_size: 8")
    assert lines[first - 1].startswith("  # ") and "peaks at 16" in path.read_text()

    derive_repository(source, tmp_path / "unrecorded", records=tmp_path / "none")  # no export: as stated
    kept = parse_config(tmp_path / "unrecorded" / "classifier" / "config.pbtxt").dynamic_batching
    assert (list(kept.preferred_batch_size), kept.max_queue_delay_microseconds) == ([4, 8], 1000)


def test_a_batching_value_stated_by_hand_wins_over_the_curve_and_says_so(tmp_path: Path) -> None:
    source, records = tmp_path / "source", tmp_path / "records"
    folder = _write(source, "classifier", NATIVE_CONFIG, {"model.onnx": "x"})
    (folder / "local_cpu.pbtxt").write_text("dynamic_batching { max_queue_delay_microseconds: 2000 }\n")
    chosen = _record_curve(records)
    derive_repository(source, tmp_path / "local", records=records)
    path = tmp_path / "local" / "classifier" / "config.pbtxt"
    derived = parse_config(path).dynamic_batching
    assert list(derived.preferred_batch_size) == chosen["preferred_batch_sizes"]  # not stated: the curve's
    assert derived.max_queue_delay_microseconds == 2000 != chosen["max_queue_delay_us"]  # stated by hand
    assert "max_queue_delay_microseconds: stated by hand in classifier/local_cpu.pbtxt" in path.read_text()

    # On a GPU host the description's values are stated by hand, and a curve timed on the CPU is not used.
    _record_curve(records, device="cuda")
    derive_repository(source, tmp_path / "gpu", gpu_available=True, records=records)
    on_gpu = tmp_path / "gpu" / "classifier" / "config.pbtxt"
    batching = parse_config(on_gpu).dynamic_batching
    assert (list(batching.preferred_batch_size), batching.max_queue_delay_microseconds) == ([4, 8], 1000)
    assert "preferred_batch_size: stated by hand in the description" in " ".join(
        line.strip("# ") for line in on_gpu.read_text().splitlines()
    )
