"""Property-based fuzzing of the pre-processing models through the shared server (hypothesis).

image_preprocess gets random bytes and real PNG/JPEG files with bytes overwritten, inserted or cut off;
text_tokenizer gets random bytes and random unicode. For every input the answer is either a clear error
(HTTP 400 naming the input) or an output of exactly the declared shape and datatype; each test then
checks that the examples reached both outcomes and that the server is ready with every Python-backend stub
alive: no input crashes it. Each test stands alone (no shared counters, no order between tests).
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import numpy as np
import skimage
import tritonclient.http as httpclient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tritonclient.utils import InferenceServerException

from tritonlocal import LocalTritonServer

IMAGES = Path(skimage.__file__).parent / "data"
SEEDS = {"png": (IMAGES / "coffee.png").read_bytes(), "jpeg": (IMAGES / "rocket.jpg").read_bytes()}
FUZZ = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,  # the same examples every run: a failure here is reproducible, not flaky
    suppress_health_check=[HealthCheck.too_slow],
)


@st.composite
def mutated_images(draw: st.DrawFn) -> bytes:
    data = bytearray(SEEDS[draw(st.sampled_from(sorted(SEEDS)))])
    for _ in range(draw(st.integers(0, 8))):
        position = draw(st.integers(0, len(data) - 1))
        action = draw(st.sampled_from(["overwrite", "insert", "delete"]))
        chunk = draw(st.binary(min_size=1, max_size=16))
        if action == "overwrite":
            data[position : position + len(chunk)] = chunk
        elif action == "insert":
            data[position:position] = chunk
        else:
            del data[position : position + len(chunk)]
    if draw(st.booleans()):
        data = data[: draw(st.integers(0, len(data)))]
    return bytes(data)


def _infer(server: LocalTritonServer, model: str, payload: bytes) -> httpclient.InferResult | Exception:
    client = httpclient.InferenceServerClient(server.http_url)
    metadata = client.get_model_metadata(model)
    tensor = httpclient.InferInput(metadata["inputs"][0]["name"], [1, 1], "BYTES")
    tensor.set_data_from_numpy(np.array([[payload]], dtype=object))
    try:
        return client.infer(model, [tensor])
    except InferenceServerException as e:
        return e
    finally:
        client.close()


def _check(server: LocalTritonServer, model: str, payload: bytes) -> str:
    """Assert the answer is a clear error or a well-formed output; returns which of the two it was."""
    result = _infer(server, model, payload)
    metadata = httpclient.InferenceServerClient(server.http_url).get_model_metadata(model)
    input_name = metadata["inputs"][0]["name"]
    if isinstance(result, InferenceServerException):
        assert result.status() == "400" and result.message().startswith(f"{input_name}: "), result
        problem = re.sub(r"\d+", "N", result.message().split(":")[1].strip())
        return f"rejected: {problem[:40]}"
    for output in metadata["outputs"]:
        array = result.as_numpy(output["name"])
        declared = [1, *(int(d) for d in output["shape"][1:])]
        assert len(array.shape) == len(declared), (output, array.shape)
        assert all(d in (-1, s) for d, s in zip(declared, array.shape, strict=True)), (output, array.shape)
        assert array.dtype == np.dtype(output["datatype"].lower().replace("fp", "float"))
        assert np.all(np.isfinite(array)) if array.dtype.kind == "f" else True
    return "answered"


def _fuzz(server: LocalTritonServer, model: str, payloads: st.SearchStrategy[bytes]) -> Counter[str]:
    """Send every example hypothesis draws from ``payloads``, check each answer, count the outcomes."""
    outcomes: Counter[str] = Counter()

    @FUZZ
    @given(payload=payloads)
    def send(payload: bytes) -> None:
        outcomes[_check(server, model, payload)] += 1

    send()
    print(f"\n{model} fuzz outcomes:", dict(sorted(outcomes.items())))
    return outcomes


def _assert_reached_both_outcomes_and_the_server_survived(
    server: LocalTritonServer, outcomes: Counter[str]
) -> None:
    rejected = sum(count for outcome, count in outcomes.items() if outcome.startswith("rejected"))
    assert outcomes["answered"] > 0 and rejected > 0, f"the examples missed an outcome: {outcomes}"
    health = server.check_models()
    assert server.is_ready() and health.healthy, health.describe()


def test_image_preprocess_answers_any_bytes_with_pixels_or_a_clear_error(
    triton_server: LocalTritonServer,
) -> None:
    payloads = st.one_of(mutated_images(), st.binary(max_size=4096))
    outcomes = _fuzz(triton_server, "image_preprocess", payloads)
    _assert_reached_both_outcomes_and_the_server_survived(triton_server, outcomes)


def test_text_tokenizer_answers_any_bytes_or_unicode_with_tokens_or_a_clear_error(
    triton_server: LocalTritonServer,
) -> None:
    payloads = st.one_of(st.binary(max_size=2048), st.text(max_size=600).map(lambda s: s.encode("utf-8")))
    outcomes = _fuzz(triton_server, "text_tokenizer", payloads)
    _assert_reached_both_outcomes_and_the_server_survived(triton_server, outcomes)
