"""Any torch.nn.Module, served: the tabular classifier of examples/tabular (trained on scikit-learn's
diabetes data set) as its description exports it, ONNX and TorchScript, with dynamic batching and no
pre- or post-processing model, against the real local tritonserver.

Its served logits equal eager PyTorch's on every real row, in requests of several sizes, eight in flight;
a request of the wrong width or datatype gets a 400 naming the input while requests sent with it
succeed; a sex id outside the embedding table is refused alone in an execution it shares with good rows.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

from clients import TritonClient
from description.model import load_description
from export.torch_module.kind import check_batches, load_model
from tritonlocal import LocalTritonServer
from tritonrepo.paths import REPOSITORY

ROOT = Path(__file__).resolve().parents[2]
DESCRIPTION = ROOT / "model_descriptions" / "diabetes_classifier.yaml"
MODELS = ("diabetes_classifier_onnx", "diabetes_classifier_torchscript")
REQUEST_ROWS = (1, 2, 5, 9)  # the rows of successive requests, cycled over the data set
HELD = 5  # requests the held batcher waits for
IN_FLIGHT = 8


@pytest.fixture(scope="module")
def patients() -> dict[str, np.ndarray]:
    """Every real row (features, sex) and eager PyTorch's logits for it."""
    description = load_description(DESCRIPTION)
    model = load_model(description)
    batches = check_batches(description, REPOSITORY)
    features = np.concatenate([batch[0] for batch in batches])
    sex = np.concatenate([batch[1] for batch in batches])
    with torch.no_grad():
        logits = model(torch.from_numpy(features), torch.from_numpy(sex)).numpy()
    return {"FEATURES": features, "SEX": sex, "LOGITS": logits}


def _requests(patients: dict[str, np.ndarray]) -> list[dict[str, np.ndarray]]:
    payloads, start, index = [], 0, 0
    while start < len(patients["SEX"]):
        stop = start + REQUEST_ROWS[index % len(REQUEST_ROWS)]
        payloads.append({name: patients[name][start:stop] for name in ("FEATURES", "SEX")})
        start, index = stop, index + 1
    return payloads


def _rows(patients: dict[str, np.ndarray], rows: slice) -> dict[str, np.ndarray]:
    return {name: patients[name][rows] for name in ("FEATURES", "SEX")}


@pytest.mark.parametrize("model", MODELS)
def test_served_logits_equal_eager_pytorch_on_every_real_row_sent_in_requests_of_several_sizes(
    triton_server: LocalTritonServer, patients: dict[str, np.ndarray], model: str
) -> None:
    payloads = _requests(patients)
    # IN_FLIGHT requests at a time: the batcher merges those that wait together, and none waits long
    # behind the others on a busy machine (the queue rejects a request after 1 s).
    with TritonClient(f"grpc://{triton_server.grpc_url}") as client, ThreadPoolExecutor(IN_FLIGHT) as pool:
        answers = list(pool.map(lambda payload: client.infer(model, payload)["LOGITS"], payloads))
    served = np.concatenate(answers)
    np.testing.assert_allclose(served, patients["LOGITS"], rtol=0, atol=1e-5)
    assert np.array_equal(served.argmax(axis=1), patients["LOGITS"].argmax(axis=1))


def _send_http(server: LocalTritonServer, model: str, arrays: dict[str, np.ndarray]) -> Any:
    inputs = []
    for name, array in arrays.items():
        tensor = httpclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    with httpclient.InferenceServerClient(server.http_url) as client:
        try:
            return client.infer(model, inputs).as_numpy("LOGITS")
        except InferenceServerException as e:
            return e


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize(
    ("case", "words"),
    [
        ("eight_features", "unexpected shape for input 'FEATURES'"),
        ("float64_features", "'FEATURES' data-type"),
    ],
)
def test_a_request_of_the_wrong_width_or_dtype_gets_a_400_naming_the_input_while_its_neighbours_succeed(
    triton_server: LocalTritonServer, patients: dict[str, np.ndarray], model: str, case: str, words: str
) -> None:
    bad = _rows(patients, slice(0, 2))
    if case == "eight_features":
        bad["FEATURES"] = bad["FEATURES"][:, :8]
    else:
        bad["FEATURES"] = bad["FEATURES"].astype(np.float64)
    neighbours = [slice(i, i + 3) for i in (10, 20, 30)]
    with ThreadPoolExecutor(len(neighbours) + 1) as pool:
        refused = pool.submit(_send_http, triton_server, model, bad)
        answered = [
            pool.submit(_send_http, triton_server, model, _rows(patients, rows)) for rows in neighbours
        ]
        error, results = refused.result(), [future.result() for future in answered]
    assert isinstance(error, InferenceServerException), f"{case} was accepted"
    assert error.status() == "400" and words in error.message(), (error.status(), error.message())
    for rows, logits in zip(neighbours, results, strict=True):
        np.testing.assert_allclose(logits, patients["LOGITS"][rows], rtol=0, atol=1e-5)


@pytest.mark.parametrize("model", MODELS)
def test_a_sex_id_outside_the_embedding_is_refused_alone_in_an_execution_with_good_rows(
    held_batch_server, send_concurrently, patients: dict[str, np.ndarray], model: str
) -> None:
    payloads = [_rows(patients, slice(i, i + 1)) for i in range(HELD)]
    payloads[2]["SEX"] = np.array([[2]], dtype=np.int64)  # the table holds ids 0 and 1
    server = held_batch_server(model, HELD)  # all in one execution
    run = send_concurrently(server, model, payloads, "LOGITS")
    assert run.batch_sizes == {HELD: 1}, run.describe()
    assert run.failures == [2], run.describe()
    assert "SEX: value 2 is outside [0, 1]" in str(run.outcomes[2]), run.describe()
    for index in (0, 1, 3, 4):
        np.testing.assert_allclose(
            run.outputs[index], patients["LOGITS"][index : index + 1], rtol=0, atol=1e-5
        )
