"""Clone configs are derived from model_repository's configs by code: batching off, instance counts."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
from pathlib import Path

import pytest

from tritonrepo.clones import Clone, build_repository, clone_config
from tritonrepo.configs import closure, load_repository, parse_config
from tritonrepo.derive import derive_local_config
from tritonrepo.files import EXPORT_OUTPUTS

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "model_repository"


@pytest.fixture(scope="module")
def models() -> dict:
    return load_repository(SOURCE)


def test_the_batching_off_variant_has_no_dynamic_batching_and_nothing_else_changes(models: dict) -> None:
    entry = models["minilm_onnx"]
    clone = Clone(model="text_embedder", suffix="__nobatch", batching=False)
    config = clone_config(entry, clone, total_threads=2)
    assert entry.config.HasField("dynamic_batching")
    assert not config.HasField("dynamic_batching")
    assert config.name == "minilm_onnx__nobatch"
    assert config.max_batch_size == entry.config.max_batch_size
    assert [i.name for i in config.input] == [i.name for i in entry.config.input]


def test_an_instance_variant_divides_the_threads_between_instances(models: dict) -> None:
    config = clone_config(
        models["minilm_onnx"], Clone(model="text_embedder", suffix="__x2", instances=2), total_threads=4
    )
    assert [g.count for g in config.instance_group] == [2]
    assert config.parameters["intra_op_threads"].string_value == "2"
    assert config.HasField("dynamic_batching")


def test_python_steps_keep_their_own_instances_in_an_instance_variant(models: dict) -> None:
    own = [g.count for g in models["text_tokenizer"].config.instance_group]
    config = clone_config(
        models["text_tokenizer"], Clone(model="text_embedder", suffix="__x4", instances=4), total_threads=2
    )
    assert [g.count for g in config.instance_group] == own != [4]


def test_a_one_instance_variant_drops_the_bounded_queue_it_would_stall_behind(models: dict) -> None:
    one = Clone(model="text_embedder", suffix="__x1", instances=1)
    assert models["minilm_onnx"].config.dynamic_batching.HasField("default_queue_policy")
    config = clone_config(models["minilm_onnx"], one, total_threads=2)
    assert [g.count for g in config.instance_group] == [1]
    assert not config.dynamic_batching.HasField("default_queue_policy")
    two = clone_config(models["minilm_onnx"], dataclasses.replace(one, instances=2), total_threads=2)
    assert two.dynamic_batching.HasField("default_queue_policy")


def test_an_ensemble_clone_calls_the_cloned_steps(models: dict) -> None:
    config = clone_config(
        models["text_embedder"],
        Clone(model="text_embedder", suffix="__nobatch", batching=False),
        total_threads=2,
    )
    assert [s.model_name for s in config.ensemble_scheduling.step] == [
        "text_tokenizer__nobatch",
        "minilm_onnx__nobatch",
    ]


def test_the_closure_of_an_ensemble_holds_its_steps(models: dict) -> None:
    assert closure(models, "image_classifier") == [
        "image_classifier",
        "image_preprocess",
        "efficientnet_lite0_onnx",
        "image_postprocess",
    ]
    with pytest.raises(ValueError, match="not in the repository"):
        closure(models, "missing_model")


def test_a_built_repository_serves_originals_and_clones_side_by_side(tmp_path: Path) -> None:
    clones = [
        Clone(model="text_embedder"),
        Clone(model="text_embedder", suffix="__nobatch", batching=False),
    ]
    hashes = build_repository(SOURCE, tmp_path / "repo", clones, total_threads=2)
    assert set(hashes) == {
        "text_embedder",
        "text_tokenizer",
        "minilm_onnx",
        "text_embedder__nobatch",
        "text_tokenizer__nobatch",
        "minilm_onnx__nobatch",
    }
    clone = parse_config(tmp_path / "repo" / "minilm_onnx__nobatch" / "config.pbtxt")
    original = parse_config(tmp_path / "repo" / "minilm_onnx" / "config.pbtxt")
    assert clone.backend == "python" and not clone.HasField("dynamic_batching")
    assert original.HasField("dynamic_batching")
    assert (tmp_path / "repo" / "minilm_onnx__nobatch" / "1" / "model.py").is_file()
    assert hashes["minilm_onnx"] != hashes["minilm_onnx__nobatch"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"suffix": "nobatch", "batching": False}, "must start with '__'"),
        ({"batching": False}, "needs a suffix"),
        ({"suffix": "__x0", "instances": 0}, "at least 1"),
        ({"parameters": (("text_tokenizer", "length_buckets", "256"),)}, "needs a suffix"),
        ({"suffix": "__p", "parameters": (("text_tokenizer", "length_buckets"),)}, r"\(model, key, value\)"),
        ({"suffix": "__p", "parameters": (("", "length_buckets", "256"),)}, r"\(model, key, value\)"),
        (
            {"suffix": "__p", "parameters": (("text_tokenizer", "length_buckets", "8,256"),) * 2},
            "overridden twice",
        ),
    ],
)
def test_invalid_variants_are_refused(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Clone(model="text_embedder", **kwargs)


@pytest.mark.parametrize("model", ["minilm_onnx", "efficientnet_lite0_onnx"])
def test_a_clone_that_keeps_the_instances_keeps_the_models_own_thread_layout(
    models: dict, model: str
) -> None:
    """The benchmark's clones measure what the local server serves, CPU overlay included; only a clone
    that changes the instance count divides the threads anew."""
    ensemble = "text_embedder" if model == "minilm_onnx" else "image_classifier"
    served = derive_local_config(models[model], gpu_available=False, intra_op_threads=None)
    config = clone_config(models[model], Clone(model=ensemble), total_threads=4)
    assert dict(config.parameters) == dict(served.parameters)
    assert list(config.instance_group) == list(served.instance_group)
    four = clone_config(models[model], Clone(model=ensemble, suffix="__x4", instances=4), total_threads=4)
    assert four.parameters["intra_op_threads"].string_value == "1"


UNOPTIMISED = Clone(
    model="text_embedder",
    suffix="__unoptimised",
    ragged=False,
    parameters=(("text_tokenizer", "length_buckets", "8,16,32,64,128,256"),),
)


def test_a_parameter_override_changes_that_parameter_of_that_model_only(models: dict) -> None:
    tokenizer = clone_config(models["text_tokenizer"], UNOPTIMISED, total_threads=2)
    original = models["text_tokenizer"].config.parameters
    assert tokenizer.parameters["length_buckets"].string_value == "8,16,32,64,128,256"
    assert {k: v.string_value for k, v in tokenizer.parameters.items() if k != "length_buckets"} == {
        k: v.string_value for k, v in original.items() if k != "length_buckets"
    }
    assert tokenizer.HasField("dynamic_batching") and tokenizer.name == "text_tokenizer__unoptimised"
    encoder = clone_config(models["minilm_onnx"], UNOPTIMISED, total_threads=2)
    plain = clone_config(models["minilm_onnx"], Clone(model="text_embedder"), total_threads=2)
    assert dict(encoder.parameters) == dict(plain.parameters)


def test_the_ragged_off_variant_makes_the_batcher_merge_equal_shapes_only(models: dict) -> None:
    encoder = clone_config(models["minilm_onnx"], UNOPTIMISED, total_threads=2)
    assert models["minilm_onnx"].config.input[0].allow_ragged_batch
    assert not any(tensor.allow_ragged_batch for tensor in encoder.input)
    assert list(encoder.batch_input) == list(models["minilm_onnx"].config.batch_input)  # same graph inputs
    assert "ragged batching off" in UNOPTIMISED.describe()


def test_an_override_of_a_parameter_the_model_does_not_have_is_refused(models: dict) -> None:
    clone = Clone(model="text_embedder", suffix="__typo", parameters=(("text_tokenizer", "bucket", "8"),))
    with pytest.raises(ValueError, match="has no parameter 'bucket'.*length_buckets"):
        clone_config(models["text_tokenizer"], clone, total_threads=2)


def test_an_override_of_a_model_outside_the_clone_is_refused(tmp_path: Path) -> None:
    clone = Clone(model="text_embedder", suffix="__bad", parameters=(("image_preprocess", "x", "1"),))
    with pytest.raises(ValueError, match="image_preprocess, which text_embedder does not call"):
        build_repository(SOURCE, tmp_path / "repo", [clone], total_threads=2)


def test_a_built_clone_writes_the_override_into_its_tokenizer(tmp_path: Path) -> None:
    hashes = build_repository(
        SOURCE, tmp_path / "repo", [Clone(model="text_embedder"), UNOPTIMISED], total_threads=2
    )
    clone = parse_config(tmp_path / "repo" / "text_tokenizer__unoptimised" / "config.pbtxt")
    original = parse_config(tmp_path / "repo" / "text_tokenizer" / "config.pbtxt")
    assert clone.parameters["length_buckets"].string_value == "8,16,32,64,128,256"
    assert original.parameters["length_buckets"].string_value == ""
    assert hashes["text_tokenizer"] != hashes["text_tokenizer__unoptimised"]
    assert (
        "text_tokenizer.length_buckets = 8,16"
        in (tmp_path / "repo" / "text_tokenizer__unoptimised" / "config.pbtxt").read_text()
    )


def test_a_batcher_override_replaces_the_fields_it_names_and_keeps_the_queue_policy(models: dict) -> None:
    clone = Clone(
        model="image_classifier",
        suffix="__slow",
        batcher=(
            ("efficientnet_lite0_onnx", "preferred_batch_size: [16, 32] max_queue_delay_microseconds: 2000"),
            ("image_preprocess", "max_queue_delay_microseconds: 1000"),
        ),
    )
    encoder = clone_config(models["efficientnet_lite0_onnx"], clone, total_threads=2)
    plain = clone_config(models["efficientnet_lite0_onnx"], Clone(model="image_classifier"), total_threads=2)
    assert list(encoder.dynamic_batching.preferred_batch_size) == [16, 32]
    assert encoder.dynamic_batching.max_queue_delay_microseconds == 2000
    assert encoder.dynamic_batching.default_queue_policy == plain.dynamic_batching.default_queue_policy
    preprocess = clone_config(models["image_preprocess"], clone, total_threads=2)
    original = models["image_preprocess"].config.dynamic_batching
    assert preprocess.dynamic_batching.max_queue_delay_microseconds == 1000
    assert list(preprocess.dynamic_batching.preferred_batch_size) == list(original.preferred_batch_size)
    postprocess = clone_config(models["image_postprocess"], clone, total_threads=2)
    assert postprocess.dynamic_batching == models["image_postprocess"].config.dynamic_batching
    assert "image_preprocess batcher: max_queue_delay_microseconds: 1000" in clone.describe()


@pytest.mark.parametrize(
    ("batcher", "message"),
    [
        ((("image_preprocess", "max_queue_delay: 1000"),), "not dynamic_batching fields"),
        ((("image_preprocess", "max_queue_delay_microseconds: 1"),) * 2, "overridden twice"),
        ((("image_preprocess", "preferred_batch_size: [4]"),), "must name max_queue_delay_microseconds"),
    ],
)
def test_invalid_batcher_overrides_are_refused(batcher: tuple, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Clone(model="image_classifier", suffix="__b", batcher=batcher)


def test_a_batcher_override_of_a_model_outside_the_clone_is_refused(tmp_path: Path) -> None:
    clone = Clone(
        model="text_embedder",
        suffix="__bad",
        batcher=(("image_preprocess", "max_queue_delay_microseconds: 1"),),
    )
    with pytest.raises(ValueError, match="image_preprocess, which text_embedder does not call"):
        build_repository(SOURCE, tmp_path / "repo", [clone], total_threads=2)


@pytest.fixture
def small_source(tmp_path: Path) -> Path:
    """The text pipeline's folders of model_repository/ (configs, warm-up data, the helpers linked beside
    the tokenizer as in the real repository), with a small stand-in for the encoder's exported file and
    its manifest: these tests are about which files go where, not about running them."""
    source = tmp_path / "source"
    for name in ("text_embedder", "text_tokenizer", "minilm_onnx"):
        ignore = shutil.ignore_patterns(*EXPORT_OUTPUTS)
        shutil.copytree(SOURCE / name, source / name, symlinks=True, ignore=ignore)
    for helper in SOURCE.glob("pybackend_*.py"):
        shutil.copyfile(helper, source / helper.name)
    (source / "minilm_onnx" / "1" / "model.onnx").write_bytes(b"the served file")
    manifest = {"artifact": "model.onnx", "artifact_sha256": "served", "gated_on": {"device": "cuda"}}
    (source / "minilm_onnx" / "1" / ".export.json").write_text(json.dumps(manifest))
    return source


NATIVE_VARIANTS = [
    Clone(model="text_embedder"),
    Clone(model="text_embedder", suffix="__nobatch", batching=False),
    Clone(model="text_embedder", suffix="__x1", instances=1),
]


def test_a_native_repository_keeps_each_models_own_config_with_only_the_variants_change(
    small_source: Path, tmp_path: Path
) -> None:
    target = tmp_path / "bench"
    build_repository(small_source, target, NATIVE_VARIANTS, total_threads=2, derive=False)
    original = parse_config(small_source / "minilm_onnx" / "config.pbtxt")
    nobatch = parse_config(target / "minilm_onnx__nobatch" / "config.pbtxt")
    assert nobatch.platform == original.platform == "onnxruntime_onnx" and nobatch.backend == ""
    assert not nobatch.HasField("dynamic_batching") and original.HasField("dynamic_batching")
    assert "runtime" not in nobatch.parameters, "not the derived Python-backend runner"
    assert list(nobatch.instance_group) == list(original.instance_group)  # KIND_GPU, count 2
    assert list(nobatch.model_warmup) == list(original.model_warmup), "every warm-up batch kept"
    single = parse_config(target / "minilm_onnx__x1" / "config.pbtxt")
    assert [(g.kind, g.count) for g in single.instance_group] == [(original.instance_group[0].kind, 1)]
    without_queue = type(original.dynamic_batching)()
    without_queue.CopyFrom(original.dynamic_batching)
    without_queue.ClearField("default_queue_policy")  # one instance cannot serve a bounded queue unstalled
    assert single.dynamic_batching == without_queue
    unchanged = parse_config(target / "minilm_onnx" / "config.pbtxt")
    unchanged.name = original.name
    assert unchanged == original
    ensemble = parse_config(target / "text_embedder__nobatch" / "config.pbtxt")
    steps = [s.model_name for s in ensemble.ensemble_scheduling.step]
    assert steps == ["text_tokenizer__nobatch", "minilm_onnx__nobatch"]
    tokenizer = parse_config(target / "text_tokenizer__x1" / "config.pbtxt")  # not an exported model:
    tokenizer.name = "text_tokenizer"  # its instances stay as they are
    assert tokenizer == parse_config(small_source / "text_tokenizer" / "config.pbtxt")


def test_a_native_repository_copies_its_files_for_a_container_of_its_own(
    small_source: Path, tmp_path: Path
) -> None:
    target = tmp_path / "bench"
    build_repository(small_source, target, NATIVE_VARIANTS, total_threads=2, derive=False)
    links = [p for p in target.rglob("*") if p.is_symlink()]
    assert not links, f"a container mounting only {target.name} would find these dangling: {links}"
    helper = target / "text_tokenizer__nobatch" / "1" / "pybackend_batching.py"
    assert (small_source / "text_tokenizer" / "1" / "pybackend_batching.py").is_symlink()
    assert helper.read_text() == (small_source / "pybackend_batching.py").read_text()
    for clone in ("minilm_onnx", "minilm_onnx__nobatch", "minilm_onnx__x1"):
        assert (target / clone / "1" / "model.onnx").read_bytes() == b"the served file"
        assert (target / clone / "1" / ".export.json").is_file(), "the start-up check reads it"
        assert (target / clone / "warmup" / "tokens_256.int64").is_file()
        assert not (target / clone / "local_cpu.pbtxt").exists(), "the local CPU settings stay local"
    served = (small_source / "minilm_onnx" / "1" / "model.onnx").stat()
    assert (target / "minilm_onnx__x1" / "1" / "model.onnx").stat().st_ino == served.st_ino, (
        "linked, not copied"
    )
    assert not (target / "minilm_onnx" / "config.pbtxt").samefile(
        small_source / "minilm_onnx" / "config.pbtxt"
    )


def test_a_native_fp32_clone_serves_the_kept_file_under_the_configs_file_name(
    small_source: Path, tmp_path: Path
) -> None:
    kept = tmp_path / "precision" / "minilm_onnx" / "onnx-fp32.onnx"
    kept.parent.mkdir(parents=True)
    kept.write_bytes(b"the kept fp32 file")
    fp32 = Clone(
        model="text_embedder", suffix="__fp32", parameters=(("minilm_onnx", "model_filename", str(kept)),)
    )
    target = tmp_path / "bench"
    build_repository(
        small_source, target, [Clone(model="text_embedder"), fp32], total_threads=2, derive=False
    )
    assert (target / "minilm_onnx__fp32" / "1" / "model.onnx").read_bytes() == b"the kept fp32 file"
    assert (target / "minilm_onnx" / "1" / "model.onnx").read_bytes() == b"the served file"
    config = parse_config(target / "minilm_onnx__fp32" / "config.pbtxt")
    assert "model_filename" not in config.parameters and config.default_model_filename == "model.onnx"
    manifest = json.loads((target / "minilm_onnx__fp32" / "1" / ".export.json").read_text())
    assert manifest["artifact"] == "model.onnx" and manifest["gated_on"] == {"device": "cuda"}
    assert manifest["artifact_sha256"] == hashlib.sha256(b"the kept fp32 file").hexdigest()
    assert manifest["copied_from"] == "onnx-fp32.onnx"
    source_manifest = json.loads((small_source / "minilm_onnx" / "1" / ".export.json").read_text())
    assert "copied_from" not in source_manifest, "the source's manifest is left as it was"
    assert (small_source / "minilm_onnx" / "1" / "model.onnx").read_bytes() == b"the served file"
    derived = tmp_path / "derived"  # the local flavour of the same clone: the runner reads the parameter
    build_repository(small_source, derived, [fp32], total_threads=2)
    runner = parse_config(derived / "minilm_onnx__fp32" / "config.pbtxt")
    assert runner.backend == "python" and runner.parameters["model_filename"].string_value == str(kept)


def test_a_repository_is_never_written_over_its_source(small_source: Path) -> None:
    with pytest.raises(ValueError, match="is the source repository"):
        build_repository(small_source, small_source, NATIVE_VARIANTS, total_threads=2, derive=False)
