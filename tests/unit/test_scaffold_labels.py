"""The scaffold of an image classifier of classes other than ImageNet's: its class count from its weights,
its own post-processing model with its labels, and the refusals when the labels, the weights and the served
logits disagree (tests/integration/test_own_classes.py serves one)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from description.generated_configs import generate, stale_configs
from description.model import load_description
from export.common import ExportError
from export.efficientnet_lite import kind as image
from export.scaffold import cli as scaffold
from export.scaffold import files as scaffold_files
from export.scaffold import template as scaffold_template
from tritonrepo.configs import load_repository
from tritonrepo.served_code import BATCHING_HELPER


@pytest.fixture
def project(scaffold_project: Path) -> Path:
    return scaffold_project


@pytest.fixture(scope="module")
def own(tmp_path_factory: pytest.TempPathFactory, own_classes) -> tuple[Path, Path]:
    """Lite0 with its head cut to ten ImageNet classes, and their labels (tests/conftest.py)."""
    return own_classes(tmp_path_factory.mktemp("own"))


def _own_request(project: Path, weights: Path, labels: Path | None, **fields) -> scaffold_template.Request:
    descriptions = project / "model_descriptions"
    defaults = {
        "kind": "efficientnet_lite",
        "name": "pets",
        "weights": scaffold_files.local_weights(weights, descriptions),
        "labels": labels,
        "repository": project / "model_repository",
        "models_dir": descriptions,
    }
    return scaffold_template.Request(**(defaults | fields))


def test_an_image_classifier_with_its_labels_gets_its_own_postprocessing_model_of_its_classes(
    project: Path, own: tuple[Path, Path]
) -> None:
    weights, labels = own
    written = scaffold_template.scaffold(_own_request(project, weights, labels))
    assert [p.relative_to(project).as_posix() for p in written] == [
        "model_descriptions/pets.yaml",
        "model_repository/pets_postprocess/config.pbtxt",
        "model_repository/pets_onnx/config.pbtxt",
        "model_repository/pets_preprocess/config.pbtxt",
        "model_repository/pets_classifier/config.pbtxt",
        "model_repository/pets_postprocess/1/labels.txt",
    ]
    description = load_description(project / "model_descriptions" / "pets.yaml")
    assert description.configs is not None and description.configs.native is not None
    assert [list(t.dims) for t in description.configs.native.outputs] == [[10]]
    (post,) = description.configs.python_models
    assert post.model == "pets_postprocess"
    assert post.parameters == {"top_k": "5", "labels_file": "labels.txt"}
    models = load_repository(project / "model_repository")
    config = models["pets_postprocess"].config
    assert (config.input[0].name, list(config.input[0].dims)) == ("LOGITS", [10])
    assert [(o.name, list(o.dims)) for o in config.output] == [
        ("SCORES", [5]),
        ("CLASS_IDS", [5]),
        ("LABELS", [5]),
    ]
    steps = [step.model_name for step in models["pets_classifier"].config.ensemble_scheduling.step]
    assert steps == ["pets_preprocess", "pets_onnx", "pets_postprocess"]
    assert list(models["pets_onnx"].config.output[0].dims) == [10]
    code = project / "model_repository" / "pets_postprocess" / "1"
    shipped = project / "model_repository" / "image_postprocess" / "1" / "model.py"
    assert (code / "model.py").resolve() == shipped.resolve()
    assert (code / BATCHING_HELPER).resolve() == (project / "model_repository" / BATCHING_HELPER).resolve()
    assert (code / "labels.txt").read_text() == labels.read_text()
    assert not stale_configs(
        description, project / "model_repository", generate(description, project / "model_repository")
    )  # each as generated
    text = (project / "model_descriptions" / "pets.yaml").read_text()
    assert "image_postprocess:" not in text.split("name: pets")[0]  # no step shared with the template


def test_a_classifier_of_fewer_than_five_classes_ranks_all_of_them(
    project: Path, tmp_path: Path, own_classes
) -> None:
    weights, labels = own_classes(tmp_path / "three", {282: "cat", 967: "espresso", 657: "missile"})
    scaffold_template.scaffold(_own_request(project, weights, labels))
    config = load_repository(project / "model_repository")["pets_postprocess"].config
    assert list(config.input[0].dims) == [3]
    assert [list(o.dims) for o in config.output] == [[3], [3], [3]]
    assert config.parameters["top_k"].string_value == "3"


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (9, r"labels.txt has 9 labels, but the weights' classifier head \(_fc.weight\) has 10 classes"),
        (11, r"has 11 labels, but the weights' classifier head \(_fc.weight\) has 10 classes"),
    ],
)
def test_a_labels_file_of_another_count_is_refused_naming_both_before_anything_is_written(
    project: Path, own: tuple[Path, Path], tmp_path: Path, lines: int, message: str
) -> None:
    weights, labels = own
    names = [f"class {i}" for i in range(lines)]
    (tmp_path / "labels.txt").write_text("\n".join(names) + "\n")
    with pytest.raises(ExportError, match=message + ".*one label per class"):
        scaffold_template.scaffold(_own_request(project, weights, tmp_path / "labels.txt"))
    assert not (project / "model_descriptions" / "pets.yaml").exists()
    assert not (project / "model_repository" / "pets_postprocess").exists()


def test_weights_of_other_classes_without_labels_are_refused_as_they_would_share_imagenets(
    project: Path, own: tuple[Path, Path]
) -> None:
    with pytest.raises(ExportError, match=r"has 10 classes, but image_postprocess.*takes 1000.*--labels"):
        scaffold_template.scaffold(_own_request(project, own[0], None))
    assert not (project / "model_descriptions" / "pets.yaml").exists()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("cat\n\ndog\n", r"line\(s\) \[2\] are blank"),
        ("cat\ndog\ncat\n", r"\['cat'\] appear more than once"),
    ],
)
def test_a_labels_file_with_a_blank_or_repeated_label_is_refused(
    project: Path, tmp_path: Path, own_classes, text: str, message: str
) -> None:
    weights, _ = own_classes(tmp_path / "three", {282: "cat", 967: "espresso", 657: "missile"})
    (tmp_path / "bad.txt").write_text(text)
    with pytest.raises(ExportError, match=message):
        scaffold_template.scaffold(_own_request(project, weights, tmp_path / "bad.txt"))


def test_a_head_of_one_class_is_refused(project: Path, tmp_path: Path, own_classes) -> None:
    weights, labels = own_classes(tmp_path / "one", {282: "cat"})
    with pytest.raises(ExportError, match=r"_fc.weight has 1 class\(es\); a classifier needs at least 2"):
        scaffold_template.scaffold(_own_request(project, weights, labels))


def test_labels_are_an_efficientnet_lite_option_only(
    project: Path, folders: list[str], own: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["sentence_encoder", "mine", "--weights-path", str(own[0]), "--labels", str(own[1]), *folders]
    with pytest.raises(SystemExit) as exited:
        scaffold.main(argv)
    assert exited.value.code == 2
    assert "give an efficientnet_lite's labels file" in capsys.readouterr().err
    with pytest.raises(ExportError, match="a sentence_encoder has no labels"):
        _own_request(project, *own, kind="sentence_encoder")


def _edit_pets(project: Path, edit) -> None:
    """The scaffolded description of ``pets`` with ``edit`` applied to its configs section."""
    path = project / "model_descriptions" / "pets.yaml"
    data = yaml.safe_load(path.read_text())
    edit(data["configs"])
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def _native_logits(configs: dict, dims: list[int]) -> None:
    configs["native"]["outputs"][0]["dims"] = dims


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda configs: _native_logits(configs, [1000]),
            r"pets_onnx: its output has dims \[1000\], but the weights' classifier head has 10 classes; "
            r"set configs.native.outputs' dims to \[10\]",
        ),
        (
            lambda configs: configs["python_models"][0]["inputs"][0].update(dims=[12]),
            r"ensemble pets_classifier: its step pets_postprocess takes logits of dims \[12\] from "
            r"pets_onnx, but the weights' classifier head has 10 classes; set its input's dims to \[10\]",
        ),
        (
            lambda configs: configs["ensembles"][0].update(
                steps=["pets_preprocess", "pets_onnx", "image_postprocess"]
            ),
            r"its step image_postprocess takes logits of dims \[1000\] .* has 10 classes; give the "
            r"model its own post-processing and labels: .* efficientnet_lite NAME --labels",
        ),
    ],
)
def test_the_export_refuses_served_logits_that_disagree_with_the_weights_classes(
    project: Path, own: tuple[Path, Path], edit, message: str
) -> None:
    scaffold_template.scaffold(_own_request(project, *own))
    _edit_pets(project, edit)
    description = load_description(project / "model_descriptions" / "pets.yaml")
    with pytest.raises(ExportError, match=message):
        image.KIND.prepare(
            description, project / "model_repository", generate(description, project / "model_repository")
        )  # before any config is rewritten
