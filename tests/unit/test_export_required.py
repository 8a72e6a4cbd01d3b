"""The export's partial success: with TRITON_REQUIRED_MODELS set (as compose and the Kubernetes Job set it
to the server's value), a file that no required pipeline calls may fail its export without failing the
command; unset, every file is required."""

from __future__ import annotations

from pathlib import Path

import pytest

from export.__main__ import _exit_status, main
from export.pipeline import ExportResult
from export.required import REQUIRED_VARIABLE, required_models
from tritonrepo.errors import RepositoryError
from tritonrepo.paths import REPOSITORY


def _failed(model: str) -> ExportResult:
    return ExportResult(model=model, path=Path(model), written=False, failure="no variant passed")


def test_a_required_pipeline_needs_every_model_it_calls_and_nothing_else() -> None:
    required = required_models(REPOSITORY, {REQUIRED_VARIABLE: "image_classifier, text_embedder"})
    assert required is not None
    assert {
        "text_embedder",
        "text_tokenizer",
        "minilm_onnx",
        "image_classifier",
        "efficientnet_lite0_onnx",
    } <= (required)
    assert not {"minilm_torchscript", "text_embedder_torchscript", "diabetes_classifier_onnx"} & required
    assert (
        required_models(REPOSITORY, {}) is None
        and required_models(REPOSITORY, {REQUIRED_VARIABLE: ""}) is None
    )


def test_a_required_model_the_repository_does_not_hold_is_named() -> None:
    with pytest.raises(
        RepositoryError,
        match=r"names text_embeder, which .* does not hold; it holds .*; name models it holds",
    ):
        required_models(REPOSITORY, {REQUIRED_VARIABLE: "image_classifier,text_embeder"})


def test_an_optional_file_without_a_servable_variant_is_listed_and_the_export_succeeds(
    capsys: pytest.CaptureFixture[str],
) -> None:
    required = required_models(REPOSITORY, {REQUIRED_VARIABLE: "text_embedder"})
    assert _exit_status([_failed("minilm_torchscript")], required) == 0
    err = capsys.readouterr().err
    assert "not servable, and not required by TRITON_REQUIRED_MODELS (1 file(s)" in err
    assert "  minilm_torchscript: no variant passed" in err and "export failed" not in err
    assert _exit_status([_failed("minilm_torchscript"), _failed("minilm_onnx")], required) == 1
    err = capsys.readouterr().err
    assert "export failed: 1 file(s) have no servable file:\n  minilm_onnx: no variant passed" in err
    assert _exit_status([_failed("minilm_torchscript")], None) == 1, "unset: every file is required"


def test_the_export_refuses_a_required_model_it_does_not_hold_before_exporting(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(REQUIRED_VARIABLE, "no_such_pipeline")
    assert main(["--only", "diabetes_classifier", "--served-on", "cpu"]) == 2
    assert "export refused: TRITON_REQUIRED_MODELS='no_such_pipeline' names no_such_pipeline" in (
        capsys.readouterr().err
    )
