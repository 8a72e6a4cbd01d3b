from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig
from warmup_checks import (
    BatchShape,
    batcher_shapes,
    largest_warmup_tokens,
    uncovered_shapes,
    warmup_problems,
    warmup_shapes,
)

from tritonrepo.configs import ModelEntry, load_repository
from tritonrepo.container_cpu import write_cpu_copy
from tritonrepo.derive import derive_local_config
from tritonrepo.writer import LINK, DerivedModel, write_model

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


# Ragged text encoders: the warm-up reads token ids from files (warmup_checks.py).
RAGGED_NATIVE = sorted(
    name
    for name, entry in MODELS.items()
    if entry.is_native and any(tensor.allow_ragged_batch for tensor in entry.config.input)
)
WARMED_UP = sorted(name for name, entry in MODELS.items() if entry.config.model_warmup)


def _vocabulary_bounds() -> dict[str, tuple[float, float]]:
    from export.text_warmup import shipped_tokenizer

    return {"INPUT_IDS__0": (0, shipped_tokenizer().get_vocab_size() - 1)}


def _tokenizer_max_length() -> int:
    return int(MODELS["text_tokenizer"].config.parameters["max_length"].string_value)


def test_the_repository_has_ragged_encoders_with_warmups() -> None:
    assert RAGGED_NATIVE == ["minilm_onnx", "minilm_torchscript"]
    assert set(RAGGED_NATIVE) <= set(WARMED_UP)


@pytest.mark.parametrize("name", WARMED_UP)
def test_every_warmup_sample_is_valid_for_its_model(name: str) -> None:
    entry = MODELS[name]
    bounds = _vocabulary_bounds() if name in RAGGED_NATIVE else None
    assert warmup_problems(entry.config, entry.path, input_bounds=bounds) == []


@pytest.mark.parametrize("name", RAGGED_NATIVE)
def test_ragged_encoder_warms_up_one_sentence_and_the_largest_batch_of_the_longest_text(name: str) -> None:
    config = MODELS[name].config
    ragged = next(tensor.name for tensor in config.input if tensor.allow_ragged_batch)
    assert min(sample.batch_size for sample in config.model_warmup) == 1
    assert largest_warmup_tokens(config, ragged) == (config.max_batch_size, _tokenizer_max_length())
    assert all(
        s.inputs[ragged].WhichOneof("input_data_type") == "input_data_file" for s in config.model_warmup
    )


def test_committed_warmup_token_files_are_what_the_tokenizer_emits_for_the_configs() -> None:
    from export.text_warmup import shipped_tokenizer, warmup_files

    expected = warmup_files(REPOSITORY, shipped_tokenizer())
    assert len(expected) == 2 * len(RAGGED_NATIVE)
    for path, data in expected.items():
        assert path.read_bytes() == data, f"{path} is stale: run `python -m export.text_warmup`"
        ids = np.frombuffer(data, dtype="<i8")
        assert (ids[0], ids[-1]) == (101, 102)  # [CLS] ... [SEP], as the tokenizer model sends a text


SAMPLE = """
name: "encoder"
platform: "onnxruntime_onnx"
max_batch_size: 4
input [ { name: "IDS" data_type: TYPE_INT64 dims: [ -1 ] allow_ragged_batch: true } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
model_warmup [ { name: "s" batch_size: 4
  inputs { key: "IDS" value: { data_type: TYPE_INT64 dims: [ 3 ] input_data_file: "ids.int64" } } } ]
"""


def _write_ids(folder: Path, ids: list[int]) -> None:
    (folder / "warmup").mkdir(exist_ok=True)
    np.array(ids, dtype="<i8").tofile(folder / "warmup" / "ids.int64")


def test_warmup_check_accepts_ids_in_bounds_and_reports_each_kind_of_fault(tmp_path: Path) -> None:
    config = _config(SAMPLE)
    _write_ids(tmp_path, [1, 2, 3])
    assert warmup_problems(config, tmp_path, input_bounds={"IDS": (0, 9)}) == []
    assert largest_warmup_tokens(config, "IDS") == (4, 3)
    _write_ids(tmp_path, [1, 2, 30522])
    assert warmup_problems(config, tmp_path, input_bounds={"IDS": (0, 9)}) == [
        "encoder warm-up 's': IDS values 1..30522 outside [0, 9]"
    ]
    _write_ids(tmp_path, [1, 2])
    assert "holds 2 values of int64, dims [3] need exactly 3" in warmup_problems(config, tmp_path)[0]
    (tmp_path / "warmup" / "ids.int64").unlink()
    assert "No such file" in warmup_problems(config, tmp_path)[0]


def test_warmup_check_refuses_random_ids_wrong_names_types_dims_and_batch(tmp_path: Path) -> None:
    _write_ids(tmp_path, [1, 2, 3])
    random = _config(SAMPLE.replace('input_data_file: "ids.int64"', "random_data: true"))
    assert "uses random_data" in warmup_problems(random, tmp_path, input_bounds={"IDS": (0, 9)})[0]
    renamed = _config(SAMPLE.replace('key: "IDS"', 'key: "TOKENS"'))
    assert "inputs ['TOKENS'], the model takes ['IDS']" in warmup_problems(renamed, tmp_path)[0]
    wrong = _config(
        SAMPLE.replace("TYPE_INT64 dims: [ 3 ]", "TYPE_INT32 dims: [ 3, 1 ]").replace(
            '"s" batch_size: 4', '"s" batch_size: 5'
        )
    )
    problems = " | ".join(warmup_problems(wrong, tmp_path))
    assert "batch_size 5 outside 1..4" in problems
    assert "IDS is TYPE_INT32, the model takes TYPE_INT64" in problems
    assert "IDS dims [3, 1] do not fit the model's [-1]" in problems


@pytest.mark.parametrize("name", RAGGED_NATIVE)
def test_local_cpu_repository_keeps_the_one_sentence_warmup_with_its_file_and_a_gpu_keeps_both(
    name: str, tmp_path: Path
) -> None:
    entry = MODELS[name]
    on_cpu = derive_local_config(entry, gpu_available=False, intra_op_threads=None)
    on_gpu = derive_local_config(entry, gpu_available=True, intra_op_threads=None)
    assert [sample.name for sample in on_cpu.model_warmup] == ["one_sentence"]
    assert list(on_gpu.model_warmup) == list(entry.config.model_warmup)
    write_model(DerivedModel(entry=entry, config=on_cpu), tmp_path / name, placement=LINK, made_by="a test")
    bounds = _vocabulary_bounds()
    assert warmup_problems(on_cpu, tmp_path / name, input_bounds=bounds) == []


def test_cpu_variant_for_the_container_carries_the_warmup_files(tmp_path: Path) -> None:
    write_cpu_copy(REPOSITORY, tmp_path / "cpu", cores=2)
    for name in RAGGED_NATIVE:
        variant = load_repository(tmp_path / "cpu")[name]
        assert [sample.batch_size for sample in variant.config.model_warmup] == [1]
        assert warmup_problems(variant.config, variant.path, input_bounds=_vocabulary_bounds()) == []
