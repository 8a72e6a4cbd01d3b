"""The CPU copy of the deployable repository, and the nginx configuration rendered for replicas.

The real ``nginx -t`` checks the rendered configuration in tests/integration/test_deploy_system_tools.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tritonlocal.replicas import TEMPLATE, render_nginx_config
from tritonrepo.configs import load_repository, parse_config
from tritonrepo.container_cpu import THREAD_PARAMETERS, write_cpu_copy
from tritonrepo.files import NATIVE_RUNTIMES

ROOT = Path(__file__).resolve().parents[2]

NATIVE_GPU_MODEL = """
name: "encoder"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "X__0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "Y__0" data_type: TYPE_FP32 dims: [ 4 ] } ]
instance_group [ { count: 2 kind: KIND_GPU gpus: [ 0, 1 ] } ]
optimization { execution_accelerators {
  gpu_execution_accelerator : [ { name : "tensorrt" } ]
  cpu_execution_accelerator : [ { name : "openvino" } ]
} }
"""
PYTHON_CPU_MODEL = """
name: "tokenizer"
backend: "python"
max_batch_size: 8
input [ { name: "TEXT" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "IDS" data_type: TYPE_INT64 dims: [ -1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
"""


@pytest.fixture()
def repository(tmp_path: Path) -> Path:
    repo = tmp_path / "model_repository"
    for name, text, files in (
        ("encoder", NATIVE_GPU_MODEL, ["model.onnx"]),
        ("tokenizer", PYTHON_CPU_MODEL, ["model.py"]),
    ):
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(text)
        for file in files:
            (repo / name / "1" / file).write_bytes(b"weights or code of " + name.encode())
    (repo / "tokenizer" / "1" / "__pycache__").mkdir()
    (repo / "encoder" / "1" / ".export.json").write_text('{"gated_on": {"device": "cpu"}}')
    (repo / "encoder" / "1" / ".model.onnx.tmp").write_text("a temporary of an interrupted export")
    return repo


def test_the_cpu_variant_keeps_native_backends_and_moves_gpu_instances_to_the_cpu(
    repository: Path, tmp_path: Path
) -> None:
    target = tmp_path / "cpu_repository"
    result = write_cpu_copy(repository, target)
    assert result.written == ["encoder", "tokenizer"] and result.moved_to_cpu == ["encoder"]
    encoder = parse_config(target / "encoder" / "config.pbtxt")
    assert encoder.platform == "onnxruntime_onnx", "unlike derive, the native backend stays"
    (group,) = encoder.instance_group
    assert group.kind == group.KIND_CPU and group.count == 2 and not group.gpus
    accelerators = encoder.optimization.execution_accelerators
    assert (
        not accelerators.gpu_execution_accelerator
        and accelerators.cpu_execution_accelerator[0].name == "openvino"
    )
    assert (target / "encoder" / "1" / "model.onnx").read_bytes() == b"weights or code of encoder"
    assert not (target / "encoder" / "1" / "model.onnx").is_symlink(), (
        "copied: the target is mounted on its own"
    )
    assert not (target / "tokenizer" / "1" / "__pycache__").exists()
    # The manifest says where the file was gated, for the server's start-up check; other hidden files stay.
    assert sorted(p.name for p in (target / "encoder" / "1").iterdir()) == [".export.json", "model.onnx"]
    original, copied = (
        load_repository(repository)["tokenizer"].config,
        parse_config(target / "tokenizer" / "config.pbtxt"),
    )
    assert copied == original


def test_the_cpu_variant_of_the_projects_repository_has_no_gpu_instance(tmp_path: Path) -> None:
    write_cpu_copy(ROOT / "model_repository", tmp_path / "cpu")
    for name, entry in load_repository(tmp_path / "cpu").items():
        original = load_repository(ROOT / "model_repository")[name].config
        assert entry.config.platform == original.platform and entry.config.backend == original.backend
        assert all(group.kind == group.KIND_CPU for group in entry.config.instance_group), name


@pytest.mark.parametrize("cores", [2, 8, 16])
def test_the_cpu_variant_divides_the_cores_between_each_native_models_instances(
    tmp_path: Path, cores: int
) -> None:
    write_cpu_copy(ROOT / "model_repository", tmp_path / "cpu", cores=cores)
    native = {name: e for name, e in load_repository(tmp_path / "cpu").items() if e.is_native}
    assert {"efficientnet_lite0_onnx", "efficientnet_lite0_torchscript"} <= set(native)
    for name, entry in native.items():
        parameters = {key: value.string_value for key, value in entry.config.parameters.items()}
        intra, inter = THREAD_PARAMETERS[NATIVE_RUNTIMES[entry.kind][0]]
        instances = sum(group.count for group in entry.config.instance_group)
        assert int(parameters[intra]) * instances == cores, (name, parameters)
        assert parameters[inter] == "1", name
        assert {w.batch_size for w in entry.config.model_warmup} <= {1}, "no per-shape search on a CPU"
        if NATIVE_RUNTIMES[entry.kind][0] == "onnxruntime":
            assert parameters["enable_mem_pattern"] == "false", "no memory pattern kept per batch shape"
        else:
            assert "enable_mem_pattern" not in parameters, name


def test_the_thread_parameters_are_the_names_each_backend_reads() -> None:
    assert THREAD_PARAMETERS == {
        "onnxruntime": ("intra_op_thread_count", "inter_op_thread_count"),
        "torchscript": ("INTRA_OP_THREAD_COUNT", "INTER_OP_THREAD_COUNT"),
    }
    assert {runtime for runtime, _ in NATIVE_RUNTIMES.values()} == set(THREAD_PARAMETERS)


def test_more_instances_than_cores_still_get_one_thread_each(repository: Path, tmp_path: Path) -> None:
    write_cpu_copy(repository, tmp_path / "cpu", cores=1)
    encoder = parse_config(tmp_path / "cpu" / "encoder" / "config.pbtxt")
    assert encoder.parameters["intra_op_thread_count"].string_value == "1"


def test_the_variant_refuses_to_overwrite_its_source(repository: Path) -> None:
    with pytest.raises(ValueError, match="is the source repository"):
        write_cpu_copy(repository, repository)


def test_the_nginx_template_renders_every_placeholder() -> None:
    text = render_nginx_config(
        TEMPLATE.read_text(),
        host="127.0.0.1",
        http_port=18000,
        grpc_port=18001,
        http_backends=["127.0.0.1:1001", "127.0.0.1:1002"],
        grpc_backends=["127.0.0.1:2001", "127.0.0.1:2002"],
        max_fails=1,
        fail_timeout_s=5,
    )
    assert "server 127.0.0.1:1002 max_fails=1 fail_timeout=5s;" in text
    assert "listen 127.0.0.1:18001 http2;" in text and "grpc_pass grpc://triton_grpc;" in text
    assert "proxy_next_upstream error timeout http_502 http_503 non_idempotent;" in text
    assert "proxy_next_upstream_tries 2;" in text


def test_an_unfilled_placeholder_is_reported() -> None:
    with pytest.raises(ValueError, match="@EXTRA@"):
        render_nginx_config(
            "listen @HOST@:@HTTP_PORT@; @EXTRA@",
            host="127.0.0.1",
            http_port=1,
            grpc_port=2,
            http_backends=[],
            grpc_backends=[],
            max_fails=1,
            fail_timeout_s=1,
        )
