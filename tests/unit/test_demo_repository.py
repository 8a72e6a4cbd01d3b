"""The demo compares batching on and off at the same load: each ensemble it measures is served beside a
clone whose every step has no dynamic batcher, and the two arms send with the same number in flight."""

from __future__ import annotations

from pathlib import Path

import pytest

import demo.__main__ as demo_main
from demo.batching import ENSEMBLES, NOBATCH, arms, build_demo_repository
from tritonrepo.configs import closure, load_repository
from tritonrepo.paths import REPOSITORY


def test_the_demo_serves_each_ensemble_beside_a_clone_without_batching(tmp_path: Path) -> None:
    served = build_demo_repository(tmp_path, cores=2)
    source, built = load_repository(REPOSITORY), load_repository(tmp_path)
    for ensemble in ENSEMBLES:
        for name in closure(source, ensemble):
            assert {name, name + NOBATCH} <= set(served)
            assert not built[name + NOBATCH].config.HasField("dynamic_batching")
            assert built[name].config.HasField("dynamic_batching") == source[name].config.HasField(
                "dynamic_batching"
            )
    assert any(source[name].config.HasField("dynamic_batching") for name in closure(source, ENSEMBLES[0]))


def test_batching_on_and_off_are_sent_the_same_load_and_one_at_a_time_is_labelled_apart() -> None:
    lone, off, on = arms("text_embedder", 32)
    assert (lone.model, lone.in_flight) == ("text_embedder", 1)
    assert (off.model, off.in_flight) == ("text_embedder" + NOBATCH, 32)
    assert (on.model, on.in_flight) == ("text_embedder", 32)
    assert "batching off" in off.label and "batching on" in on.label and "one request at a time" in lone.label


def test_a_file_that_failed_its_export_is_named_once_and_the_demo_does_not_serve(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(
        demo_main, "export_needed", lambda *args, **kwargs: {"minilm_onnx": "its gate failed"}
    )
    monkeypatch.setattr(demo_main, "why_files_missing", lambda entry: f"{entry.name}/1/model.onnx is missing")
    assert demo_main.exported() is False
    lines = capsys.readouterr().err.splitlines()
    assert [line for line in lines if "minilm_onnx" in line] == ["not exported: minilm_onnx: its gate failed"]
    assert "cannot serve efficientnet_lite0_onnx: efficientnet_lite0_onnx/1/model.onnx is missing" in lines
