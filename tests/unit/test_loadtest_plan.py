"""Which exported encoders the in-process and profiling stages run (no exported file needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadtest.experiments.plan import EXPORTED, exported_models
from loadtest.load.pipelines import ExportedModel


def test_each_runtime_runs_its_text_encoder_before_its_image_encoder() -> None:
    encoders = exported_models(Path("repo"), 2, "torchscript")
    assert [(e.model, e.pipeline) for e in encoders] == [
        ("minilm_torchscript", "text"),
        ("efficientnet_lite0_torchscript", "image"),
    ]
    assert all(e.runtime == "torchscript" and e.threads == 2 for e in encoders)


def test_the_profiles_cover_every_exported_encoder() -> None:
    assert [e.model for e in exported_models(Path("repo"), 1)] == list(EXPORTED)


def test_an_exported_model_refuses_a_pipeline_it_cannot_feed() -> None:
    with pytest.raises(ValueError, match="pipeline one of"):
        ExportedModel(repository=Path("repo"), model="m", runtime="onnxruntime", pipeline="audio", threads=1)
