"""python -m tritonrepo check: a corpus of broken repositories, one per defect class, each the defect an
upstream report describes, built here from tiny generated ONNX and TorchScript files; each is flagged with
its finding, and the shipped repository and every repository derived from it pass."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from tritonrepo.__main__ import main
from tritonrepo.contract import check_repository
from tritonrepo.contract.onnx_file import batch_feeds
from tritonrepo.contract.release_notes import pinned_tag, release
from tritonrepo.paths import REPOSITORY

LINEAR = """
name: "{name}" platform: "onnxruntime_onnx" max_batch_size: 8
input [ {{ name: "{input}" data_type: {dtype} dims: {dims} }} ]
output [ {{ name: "Y" data_type: TYPE_FP32 dims: [ 2 ] }} ]
"""


def onnx_linear(path: Path, *, x_shape=("batch", 4), x_name="X", fixed_batch: bool = False) -> Path:
    """Y [batch, 2] = X [batch, 4] @ W, float; ``fixed_batch``: X is reshaped to [1, 4] inside, as an
    exporter that traced a batch of 1 leaves it, through a shape that shape inference does not fold (so
    the declared shapes stay dynamic, as in the exporter's file)."""
    import onnx
    from onnx import TensorProto, helper

    nodes, source = [], x_name
    initializers = [helper.make_tensor("W", TensorProto.FLOAT, [4, 2], np.ones(8, np.float32))]
    if fixed_batch:
        initializers.append(helper.make_tensor("traced", TensorProto.INT64, [2], [1, 4]))
        nodes.append(helper.make_node("Identity", ["traced"], ["traced_shape"]))
        nodes.append(helper.make_node("Reshape", [x_name, "traced_shape"], ["flat"]))
        source = "flat"
    nodes.append(helper.make_node("MatMul", [source, "W"], ["Y"]))
    graph = helper.make_graph(
        nodes,
        "linear",
        [helper.make_tensor_value_info(x_name, TensorProto.FLOAT, list(x_shape))],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["batch", 2])],
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, path)
    return path


@pytest.fixture(scope="session")
def torchscript_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """forward(x, y) -> x + y, scripted; and a state dict saved with torch.save (not loadable by libtorch)."""
    import torch  # here: most unit tests need no torch

    class Add(torch.nn.Module):
        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return x + y

    folder = tmp_path_factory.mktemp("torchscript")
    torch.jit.save(torch.jit.script(Add()), str(folder / "add.pt"))
    torch.save(torch.nn.Linear(2, 2).state_dict(), folder / "state_dict.pt")
    return {"add": folder / "add.pt", "state_dict": folder / "state_dict.pt"}


def model(root: Path, name: str, config: str, files: dict[str, Path | bytes] | None = None) -> None:
    """``root/name`` with ``config`` and version folder 1 holding ``files`` (copies, or bytes)."""
    (root / name / "1").mkdir(parents=True, exist_ok=True)
    (root / name / "config.pbtxt").write_text(config)
    for filename, content in (files or {}).items():
        target = root / name / "1" / filename
        target.write_bytes(content if isinstance(content, bytes) else content.read_bytes())


def linear(root: Path, name: str = "m", *, dims: str = "[ 4 ]", dtype: str = "TYPE_FP32", **graph) -> Path:
    path = onnx_linear(root / name / "1" / "model.onnx", **graph)
    (root / name / "config.pbtxt").write_text(LINEAR.format(name=name, input="X", dtype=dtype, dims=dims))
    return path


def add_model(root: Path, pt: Path, inputs: str) -> None:
    """Model ``t``: the TorchScript file ``pt`` with ``inputs`` and one output SUM__0."""
    config = (
        f'name: "t" platform: "pytorch_libtorch" max_batch_size: 8 input [ {inputs} ] '
        'output [ { name: "SUM__0" data_type: TYPE_FP32 dims: [ 2 ] } ]'
    )
    model(root, "t", config, {"model.pt": pt})


def x_input(name: str) -> str:
    return f'{{ name: "{name}" data_type: TYPE_FP32 dims: [ 2 ] }}'


PYTHON_STEP = """
name: "{name}" backend: "python" max_batch_size: 8
input [ {{ name: "IN" data_type: {dtype} dims: [ 4 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] }} ]
"""
ENSEMBLE = """
name: "pipeline" platform: "ensemble" max_batch_size: 8
input [ {{ name: "RAW" data_type: {dtype} dims: [ 4 ] {ragged} }} ]
output [ {{ name: "RESULT" data_type: TYPE_FP32 dims: [ 4 ] }} ]
ensemble_scheduling {{ step [ {{ model_name: "{step}" model_version: -1
  input_map {{ key: "IN" value: "RAW" }} output_map {{ key: "OUT" value: "{written}" }} }} ] }}
"""


def pipeline(
    root: Path, *, step_dtype="TYPE_FP32", dtype="TYPE_FP32", step="pre", written="RESULT", ragged=""
):
    model(root, "pre", PYTHON_STEP.format(name="pre", dtype=step_dtype), {"model.py": b"# a Python model\n"})
    model(root, "pipeline", ENSEMBLE.format(dtype=dtype, step=step, written=written, ragged=ragged))


# (severity, model, finding code) and what writes the broken repository, called as write(root, pt)
Case = tuple[tuple[str, str, str], Callable[..., object]]


def ensemble_case(severity: str, code: str, **broken: str) -> Case:
    """A case whose ensemble ``pipeline`` is written with :func:`pipeline`'s keywords ``broken``."""
    return (severity, "pipeline", code), lambda root, pt: pipeline(root, **broken)


def warmup(root: Path, sample: str, data: bytes | None = None) -> None:
    linear(root)
    config = root / "m" / "config.pbtxt"
    config.write_text(config.read_text() + f"model_warmup [ {{ name: 'w' batch_size: 1 {sample} }} ]")
    if data is not None:
        (root / "m" / "warmup").mkdir()
        (root / "m" / "warmup" / "x.fp32").write_bytes(data)


# Each case: (severity, model, finding code) and what writes the broken repository; the comment names the
# upstream report of the defect.
CASES: dict[str, Case] = {
    # NVIDIA/dl-inference-server #23: "unexpected inference input ... allowed inputs are: input_1".
    "input named otherwise than in the file": (
        ("error", "m", "onnx-input-name"),
        lambda root, pt: linear(root, x_name="input_1"),
    ),
    # server #2644: a config datatype the ONNX input does not have.
    "input datatype": (("error", "m", "onnx-datatype"), lambda root, pt: linear(root, dtype="TYPE_INT64")),
    # server #998 (fixed by #1006, the "model expects N dimensions" message) and #1338: the batch axis
    # written into dims as well as implied by max_batch_size.
    "batch axis in dims": (("error", "m", "onnx-rank"), lambda root, pt: linear(root, dims="[ 1, 4 ]")),
    # server #4194: dims [1,3,224,244] for a [1,3,224,224] file.
    "dims value": (("error", "m", "onnx-dims"), lambda root, pt: linear(root, dims="[ 5 ]")),
    # server #2387: an ONNX file exported with a fixed batch of 16, served with max_batch_size > 0.
    "fixed batch axis in the file": (
        ("error", "m", "onnx-batch-axis"),
        lambda root, pt: linear(root, x_shape=(16, 4)),
    ),
    # pytorch #148886: the batch axis declared dynamic, the traced batch size left inside the graph.
    "batch size traced into the graph": (
        ("error", "m", "onnx-batch-run"),
        lambda root, pt: linear(root, fixed_batch=True),
    ),
    # server #4824: "configuration expects 0 inputs, model provides 2".
    "forward() arity": (
        ("error", "t", "torchscript-arity"),
        lambda root, pt: add_model(root, pt, x_input("X")),
    ),
    # server #3307: TorchScript inputs named neither after forward() nor <name>__<index>.
    "libtorch naming convention": (
        ("warning", "t", "torchscript-naming"),
        lambda root, pt: add_model(root, pt, f"{x_input('A')}, {x_input('B')}"),
    ),
    # server #3307 again: <name>__<index> names binding one argument twice.
    "libtorch index twice": (
        ("error", "t", "torchscript-index"),
        lambda root, pt: add_model(root, pt, f"{x_input('X__0')}, {x_input('Y__0')}"),
    ),
    # server #3307: inputs named after forward()'s arguments but listed in another order, bound by order.
    "libtorch inputs out of order": (
        ("error", "t", "torchscript-order"),
        lambda root, pt: add_model(root, pt, f"{x_input('Y')}, {x_input('X')}"),
    ),
    # server #7497: a model.pt libtorch cannot load; a state dict saved with torch.save is the usual one.
    "state dict instead of TorchScript": (
        ("error", "t", "torchscript-load"),
        lambda root, pt: add_model(root, pt.parent / "state_dict.pt", f"{x_input('X')}, {x_input('Y')}"),
    ),
    # onnxruntime_backend #148: "dynamic batching preferred size must be <= max batch size".
    "preferred batch size": (
        ("error", "m", "preferred-batch-size"),
        lambda root, pt: _append(linear(root), "dynamic_batching { preferred_batch_size: [ 4, 16 ] }"),
    ),
    # server #8870 reports the same non-prefetching batcher path (any queue policy); one instance behind it
    # waits for the batcher's 500 ms poll (docs/measurements.md, "The queue policy's stall").
    "bounded queue, one instance": (
        ("warning", "m", "queue-one-instance"),
        lambda root, pt: _append(
            linear(root), "dynamic_batching { default_queue_policy { max_queue_size: 8 } }"
        ),
    ),
    # No user report found: core r24.10 ValidateBatchIO refuses it ("unknown source input name").
    "batch input source": (
        ("error", "p", "batch-input"),
        lambda root, pt: model(
            root,
            "p",
            PYTHON_STEP.format(name="p", dtype="TYPE_FP32")
            + 'batch_input [ { kind: BATCH_ELEMENT_COUNT target_name: "N" data_type: TYPE_INT32 '
            'source_input: "TOKENS" } ]',
            {"model.py": b"# a Python model\n"},
        ),
    ),
    # server #8653: allow_ragged_batch on an ensemble input, which the ensemble scheduler ignores.
    "ragged ensemble input": ensemble_case("warning", "ragged-ensemble", ragged="allow_ragged_batch: true"),
    # server #5943 (its follow-up): an ensemble step naming a model that is not loaded.
    "ensemble step model missing": ensemble_case("error", "ensemble-step-model", step="preprocess"),
    # server #2885: "inference input data-type is 'BYTES', model expects 'FP32'" inside an ensemble.
    "ensemble datatypes": ensemble_case("error", "ensemble-datatype", dtype="TYPE_STRING"),
    # server #4560: "output 'OUT' for ensemble 'full-pipeline' is not written".
    "ensemble output not written": ensemble_case(
        "error", "ensemble-output-not-written", written="INTERMEDIATE"
    ),
    # server #1795: a warm-up sample keyed by another name than the model's input.
    "warm-up input name": (
        ("error", "m", "warmup"),
        lambda root, pt: warmup(
            root, 'inputs { key: "input" value { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } }'
        ),
    ),
    # server #1796: "warmup setting expects 6220800 bytes, but the data provided ... only has 4080549".
    "warm-up data file short": (
        ("error", "m", "warmup"),
        lambda root, pt: warmup(
            root,
            'inputs { key: "X" value { data_type: TYPE_FP32 dims: [ 4 ] input_data_file: "x.fp32" } }',
            data=bytes(8),
        ),
    ),
    # server #3650: "unexpected platform type python".
    "platform python": (
        ("error", "p", "platform"),
        lambda root, pt: model(
            root, "p", PYTHON_STEP.format(name="p", dtype="TYPE_FP32").replace("backend", "platform")
        ),
    ),
    # server #3687 ("No model version was found"): a model folder without a version folder.
    "no version folder": (
        ("error", "p", "no-version"),
        lambda root, pt: (
            (root / "p").mkdir()
            or (root / "p" / "config.pbtxt").write_text(PYTHON_STEP.format(name="p", dtype="TYPE_FP32"))
        ),
    ),
    # server #4957: "failed to stat file /models/yolox_onnx/1/model.onnx": not exported yet, a warning.
    "file not exported": (
        ("warning", "m", "not-exported"),
        lambda root, pt: linear(root).unlink(),
    ),
}


def _append(onnx_path: Path, text: str) -> None:
    config = onnx_path.parents[1] / "config.pbtxt"
    config.write_text(config.read_text() + text)


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_broken_repository_is_flagged_with_its_finding(
    case: str, tmp_path: Path, torchscript_files: dict[str, Path]
) -> None:
    (severity, name, code), write = CASES[case]
    write(tmp_path, torchscript_files["add"])
    findings = check_repository(tmp_path).findings
    lines = "\n".join(f.line() for f in findings)
    assert {(f.severity, f.model) for f in findings if f.code == code} == {(severity, name)}, lines
    others = [f for f in findings if f.severity == "error" and f.code != code]
    assert not others, lines  # the defect, and nothing else, is reported as an error


def test_a_finding_line_names_the_values_and_the_fix(tmp_path: Path) -> None:
    linear(tmp_path, dims="[ 5 ]")
    (finding,) = check_repository(tmp_path).findings
    assert finding.line() == (
        "error: m: input X is [-1, 4] in the file, [-1, 5] in the config (the batch axis first, as "
        "max_batch_size > 0); fix: set dims: [4] [onnx-dims]"
    )


def test_a_sound_onnx_and_torchscript_model_pass_and_their_batch_run_is_fed_as_triton_feeds(
    tmp_path: Path, torchscript_files: dict[str, Path]
) -> None:
    linear(tmp_path)
    add_model(tmp_path, torchscript_files["add"], f"{x_input('X__0')}, {x_input('Y__1')}")
    assert check_repository(tmp_path).findings == []


def test_a_ragged_input_is_fed_flat_with_its_batch_input_computed_from_it() -> None:
    from google.protobuf import text_format
    from tritonclient.grpc.model_config_pb2 import ModelConfig

    config = text_format.Parse(
        'max_batch_size: 8 input [ { name: "IDS" data_type: TYPE_INT64 dims: [ -1 ] '
        "allow_ragged_batch: true } ] "
        'batch_input [ { kind: BATCH_ITEM_SHAPE_FLATTEN target_name: "LENGTHS" data_type: TYPE_INT32 '
        'source_input: "IDS" } ]',
        ModelConfig(),
    )
    feeds = batch_feeds(config, 2)
    assert feeds["IDS"].shape == (8,) and feeds["IDS"].dtype == np.int64
    assert feeds["LENGTHS"].tolist() == [4, 4] and feeds["LENGTHS"].dtype == np.int32


def test_a_release_that_changes_client_shared_memory_gets_a_note(tmp_path: Path) -> None:
    linear(tmp_path)
    assert check_repository(tmp_path, triton=pinned_tag()).findings == []  # the pinned 24.10
    (note,) = check_repository(tmp_path, triton="nvcr.io/nvidia/tritonserver:26.05-py3").findings
    assert (note.severity, note.code) == ("note", "release-note")
    assert "--allow-client-shm=true" in note.fix
    assert release("24.10-py3") == (24, 10)


def test_model_repository_and_every_repository_derived_from_it_pass(tmp_path: Path) -> None:
    from loadtest.bench.gpu.plan import INSTANCES, NOBATCH, TEXT_MODEL
    from tritonrepo.clones import Clone, build_repository
    from tritonrepo.container_cpu import write_cpu_copy
    from tritonrepo.derive import derive_repository

    derive_repository(REPOSITORY, tmp_path / "local")
    write_cpu_copy(REPOSITORY, tmp_path / "cpu", cores=2)
    clones = [Clone(model=TEXT_MODEL), Clone(model=TEXT_MODEL, suffix=NOBATCH, batching=False)]
    clones += [Clone(model=TEXT_MODEL, suffix=INSTANCES.format(2), instances=2)]
    for derive in (True, False):
        build_repository(REPOSITORY, tmp_path / f"bench-{derive}", clones, total_threads=2, derive=derive)
    for repository in (REPOSITORY, *(tmp_path / f for f in ("local", "cpu", "bench-True", "bench-False"))):
        report = check_repository(repository)
        errors = [f.line() for f in report.findings if f.severity == "error"]
        assert report.models and not errors, f"{repository}:\n" + "\n".join(errors)


def test_the_command_exits_1_on_errors_0_on_warnings_and_2_on_usage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    linear(tmp_path / "broken", dims="[ 5 ]")
    assert main(["check", str(tmp_path / "broken")]) == 1
    summary = f"checked 1 models in {tmp_path / 'broken'}: 1 errors, 0 warnings, 0 notes"
    assert capsys.readouterr().out.splitlines()[-1] == summary
    linear(tmp_path / "unexported").unlink()
    assert main(["check", str(tmp_path / "unexported")]) == 0
    assert main(["check", str(tmp_path), "--triton", "latest"]) == 2
