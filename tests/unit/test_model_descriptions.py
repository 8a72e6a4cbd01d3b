"""Model descriptions (model_descriptions/*.yaml) and the EfficientNet-Lite family's width and depth
multipliers."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from description.errors import DescriptionError
from description.model import PYTHON_KIND, load_description, load_descriptions, parse_description
from export.efficientnet_lite import network as efficientnet_lite
from export.pipeline import KINDS, allowed_variants
from export.precision.gates import image_gate
from export.precision.selection import Variant
from tritonrepo.configs import load_model_config

ROOT = Path(__file__).resolve().parents[2]
DESCRIPTIONS = load_descriptions(ROOT / "model_descriptions")
LITE0 = ROOT / "model_descriptions" / "efficientnet_lite0.yaml"


def _described(path: Path = LITE0) -> dict:
    return yaml.safe_load(path.read_text())


def test_every_description_names_served_models_that_the_repository_configures() -> None:
    assert {d.name for d in DESCRIPTIONS} >= {"efficientnet_lite0", "efficientnet_lite2", "all_minilm_l6_v2"}
    for description in DESCRIPTIONS:
        if description.kind == PYTHON_KIND:  # Python models only: no weights, nothing exported
            assert description.weights is None and not description.served
            continue
        assert description.kind in KINDS
        for served in description.served:
            config = load_model_config(ROOT / "model_repository" / served.model)
            assert config.name == served.model
        assert description.weights_path().exists(), f"{description.name}: weights not installed"


def test_a_description_with_an_unknown_key_is_refused_with_the_keys_it_may_have(tmp_path: Path) -> None:
    data = _described() | {"input_size": 224}
    with pytest.raises(DescriptionError, match=r"unknown keys \['input_size'\].*'architecture'"):
        parse_description(data, source=tmp_path / "typo.yaml")


def test_a_description_of_an_unknown_kind_or_precision_is_refused(tmp_path: Path) -> None:
    with pytest.raises(DescriptionError, match="kind 'detector' is not one of"):
        parse_description(_described() | {"kind": "detector"}, source=tmp_path / "d.yaml")
    with pytest.raises(DescriptionError, match=r"precisions cpu: \['fp16'\]"):
        parse_description(_described() | {"precisions": {"cpu": ["fp16"]}}, source=tmp_path / "d.yaml")


def test_the_image_kind_is_named_for_its_architecture_and_its_old_name_points_at_the_new(
    tmp_path: Path,
) -> None:
    assert _described()["kind"] == "efficientnet_lite"
    with pytest.raises(
        DescriptionError, match="kind 'image_classifier' is now called 'efficientnet_lite'.*write"
    ):
        parse_description(_described() | {"kind": "image_classifier"}, source=tmp_path / "d.yaml")


def test_local_weights_are_checked_against_their_sha256(tmp_path: Path) -> None:
    weights = tmp_path / "weights.pt"
    weights.write_bytes(b"not the weights")
    good = hashlib.sha256(weights.read_bytes()).hexdigest()
    data = _described() | {"weights": {"path": "weights.pt", "sha256": good}}
    assert parse_description(data, source=tmp_path / "m.yaml").weights_path() == weights
    data["weights"]["sha256"] = "0" * 64
    with pytest.raises(DescriptionError, match="weights.pt has sha256 .* the description says 0000"):
        parse_description(data, source=tmp_path / "m.yaml").weights_path()


def test_the_pipeline_keeps_only_the_variants_a_description_allows() -> None:
    lite2 = load_description(ROOT / "model_descriptions" / "efficientnet_lite2.yaml")
    variants = [
        Variant(name=f"{precision}-{device}", precision=precision, device=device, build=lambda p: p)
        for precision, device in (("fp32", "cpu"), ("int8", "cpu"), ("bf16", "cpu"), ("fp16", "cuda"))
    ]
    assert [v.name for v in allowed_variants(variants, lite2)] == ["fp32-cpu"]
    lite0 = load_description(LITE0)
    assert [v.name for v in allowed_variants(variants, lite0)] == [v.name for v in variants]


def test_width_and_depth_one_are_the_base_stages() -> None:
    assert efficientnet_lite.scaled_stages(width=1.0, depth=1.0) == efficientnet_lite.BASE_STAGES


@pytest.mark.parametrize("name", ["efficientnet_lite0", "efficientnet_lite2"])
def test_the_scaled_architecture_matches_every_packaged_tensor_name_and_shape(name: str) -> None:
    description = load_description(ROOT / "model_descriptions" / f"{name}.yaml")
    packaged = torch.load(description.weights_path(), map_location="cpu", weights_only=True)
    architecture = {k: v for k, v in description.architecture.items() if k != "family"}
    built = efficientnet_lite.EfficientNetLite(**architecture).state_dict()
    assert {k: tuple(v.shape) for k, v in built.items()} == {k: tuple(v.shape) for k, v in packaged.items()}


def test_lite2_has_21_blocks_and_wider_stages_than_lite0() -> None:
    stages = efficientnet_lite.scaled_stages(width=1.1, depth=1.2)
    assert [s.repeats for s in stages] == [1, 3, 3, 4, 4, 5, 1]
    assert [s.out_channels for s in stages] == [16, 24, 48, 88, 120, 208, 352]


def test_no_export_code_names_a_described_model() -> None:
    """A model is added by its description and configs: the pipeline's code never names one."""
    for path in (ROOT / "export").glob("*.py"):
        assert "lite2" not in path.read_text().lower(), f"{path.name} names Lite2"


def test_a_description_may_set_its_own_gate_thresholds_and_only_those_the_gate_has(tmp_path: Path) -> None:
    strict = parse_description(_described() | {"gates": {"top1_agreement": 1.0}}, source=tmp_path / "d.yaml")
    reference = np.array([[3.0, 2.0, 1.0, 0.0, -1.0, -2.0], [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]] * 50)
    candidate = reference.copy()
    candidate[0, :2] = [2.0, 3.0]  # one of 100 rows changes its top-1
    assert image_gate(reference, candidate).passed  # 0.99 agreement meets the default
    tightened = image_gate(reference, candidate, minimums=strict.gates)
    assert not tightened.passed and tightened.thresholds["top1_agreement"] == 1.0
    with pytest.raises(ValueError, match=r"unknown thresholds \['top1_agrement'\]"):
        image_gate(reference, candidate, minimums={"top1_agrement": 1.0})
