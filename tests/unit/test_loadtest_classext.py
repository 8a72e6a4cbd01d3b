"""The `classext` experiment's logic without a server: the classification route it adds to a repository,
the classification strings it reads, the binary requests the simplest image server parses, and the
summary's medians, ranges and round-by-round ratios."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tritonclient.http import InferenceServerClient, InferInput

from loadtest.baselines.minimal_server import request_images
from loadtest.experiments import classext
from loadtest.experiments.classext_report import markdown, summarise
from tritonrepo.configs import load_model_config, load_repository
from tritonrepo.paths import REPOSITORY
from tritonrepo.writer import LINK, write_repository


def test_classification_route_is_the_ensemble_without_its_python_top_k_step(tmp_path: Path) -> None:
    served = classext.classification_models(load_repository(REPOSITORY), threads=2)
    write_repository(REPOSITORY, tmp_path, served, placement=LINK, made_by="the classext test")
    classifier = load_model_config(tmp_path / classext.IMAGE_ENCODER)
    route = load_model_config(tmp_path / classext.CLASSIFICATION_MODEL)
    assert classifier.output[0].label_filename == "imagenet_labels.txt"
    assert [s.model_name for s in route.ensemble_scheduling.step] == [
        "image_preprocess",
        classext.IMAGE_ENCODER,
    ]
    assert dict(route.ensemble_scheduling.step[1].output_map) == {classifier.output[0].name: "LOGITS"}
    assert [(o.name, list(o.dims), o.label_filename) for o in route.output] == [
        ("LOGITS", [1000], "imagenet_labels.txt")
    ]
    for model in (classext.IMAGE_ENCODER, classext.CLASSIFICATION_MODEL):
        labels = (tmp_path / model / "imagenet_labels.txt").read_text().splitlines()
        assert len(labels) == 1000 and labels[282] == "tiger cat"
    assert (tmp_path / classext.CLASSIFICATION_MODEL / "1").is_dir()
    assert {classext.IMAGE_MODEL, "image_postprocess"} <= {p.name for p in tmp_path.iterdir()}  # arm A


def test_classification_strings_parse_with_colons_in_the_label() -> None:
    assert classext.parse_classification(b"9.23:282:tiger cat") == (9.23, 282, "tiger cat")
    assert classext.parse_classification("-1.5:7:a: b") == (-1.5, 7, "a: b")
    assert classext.parse_classification("0.5:3") == (0.5, 3, "")
    with pytest.raises(ValueError, match="score:index"):
        classext.parse_classification("tiger cat")


def test_simplest_server_reads_the_images_tritonclient_sends() -> None:
    images = [b"\xff\xd8first", b"", b"third image"]
    tensor = InferInput("IMAGE_BYTES", [3, 1], "BYTES")
    tensor.set_data_from_numpy(np.array([[i] for i in images], dtype=object))
    body, json_size = InferenceServerClient.generate_request_body([tensor])
    assert request_images(body, {"inference-header-content-length": str(json_size)}) == images
    with pytest.raises(ValueError, match="do not hold the 3 images"):
        request_images(body[:-2], {"inference-header-content-length": str(json_size)})
    with pytest.raises(ValueError, match="binary data"):
        request_images(body, {})


def _run(label: str, round_: int, images_per_s: float, *, in_flight: int = 32, top1: int = 1) -> dict:
    latencies = [10.0] * 99 + [50.0 + round_]
    return {
        "label": label,
        "in_flight": in_flight,
        "round": round_,
        "images_per_s": images_per_s,
        "latencies_ms": latencies,
        "failures": 0,
        "top1": [top1, 2, -1],
    }


def test_summary_takes_ratios_round_by_round_and_drops_incomplete_rounds() -> None:
    records = [_run("A", -1, 1.0), _run("B", -1, 1.0)]  # warm-up: left out
    records += [_run("A", 0, 100.0), _run("B", 0, 120.0, top1=5), _run("A", 1, 50.0), _run("B", 1, 55.0)]
    records += [_run("A", 2, 80.0)]  # B never ran round 2
    a, b = summarise(records)
    assert (a.rounds, b.rounds) == (2, 2)
    assert (b.images_per_s.median, b.images_per_s.low, b.images_per_s.high) == (87.5, 55.0, 120.0)
    assert (b.vs_first.low, b.vs_first.high) == pytest.approx((1.1, 1.2))
    assert (a.vs_last.low, a.vs_last.high) == pytest.approx((100 / 120, 50 / 55))
    # 3 of the 4 answered requests agree; the failed ones (-1) are not compared
    assert a.top1_agreement == 1.0 and b.top1_agreement == 0.75
    assert b.p99_ms.low < b.p99_ms.high
    report = markdown(records, command="python -m loadtest.experiments.classext --output x")
    assert "| B | 2 | 87.5 (55.0-120.0) |" in report and "1.15x (1.10-1.20)" in report


def test_summary_without_a_complete_round_names_the_arms() -> None:
    with pytest.raises(ValueError, match="A, B"):
        summarise([_run("A", 0, 10.0), _run("B", 1, 10.0)])
