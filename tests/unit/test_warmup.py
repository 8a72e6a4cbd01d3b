from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf import text_format

from modelrepo import ModelConfig, ModelEntry, load_repository
from tritonlocal.derive import derive_local_config
from tritonlocal.warmup import BatchShape, batcher_shapes, uncovered_shapes, warmup_shapes

REPOSITORY = Path(__file__).resolve().parents[2] / "model_repository"
MODELS = load_repository(REPOSITORY)
# Native models (a backend that searches or compiles per shape in NVIDIA's container) whose inputs
# have fixed dims: the batch size is the only thing that varies. Encoders with variable dims are
# checked by passing the lengths their sender produces as variable_dims.
FIXED_SHAPE_NATIVE = sorted(
    name
    for name, entry in MODELS.items()
    if entry.is_native and all(-1 not in tensor.dims for tensor in entry.config.input)
)

ENCODER = """
name: "encoder"
platform: "onnxruntime_onnx"
max_batch_size: 3
input [
  { name: "INPUT_IDS" data_type: TYPE_INT64 dims: [ -1 ] },
  { name: "ATTENTION_MASK" data_type: TYPE_INT64 dims: [ -1 ] }
]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
dynamic_batching { preferred_batch_size: [ 2 ] max_queue_delay_microseconds: 100 }
model_warmup [
  { name: "b1_l8" batch_size: 1
    inputs { key: "INPUT_IDS" value: { data_type: TYPE_INT64 dims: [ 8 ] zero_data: true } }
    inputs { key: "ATTENTION_MASK" value: { data_type: TYPE_INT64 dims: [ 8 ] zero_data: true } } }
]
"""


def _config(text: str) -> ModelConfig:
    return text_format.Parse(text, ModelConfig())


def test_the_repository_has_fixed_shape_native_models_to_check() -> None:
    assert {"efficientnet_lite0_onnx", "efficientnet_lite0_torchscript"} <= set(FIXED_SHAPE_NATIVE)


@pytest.mark.parametrize("name", FIXED_SHAPE_NATIVE)
def test_warmup_runs_every_batch_size_the_batcher_forms(name: str) -> None:
    config = MODELS[name].config
    missing = uncovered_shapes(config)
    assert not missing, f"{name}: no warm-up for " + ", ".join(shape.describe() for shape in missing)
    assert len(batcher_shapes(config)) == config.max_batch_size


def test_batcher_shapes_list_every_size_up_to_max_batch_size_not_only_the_preferred_ones() -> None:
    config = _config(ENCODER)
    lengths = {"INPUT_IDS": [(8,), (16,)], "ATTENTION_MASK": [(8,), (16,)]}
    shapes = batcher_shapes(config, variable_dims=lengths)
    assert [(s.batch_size, dict(s.dims)["INPUT_IDS"]) for s in shapes] == [
        (1, (8,)), (1, (16,)), (2, (8,)), (2, (16,)), (3, (8,)), (3, (16,)),
    ]  # fmt: skip
    # ids and mask of one bucket travel together: never (8,) with (16,)
    assert all(dict(s.dims)["INPUT_IDS"] == dict(s.dims)["ATTENTION_MASK"] for s in shapes)


def test_uncovered_shapes_names_the_batches_a_warmup_misses() -> None:
    config = _config(ENCODER)
    lengths = {"INPUT_IDS": [(8,), (16,)], "ATTENTION_MASK": [(8,), (16,)]}
    assert warmup_shapes(config) == [
        BatchShape(batch_size=1, dims=(("INPUT_IDS", (8,)), ("ATTENTION_MASK", (8,))))
    ]
    missing = uncovered_shapes(config, variable_dims=lengths)
    assert len(missing) == 5
    assert missing[0].describe() == "batch 1 (INPUT_IDS [16], ATTENTION_MASK [16])"


def test_a_variable_dimension_without_its_lengths_is_refused_with_the_fix() -> None:
    with pytest.raises(ValueError, match=r"INPUT_IDS has a variable dimension .* variable_dims="):
        batcher_shapes(_config(ENCODER))


def test_lengths_that_do_not_fit_the_config_dims_are_refused() -> None:
    with pytest.raises(ValueError, match="do not fit"):
        batcher_shapes(_config(ENCODER), variable_dims={"INPUT_IDS": [(8, 2)], "ATTENTION_MASK": [(8,)]})


@pytest.mark.parametrize("name", FIXED_SHAPE_NATIVE)
def test_local_cpu_server_keeps_only_the_smallest_warmup_and_a_gpu_keeps_all(name: str) -> None:
    entry: ModelEntry = MODELS[name]
    on_cpu = derive_local_config(entry, gpu_available=False, intra_op_threads=None)
    on_gpu = derive_local_config(entry, gpu_available=True, intra_op_threads=None)
    smallest = min(sample.batch_size for sample in entry.config.model_warmup)
    assert [sample.batch_size for sample in on_cpu.model_warmup] == [smallest]
    assert list(on_gpu.model_warmup) == list(entry.config.model_warmup)


def test_a_ragged_input_is_refused_because_no_warmup_list_covers_it() -> None:
    ragged = ENCODER.replace("dims: [ -1 ] },", "dims: [ -1 ] allow_ragged_batch: true },", 1)
    with pytest.raises(ValueError, match="INPUT_IDS is ragged"):
        batcher_shapes(_config(ragged), variable_dims={"INPUT_IDS": [(8,)], "ATTENTION_MASK": [(8,)]})
