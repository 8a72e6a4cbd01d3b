"""The torch_module scaffold: a description of your code and tensors whose configs are generated as every
shipped one is; behind a preprocessing model, the folders and links it needs; the same for a description
written by hand (--configs-only); nothing written over, nothing written for a request that does not fit."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from description.generated_configs import config_text, generate
from description.model import load_description
from description.module_code import load_callable
from export.scaffold import cli as scaffold
from tritonrepo.configs import load_model_config

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "sensor" / "sensor.py"
CODE = [f"--model={EXAMPLE}:load_model", f"--check-inputs={EXAMPLE}:check_inputs"]
SENSOR = ["--input", "READINGS:FP32:-1,2", "--output", "SCORES:FP32:-1", "--output", "CLASS_LOGITS:FP32:3"]
IMAGE = ["--input", "PIXELS:FP32:3,160,160", "--output", "LOGITS:FP32:10:top1_agreement"]


@pytest.fixture
def weights(tmp_path: Path) -> list[str]:
    path = tmp_path / "weights.safetensors"
    load_callable(f"{EXAMPLE}:save_weights", ROOT, where="test")(path)
    return ["--weights-path", str(path)]


def _generated_equal_written(project: Path, name: str) -> list[str]:
    """The models the description generates, each asserted to be written as it generates it now."""
    description = load_description(project / "model_descriptions" / f"{name}.yaml")
    repository = project / "model_repository"
    models = list(generate(description, repository))
    for model in models:
        written = (repository / model / "config.pbtxt").read_text()
        assert written == config_text(description, generate(description, repository)[model]), model
    return models


def test_a_module_gets_a_description_of_its_code_and_tensors_and_its_generated_configs(
    scaffold_project: Path, folders: list[str], weights: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert scaffold.main(["torch_module", "sensor", *CODE, *weights, *SENSOR, *folders]) == 0
    description = load_description(scaffold_project / "model_descriptions" / "sensor.yaml")
    module = description.module
    assert description.kind == "torch_module" and module is not None and not description.preprocessing
    file, _, function = module.model.rpartition(":")
    assert (description.folder / file).resolve() == EXAMPLE and function == "load_model"
    assert [(t.name, t.datatype, t.dims) for t in module.inputs] == [("READINGS", "FP32", (-1, 2))]
    assert [(t.name, t.dims, t.metric, t.tolerance) for t in module.outputs] == [
        ("SCORES", (-1,), "max_abs_diff", 1e-4),
        ("CLASS_LOGITS", (3,), "max_abs_diff", 1e-4),
    ]
    assert [(s.model, s.format) for s in description.served] == [
        ("sensor_onnx", "onnx"),
        ("sensor_torchscript", "torchscript"),
    ]
    assert description.precisions == {"cpu": ("fp32",), "cuda": ("fp32",)}
    assert _generated_equal_written(scaffold_project, "sensor") == ["sensor_onnx", "sensor_torchscript"]
    out = capsys.readouterr().out
    assert "python -m export --only sensor --precision fp32" in out
    assert "python -m clients infer sensor_onnx --input READINGS=readings.npy" in out


@pytest.mark.parametrize(
    ("preprocess", "mean"),
    [("image_preprocess", [0.5, 0.5, 0.5]), ("image_preprocess_mobilenet_v2", [0.485, 0.456, 0.406])],
)
def test_behind_an_image_preprocessing_it_gets_its_own_copy_an_ensemble_and_their_links(
    scaffold_project: Path, folders: list[str], weights: list[str], preprocess: str, mean: list[float]
) -> None:
    argv = ["torch_module", "pets", *CODE, *weights, *IMAGE, "--preprocess", preprocess, *folders]
    assert scaffold.main(argv) == 0
    assert _generated_equal_written(scaffold_project, "pets") == [
        "pets_onnx",
        "pets_torchscript",
        "pets_preprocess",
        "pets_ensemble",
    ]
    repository = scaffold_project / "model_repository"
    preprocessing = load_model_config(repository / "pets_preprocess")
    assert list(preprocessing.output[0].dims) == [3, 160, 160]
    parameters = {key: value.string_value for key, value in preprocessing.parameters.items()}
    assert parameters["resize_shorter_px"] == "192"  # the crop + 32 px
    assert [float(v) for v in parameters["mean_rgb"].split(",")] == mean
    ensemble = load_model_config(repository / "pets_ensemble")
    assert [step.model_name for step in ensemble.ensemble_scheduling.step] == ["pets_preprocess", "pets_onnx"]
    assert [t.name for t in ensemble.input] == ["IMAGE_BYTES"]
    assert [t.name for t in ensemble.output] == ["LOGITS"]
    version = repository / "pets_preprocess" / "1"
    assert os.readlink(version / "model.py") == "../../image_preprocess/1/model.py"
    assert (version / "model.py").resolve() == (repository / "image_preprocess" / "1" / "model.py").resolve()
    for helper in ("pybackend_batching.py", "pybackend_parameters.py"):
        assert (version / helper).resolve() == (repository / helper).resolve()
    assert (repository / "pets_ensemble" / "1" / ".gitkeep").is_file()


def test_a_shared_preprocessing_model_chains_as_it_is_when_it_makes_the_modules_inputs(
    scaffold_project: Path,
    folders: list[str],
    weights: list[str],
    write_config: Callable[..., Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    repository = scaffold_project / "model_repository"
    write_config(repository, "rows_prep", ("RAW", "FP32", [4]), backend="python")  # OUT: FP32 [1]
    tensors = ["--input", "OUT:FP32:1", "--output", "Y:FP32:1"]
    argv = ["torch_module", "tiny", *CODE, *weights, *tensors, "--preprocess", "rows_prep", *folders]
    assert scaffold.main(argv) == 0
    assert _generated_equal_written(scaffold_project, "tiny") == [
        "tiny_onnx",
        "tiny_torchscript",
        "tiny_ensemble",
    ]
    ensemble = load_model_config(repository / "tiny_ensemble")
    assert [step.model_name for step in ensemble.ensemble_scheduling.step] == ["rows_prep", "tiny_onnx"]
    assert not (repository / "rows_prep" / "1" / "model.py").exists()  # shared: not the scaffold's to link
    assert "python -m clients infer tiny_ensemble --input RAW=raw.npy" in capsys.readouterr().out

    other = ["--input", "OUT:FP32:2", "--output", "Y:FP32:1", "--preprocess", "rows_prep"]
    assert scaffold.main(["torch_module", "wide", *CODE, *weights, *other, *folders]) == 1
    err = capsys.readouterr().err
    assert "rows_prep outputs [('OUT', 'FP32', [1])], module.inputs declares [('OUT', 'FP32', [2])]" in err
    assert not (scaffold_project / "model_descriptions" / "wide.yaml").exists()


def test_configs_only_writes_a_hand_written_descriptions_configs_with_their_folders_and_links(
    scaffold_project: Path, folders: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    repository = scaffold_project / "model_repository"
    generated = ("mobilenet_v2_onnx", "mobilenet_v2_torchscript", "image_preprocess_mobilenet_v2")
    for model in (*generated, "image_classifier_mobilenet_v2"):
        shutil.rmtree(repository / model)
    assert scaffold.main(["torch_module", "mobilenet_v2", "--configs-only", *folders]) == 0
    for model in (*generated, "image_classifier_mobilenet_v2"):  # as committed
        assert (repository / model / "config.pbtxt").read_text() == (
            ROOT / "model_repository" / model / "config.pbtxt"
        ).read_text()
    assert os.readlink(repository / "image_preprocess_mobilenet_v2" / "1" / "model.py") == (
        "../../image_preprocess/1/model.py"
    )
    assert (repository / "image_classifier_mobilenet_v2" / "1" / ".gitkeep").is_file()
    out = capsys.readouterr().out
    assert "python -m clients classify photo.jpg --model image_classifier_mobilenet_v2" in out

    assert scaffold.main(["torch_module", "mobilenet_v2", "--configs-only", *folders]) == 0
    assert "mobilenet_v2: configs up to date" in capsys.readouterr().out
    assert scaffold.main(["efficientnet_lite", "mobilenet_v2", "--configs-only", *folders]) == 1
    assert "describes torch_module 'mobilenet_v2'" in capsys.readouterr().err


def test_nothing_is_written_over_and_a_request_that_does_not_fit_is_refused_before_writing(
    scaffold_project: Path, folders: list[str], weights: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert scaffold.main(["torch_module", "sensor", *CODE, *weights, *SENSOR, *folders]) == 0
    capsys.readouterr()
    assert scaffold.main(["torch_module", "sensor", *CODE, *weights, *SENSOR, *folders]) == 1
    assert "not overwriting" in capsys.readouterr().err
    two_inputs = ["--input", "A:FP32:3,8,8", *IMAGE, "--preprocess", "image_preprocess"]
    assert scaffold.main(["torch_module", "two", *CODE, *weights, *two_inputs, *folders]) == 1
    assert "it makes one input of RGB pixels [3, H, W]" in capsys.readouterr().err
    usage = {
        "a torch_module needs --output": [*CODE, *weights, "--input", "X:FP32:4"],
        "metric 'closest' is not one of": [
            *CODE,
            *weights,
            "--input",
            "X:FP32:4",
            "--output",
            "Y:FP32:4:closest",
        ],
        "absent.py does not exist": ["--model=absent.py:f", *CODE[1:], *weights, *SENSOR],
        "--image-size and --labels are an efficientnet_lite's": [
            *CODE,
            *weights,
            *SENSOR,
            "--image-size",
            "9",
        ],
        "--configs-only reads the description": ["--configs-only", *SENSOR],
    }
    for message, options in usage.items():
        with pytest.raises(SystemExit) as exit_code:
            scaffold.main(["torch_module", "other", *options, *folders])
        assert exit_code.value.code == 2 and message in capsys.readouterr().err, message
    assert not (scaffold_project / "model_descriptions" / "two.yaml").exists()
    assert not (scaffold_project / "model_descriptions" / "other.yaml").exists()


def test_a_postprocessing_model_ends_the_ensemble_when_it_takes_the_modules_outputs(
    scaffold_project: Path, folders: list[str], weights: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    chain = ["--preprocess", "image_preprocess", "--postprocess", "image_postprocess"]
    logits = ["--input", "PIXELS:FP32:3,224,224", "--output", "LOGITS:FP32:1000:top1_agreement"]
    assert scaffold.main(["torch_module", "net", *CODE, *weights, *logits, *chain, *folders]) == 0
    _generated_equal_written(scaffold_project, "net")
    ensemble = load_model_config(scaffold_project / "model_repository" / "net_ensemble")
    steps = [step.model_name for step in ensemble.ensemble_scheduling.step]
    assert steps == ["net_preprocess", "net_onnx", "image_postprocess"]
    assert [t.name for t in ensemble.output] == ["SCORES", "CLASS_IDS", "LABELS"]
    assert "python -m clients classify photo.jpg --model net_ensemble" in capsys.readouterr().out
    assert scaffold.main(["torch_module", "few", *CODE, *weights, *IMAGE, *chain, *folders]) == 1
    assert "it takes [('FP32', [1000])], the module's outputs are [('FP32', [10])]" in capsys.readouterr().err
