"""Real payloads and perf_analyzer input data built from the configs; Locust mix and shapes (no server)."""

from __future__ import annotations

import base64
import json
import struct
from pathlib import Path

import numpy as np
import pytest

import samples
from loadtest.load import payloads
from loadtest.load.perf_inputs import DATA, data_kind, serialise_bytes, write_input_data
from loadtest.load.profiles import Mix, shape_name, users_at
from tritonrepo.configs import INPUT_KINDS, parse_config

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "model_repository"


def test_image_variants_are_distinct_real_jpegs() -> None:
    variants = payloads.image_variants(12, seed=0)
    assert len(set(variants)) == 12
    assert all(v[:3] == b"\xff\xd8\xff" for v in variants)  # JPEG signature
    assert payloads.image_variants(3, seed=0) == variants[:3]  # deterministic


def test_sentences_come_from_the_corpus_in_a_shuffled_cycle() -> None:
    corpus = samples.sentences()
    assert len(corpus) > 20
    order = samples.shuffled_sentences(len(corpus) + 5, seed=1)
    assert set(order) <= set(corpus)
    assert sorted(order[: len(corpus)]) == sorted(corpus)


@pytest.mark.parametrize(
    ("model", "kind"),
    [
        ("l2_normalize", "random rows"),
        ("image_classifier", "images"),
        ("text_embedder", "sentences"),
        ("minilm_onnx", "tokens"),
        ("efficientnet_lite0_torchscript", "pixels"),
        ("diabetes_classifier_onnx", "described rows"),
    ],
)
def test_each_public_model_gets_the_real_data_its_inputs_call_for(model: str, kind: str) -> None:
    assert data_kind(model, parse_config(SOURCE / model / "config.pbtxt")) == kind


def test_every_kind_a_config_can_call_for_has_its_data() -> None:
    assert set(DATA) == set(INPUT_KINDS)


def test_bytes_are_written_in_tritons_length_prefixed_form() -> None:
    raw = base64.b64decode(serialise_bytes(b"hello")["b64"])
    assert raw == struct.pack("<I", 5) + b"hello"


def test_image_input_data_holds_encoded_photographs(tmp_path: Path) -> None:
    data = write_input_data("image_classifier", SOURCE, tmp_path / "in.json", entries=3)
    rows = json.loads(data.path.read_text())["data"]
    assert len(rows) == 3 and data.shape_args == []
    payload = base64.b64decode(rows[0]["IMAGE_BYTES"]["b64"])
    assert struct.unpack("<I", payload[:4])[0] == len(payload) - 4


def test_text_and_vector_input_data(tmp_path: Path) -> None:
    text = json.loads(
        write_input_data("text_embedder", SOURCE, tmp_path / "t.json", entries=4).path.read_text()
    )
    assert all(row["TEXT"][0] in samples.sentences() for row in text["data"])
    vectors = json.loads(
        write_input_data("l2_normalize", SOURCE, tmp_path / "v.json", entries=3).path.read_text()
    )
    values = np.frombuffer(base64.b64decode(vectors["data"][0]["VECTOR"]["b64"]), dtype=np.float32)
    assert values.shape == (16,) and np.isfinite(values).all()


def test_token_input_data_carries_each_sentence_at_its_own_length_for_the_ragged_encoder(
    tmp_path: Path,
) -> None:
    data = write_input_data("minilm_onnx", SOURCE, tmp_path / "tok.json", entries=5)
    rows = json.loads(data.path.read_text())["data"]
    shapes = [tuple(row["INPUT_IDS__0"]["shape"]) for row in rows]
    assert all(len(shape) == 1 for shape in shapes) and len(set(shapes)) > 10  # many lengths, one dim
    ids = np.frombuffer(base64.b64decode(rows[0]["INPUT_IDS__0"]["b64"]), dtype=np.int64)
    assert ids[0] == 101 and ids[-1] == 102 and len(ids) == shapes[0][0]  # [CLS] ... [SEP]
    assert data.shape_args == []  # perf_analyzer takes each entry's own shape


def test_the_mix_option_is_parsed_and_checked() -> None:
    assert Mix.parse("text:3,image:1").weights == {"text": 3, "image": 1}
    with pytest.raises(ValueError, match="--mix must look like"):
        Mix.parse("audio:1")
    with pytest.raises(ValueError, match="weight 0"):
        Mix.parse("text:0")


def test_a_shape_is_chosen_by_the_environment_variable() -> None:
    assert shape_name({}) is None
    assert shape_name({"LOADTEST_SHAPE": "Spike"}) == "spike"
    with pytest.raises(ValueError, match="must be one of steady, step, spike"):
        shape_name({"LOADTEST_SHAPE": "wave"})


def _users(shape: str, times_s: list[float]) -> list[int | None]:
    return [users_at(shape, elapsed_s=t, users=8, run_time_s=40, steps=4) for t in times_s]


def test_the_step_shape_ramps_in_equal_steps_and_ends_at_the_run_time() -> None:
    assert _users("step", [0, 11, 21, 31, 40]) == [2, 4, 6, 8, None]


def test_the_spike_shape_jumps_to_all_users_in_the_middle_fifth() -> None:
    assert _users("spike", [0, 17, 20, 25, 39, 41]) == [2, 8, 8, 2, 2, None]


def test_the_steady_shape_holds_its_users() -> None:
    assert _users("steady", [0, 39.9, 40]) == [8, 8, None]


def test_text_input_data_cycles_an_odd_count_of_at_least_the_whole_corpus(tmp_path: Path) -> None:
    rows = json.loads(
        write_input_data("text_embedder", SOURCE, tmp_path / "t.json", entries=16).path.read_text()
    )["data"]
    assert len(rows) >= len(samples.sentences()) and len(rows) % 2 == 1
    assert {row["TEXT"][0] for row in rows} == set(samples.sentences())
