"""No variant can sink the export: ``python -m export`` (its ``main``, in this process) over three small
sentence encoders generated here, in name order, where variants fail as they can on a GPU host.

This CPU machine stands in for a GPU: :func:`export.precision.device.why_unavailable` is replaced so that the
CUDA variants are offered here. Their real builders then write and verify the float32 file and fail in their
CUDA placement check (this onnxruntime has no CUDA provider), as an fp32 CUDA variant fails on a broken GPU
host. The int8 rewrite is replaced by one that raises. Everything else is the real pipeline: scaffolded
configs, real exports, gates on the sentence corpus, the serving onnxruntime, timing, records.

- ``a_tiny``: fp32 and int8 for a CPU, fp32 for CUDA: int8 and fp32 CUDA fail, fp32 is served;
- ``b_tiny``: fp32 for CUDA only, which fails: no servable file;
- ``c_tiny``: fp32 for a CPU, exported after ``b_tiny`` failed.
"""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from export.__main__ import main
from export.minilm import variants as text_variants
from export.precision import device
from export.scaffold import cli as scaffold

SIZE = {"hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 128}
PRECISIONS = {
    "a_tiny": {"cpu": ["fp32", "int8"], "cuda": ["fp32"]},
    "b_tiny": {"cpu": [], "cuda": ["fp32"]},
    "c_tiny": {"cpu": ["fp32"], "cuda": []},
}


@pytest.fixture(scope="module")
def project(
    tmp_path_factory: pytest.TempPathFactory, encoder_project: Callable[[Path, dict[str, int]], Path]
) -> Path:
    """Three scaffolded encoders (same weights) in a repository of their own, each described."""
    root = encoder_project(tmp_path_factory.mktemp("project"), SIZE)
    repository, templates, weights = root / "model_repository", root / "model_descriptions", root / "weights"
    described = root / "descriptions"
    described.mkdir()
    for name, allowed in PRECISIONS.items():
        argv = ["sentence_encoder", name, "--weights-path", str(weights), "--repository", str(repository)]
        assert scaffold.main([*argv, "--models", str(templates)]) == 0
        description = yaml.safe_load((templates / f"{name}.yaml").read_text())
        (described / f"{name}.yaml").write_text(yaml.safe_dump(description | {"precisions": allowed}))
    return root


@pytest.fixture(scope="module")
def exported(project: Path) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of one export of the three models."""

    def int8_that_crashes(*_args: object, **_kwargs: object) -> float:
        raise RuntimeError("the int8 rewrite crashed")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(device, "why_unavailable", lambda precision, on, capabilities: None)
        patch.setattr(text_variants, "write_int8_per_token", int8_that_crashes)
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = main(
                ["--models", str(project / "descriptions"), "--repository", str(project / "model_repository")]
                + ["--records", str(project / "records")]
            )
    return status, out.getvalue(), err.getvalue()


def _record(project: Path, model: str) -> dict:
    return json.loads((project / "records" / f"{model}.json").read_text())


def test_failing_variants_are_recorded_and_the_model_serves_what_passed(project: Path, exported) -> None:
    record = _record(project, "a_tiny_onnx")
    statuses = {c["variant"]: (c["status"], c["reason"]) for c in record["candidates"]}
    assert record["served"] == "onnx-fp32" and statuses["onnx-fp32"][0] == "served"
    assert statuses["onnx-int8-per-token"] == ("error", "building: RuntimeError: the int8 rewrite crashed")
    status, reason = statuses["onnx-fp32-cuda"]
    assert status == "error" and reason.startswith("building: ExportError: ") and "CUDA provider" in reason
    served = project / "model_repository" / "a_tiny_onnx" / "1"
    assert sorted(p.name for p in served.iterdir()) == [".export.json", "model.onnx"]
    manifest = json.loads((served / ".export.json").read_text())
    assert manifest["precision"]["served"] == "onnx-fp32"


def test_a_model_with_no_passing_variant_is_recorded_with_why_and_writes_no_file(
    project: Path, exported
) -> None:
    record = _record(project, "b_tiny_onnx")
    assert record["served"] is None
    assert record["failure"].startswith("no variant passed for --precision auto (onnx-fp32-cuda: error")
    assert [c["status"] for c in record["candidates"] if c["variant"] == "onnx-fp32-cuda"] == ["error"]
    assert not (project / "model_repository" / "b_tiny_onnx" / "1" / "model.onnx").exists()


def test_the_models_after_a_failed_one_are_still_exported(project: Path, exported) -> None:
    _, out, _ = exported
    assert _record(project, "c_tiny_onnx")["served"] == "onnx-fp32"
    assert (project / "model_repository" / "c_tiny_onnx" / "1" / "model.onnx").is_file()
    assert [line.split(":")[0] for line in out.splitlines() if ": done in " in line] == [
        "a_tiny",
        "b_tiny",
        "c_tiny",
    ]


def test_the_export_exits_1_naming_only_the_file_without_a_servable_variant(exported) -> None:
    status, _, err = exported
    assert status == 1
    summary = err[err.index("export failed: 1 file(s) have no servable file:\n") :]
    failed = summary.splitlines()[1:]
    assert len(failed) == 1 and failed[0].startswith("  b_tiny_onnx: no variant passed")
    assert "CUDA provider" in failed[0]


def test_the_log_shows_each_model_and_variant_as_n_of_m_with_the_time_left(exported) -> None:
    _, out, err = exported
    steps = [line for line in err.splitlines() if line.startswith("[")]  # stderr is no terminal: lines
    assert not [line for line in out.splitlines() if line.startswith("[")], "progress stays off stdout"
    assert "a_tiny: done in " in out  # the results
    assert steps[-1].endswith(" left] model 3/3 c_tiny, variants 5/5 - finished")
    assert any(
        "model 2/3 b_tiny, variants 3/5 - b_tiny_onnx onnx-fp32-cuda: building" in line for line in steps
    )
    assert any(" left] model 1/3 a_tiny, variants 1/5 - a_tiny_onnx onnx-int8" in line for line in steps)
