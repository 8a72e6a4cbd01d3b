"""Bad input to every public model and ensemble, over HTTP and gRPC, against the shared server.

Every bad request gets a clear error: HTTP 400 / gRPC INVALID_ARGUMENT with a message naming the problem
(Triton's own checks: datatype, shape, missing input, batch size; our Python models' checks: image bytes,
UTF-8, sizes, values), or HTTP 404 / gRPC NOT_FOUND for an unknown model or version. Each bad request is
sent together with good requests to the same model, which still succeed, and the server stays ready with
every Python-backend stub alive. Tensor names, datatypes and shapes come from the server's metadata.
"""

from __future__ import annotations

import functools
import io
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import skimage
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from PIL import Image
from tritonclient.utils import InferenceServerException, triton_to_np_dtype

from tritonlocal import LocalTritonServer

IMAGES = Path(skimage.__file__).parent / "data"
PROTOCOLS = ["http", "grpc"]
# Public model -> what its good payload is. Everything about its tensors is read from the server.
FAMILIES = {
    "l2_normalize": "vector",
    "image_classifier": "image",
    "image_classifier_torchscript": "image",
    "image_preprocess": "image",
    "efficientnet_lite0_onnx": "tensor",
    "efficientnet_lite0_torchscript": "tensor",
    "image_postprocess": "logits",
    "text_embedder": "text",
    "text_embedder_torchscript": "text",
    "text_tokenizer": "text",
    "minilm_onnx": "tokens",
    "minilm_torchscript": "tokens",
}
GENERIC_CASES = {  # case -> words the error must contain (Triton's own checks, before any model code)
    "wrong_datatype": "data-type",
    "wrong_shape": "unexpected shape",
    "missing_input": "missing required input",
    "batch_over_max_batch_size": "batch-size must be <=",
}
SPECIFIC_CASES = {  # family -> case -> words the error must contain (our models' checks)
    "image": {
        "empty_bytes": "empty input (0 bytes)",
        "truncated_png": "cannot decode image",
        "corrupt_bytes": "cannot decode image",
        "huge_bytes": "image too large",
        "decompression_bomb": "image too large",
    },
    "text": {"not_utf8": "not valid UTF-8", "over_byte_limit": "over the limit of 65536"},
    "vector": {"nan_value": "must be finite", "all_zero_row": "all zeros"},
    "tensor": {},
    "logits": {"nan_value": "must be finite"},
    "tokens": {"token_out_of_range": "outside [0, 30521]"},
}
SEQUENCE_TOKENS = 8  # concrete length for variable (-1) dims
GOOD_PER_BAD = 3


@dataclass(frozen=True)
class Tensor:
    name: str
    datatype: str
    dims: tuple[int, ...]  # without the batch dimension


@dataclass(frozen=True)
class Model:
    name: str
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    max_batch_size: int


def _tensors(entries: list[dict]) -> tuple[Tensor, ...]:
    return tuple(Tensor(e["name"], e["datatype"], tuple(int(d) for d in e["shape"][1:])) for e in entries)


@pytest.fixture(scope="module")
def models(triton_server: LocalTritonServer) -> dict[str, Model]:
    client = httpclient.InferenceServerClient(triton_server.http_url)
    found = {}
    for name in FAMILIES:
        metadata = client.get_model_metadata(name)
        config = client.get_model_config(name, headers=triton_server.admin_headers)
        found[name] = Model(
            name, _tensors(metadata["inputs"]), _tensors(metadata["outputs"]), config["max_batch_size"]
        )
    return found


# -- payloads ---------------------------------------------------------------------------------------
@functools.cache
def _bomb_png() -> bytes:
    """A 109 KB PNG that declares 30000 x 30000 pixels (900 MP; 2.7 GB once decoded to RGB)."""
    buffer = io.BytesIO()
    Image.new("1", (30000, 30000)).save(buffer, "PNG")
    return buffer.getvalue()


def _good_array(model: Model, tensor: Tensor, rows: int) -> np.ndarray:
    family = FAMILIES[model.name]
    shape = (rows, *(SEQUENCE_TOKENS if d == -1 else d for d in tensor.dims))
    if tensor.datatype == "BYTES":
        item = (IMAGES / "coffee.png").read_bytes() if family == "image" else b"A cat sits on the mat."
        return np.full(shape, item, dtype=object)
    dtype = triton_to_np_dtype(tensor.datatype)
    if np.issubdtype(dtype, np.integer):  # token ids: id 1 ([unused0]), inside the vocabulary
        return np.ones(shape, dtype=dtype)
    return np.random.default_rng(rows).normal(size=shape).astype(dtype)


def _good(model: Model, rows: int = 1) -> dict[str, np.ndarray]:
    return {t.name: _good_array(model, t, rows) for t in model.inputs}


def _specific(model: Model, case: str) -> dict[str, np.ndarray]:
    arrays = _good(model)
    first = model.inputs[0].name
    payloads: dict[str, Callable[[], bytes]] = {
        "empty_bytes": lambda: b"",
        "truncated_png": lambda: (IMAGES / "chelsea.png").read_bytes()[:5000],
        "corrupt_bytes": lambda: b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8,
        "huge_bytes": lambda: b"\xff\xd8\xff" + bytes(16 * 1024 * 1024),  # 3 bytes over the 16 MiB limit
        "decompression_bomb": _bomb_png,
        "not_utf8": lambda: b"caf\xe9 \xff\xfe",
        "over_byte_limit": lambda: b"word " * (70 * 1024 // 5),
    }
    if case in payloads:
        arrays[first] = np.array([[payloads[case]()]], dtype=object)
    elif case == "nan_value":
        arrays[first][0, 3] = np.nan
    elif case == "all_zero_row":
        arrays[first][:] = 0
    elif case == "token_out_of_range":
        arrays[first][:] = 40000
    else:
        raise AssertionError(f"unknown case {case}")
    return arrays


def _generic(model: Model, case: str) -> list[tuple[str, str, np.ndarray]]:
    """(name, datatype, array) triples: the request as sent, with exactly one thing wrong."""
    arrays = _good(model, rows=model.max_batch_size + 1 if case == "batch_over_max_batch_size" else 1)
    sent = [(t.name, t.datatype, arrays[t.name]) for t in model.inputs]
    name, datatype, array = sent[0]
    if case == "wrong_datatype":
        wrong = "INT32" if datatype == "FP32" else "FP32"
        sent[0] = (name, wrong, np.zeros(array.shape, dtype=triton_to_np_dtype(wrong)))
    elif case == "wrong_shape":
        sent[0] = (name, datatype, np.repeat(array[..., None], 2, axis=-1))
    elif case == "missing_input":
        sent = sent[1:]
    return sent


# -- sending ----------------------------------------------------------------------------------------
def _send(server: LocalTritonServer, protocol: str, model: str, tensors: list, version: str = "") -> Any:
    module: Any = httpclient if protocol == "http" else grpcclient
    url = server.http_url if protocol == "http" else server.grpc_url
    client = module.InferenceServerClient(url)
    inputs = []
    for name, datatype, array in tensors:
        tensor = module.InferInput(name, list(array.shape), datatype)
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    try:
        return client.infer(model, inputs, model_version=version)
    except InferenceServerException as e:
        return e
    finally:
        client.close()


def _as_triples(model: Model, arrays: dict[str, np.ndarray]) -> list[tuple[str, str, np.ndarray]]:
    return [(t.name, t.datatype, arrays[t.name]) for t in model.inputs]


def _check_output(model: Model, result: Any, rows: int) -> None:
    assert not isinstance(result, InferenceServerException), f"{model.name}: {result}"
    for tensor in model.outputs:
        array = result.as_numpy(tensor.name)
        assert array.shape[0] == rows and len(array.shape) == len(tensor.dims) + 1, (tensor, array.shape)
        assert all(d == -1 or d == s for d, s in zip(tensor.dims, array.shape[1:], strict=True))
        assert array.dtype == triton_to_np_dtype(tensor.datatype) or tensor.datatype == "BYTES"


def _bad_with_good(
    server: LocalTritonServer, protocol: str, model: Model, bad: list
) -> tuple[Any, list[Any]]:
    """Send one bad request and GOOD_PER_BAD good ones to the same model at the same moment."""
    good = _as_triples(model, _good(model))
    with ThreadPoolExecutor(GOOD_PER_BAD + 1) as pool:
        bad_future = pool.submit(_send, server, protocol, model.name, bad)
        good_futures = [pool.submit(_send, server, protocol, model.name, good) for _ in range(GOOD_PER_BAD)]
        return bad_future.result(), [f.result() for f in good_futures]


def _assert_invalid_argument(error: Any, protocol: str, words: str) -> None:
    assert isinstance(error, InferenceServerException), f"expected an error naming {words!r}, got success"
    expected = "400" if protocol == "http" else "StatusCode.INVALID_ARGUMENT"
    assert (error.status(), words in error.message()) == (expected, True), (error.status(), error.message())


def _assert_still_serving(server: LocalTritonServer) -> None:
    assert server.is_ready()
    health = server.check_models()
    assert health.healthy, health.describe()


# -- the matrix -------------------------------------------------------------------------------------
@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("case", sorted(GENERIC_CASES))
@pytest.mark.parametrize("model_name", sorted(FAMILIES))
def test_triton_rejects_a_malformed_request_with_invalid_argument_while_good_requests_succeed(
    triton_server: LocalTritonServer, models: dict[str, Model], model_name: str, case: str, protocol: str
) -> None:
    model = models[model_name]
    error, good = _bad_with_good(triton_server, protocol, model, _generic(model, case))
    _assert_invalid_argument(error, protocol, GENERIC_CASES[case])
    for result in good:
        _check_output(model, result, rows=1)
    _assert_still_serving(triton_server)


SPECIFIC = [(m, c) for m, family in sorted(FAMILIES.items()) for c in sorted(SPECIFIC_CASES[family])]


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize(("model_name", "case"), SPECIFIC)
def test_a_model_refuses_bad_content_with_invalid_argument_naming_input_and_problem(
    triton_server: LocalTritonServer, models: dict[str, Model], model_name: str, case: str, protocol: str
) -> None:
    model = models[model_name]
    bad = _as_triples(model, _specific(model, case))
    error, good = _bad_with_good(triton_server, protocol, model, bad)
    _assert_invalid_argument(error, protocol, SPECIFIC_CASES[FAMILIES[model_name]][case])
    assert any(f"{t.name}: " in error.message() for t in model.inputs), error.message()
    for result in good:
        _check_output(model, result, rows=1)
    _assert_still_serving(triton_server)


TOKEN_LIMIT = 256  # the tokenizer's max_length, [CLS] and [SEP] included
SENTENCE = b"The quick brown fox jumps over the lazy dog. "  # 10 tokens


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("model_name", [m for m, f in sorted(FAMILIES.items()) if f == "text"])
def test_text_far_over_the_token_limit_is_truncated_and_succeeds(
    triton_server: LocalTritonServer, models: dict[str, Model], model_name: str, protocol: str
) -> None:
    model = models[model_name]

    def send(text: bytes) -> Any:
        result = _send(
            triton_server, protocol, model_name, [(model.inputs[0].name, "BYTES", np.array([[text]], object))]
        )
        _check_output(model, result, rows=1)
        return result

    answer = send(SENTENCE * 300)  # 3,002 tokens, 13.5 KB
    tokens = [t.name for t in model.outputs if t.datatype == "INT64"]
    if tokens:  # the tokenizer: every token output is cut at the limit
        assert {answer.as_numpy(name).shape[-1] for name in tokens} == {TOKEN_LIMIT}
        return
    # An embedder: the long text embeds as its first TOKEN_LIMIT tokens do. 26 sentences (262 tokens) are
    # cut at the same place; 25 (252 tokens) are not cut, so they embed otherwise.
    (output,) = [t.name for t in model.outputs if t.datatype == "FP32"]
    long, cut, whole = (x.as_numpy(output) for x in (answer, send(SENTENCE * 26), send(SENTENCE * 25)))
    np.testing.assert_allclose(long, cut, rtol=0, atol=1e-5)
    assert np.abs(long - whole).max() > 1e-4, "the text was not cut at the token limit"


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("version", ["", "7"])
def test_an_unknown_model_or_version_is_not_found(
    triton_server: LocalTritonServer, models: dict[str, Model], protocol: str, version: str
) -> None:
    model = models["l2_normalize"]
    name = "no_such_model" if not version else model.name
    error = _send(triton_server, protocol, name, _as_triples(model, _good(model)), version=version)
    assert isinstance(error, InferenceServerException)
    expected = "404" if protocol == "http" else "StatusCode.NOT_FOUND"
    assert error.status() == expected and "unknown model" in error.message(), error
    _assert_still_serving(triton_server)
