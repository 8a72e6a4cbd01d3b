"""The `minimal` experiment's three services without a server process: the request bodies the one load
generator sends (text, one JPEG as binary data, one tabular row), the alternative's tensors pipeline on the
exported tabular file (good and bad requests), and the report's table per service and its targets, each
held to the faster deployment of the alternative."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from tritonclient.http import InferenceServerClient, InferInput

import samples
from loadtest.baselines import minimal_server
from loadtest.baselines.pipelines import served_file
from loadtest.experiments import minimal
from loadtest.experiments.plans import PLANS, served_clones, tabular_model
from loadtest.load.json_load import image_request, run_json_load, tensors_request, text_request
from loadtest.load.model_rows import described_rows
from loadtest.report import doc_figures, findings, ragged_section, rounds
from tritonrepo.configs import load_model_config
from tritonrepo.exported_runtime import OnnxRunner
from tritonrepo.paths import REPOSITORY

TABULAR_MODEL = "diabetes_classifier_onnx"


def test_the_tabular_service_is_the_described_model_that_takes_rows() -> None:
    assert tabular_model() == TABULAR_MODEL


PER_CORE = "2 worker processes, one request at a time each"
ONE = "one process, one request at a time"


@pytest.fixture(scope="module")
def rows() -> list[dict[str, np.ndarray]]:
    found = described_rows(TABULAR_MODEL, load_model_config(REPOSITORY / TABULAR_MODEL))
    assert found
    return found


@pytest.fixture(scope="module")
def runner() -> OnnxRunner:
    return OnnxRunner(served_file(REPOSITORY, TABULAR_MODEL), threads=1)


def test_a_text_request_is_one_sentence_as_a_json_bytes_input() -> None:
    body = text_request("A man is eating food.")
    assert body.headers["Content-Type"] == "application/json"
    assert json.loads(body.data) == {
        "inputs": [{"name": "TEXT", "shape": [1, 1], "datatype": "BYTES", "data": ["A man is eating food."]}]
    }


def test_an_image_request_carries_the_jpeg_as_tritonclient_does_and_asks_json_outputs() -> None:
    photograph = samples.photographs()[0]
    body = image_request(photograph, outputs=("CLASS_IDS", "SCORES"))
    split = int(body.headers["Inference-Header-Content-Length"])
    header = json.loads(body.data[:split])
    (tensor,) = header["inputs"]
    assert (tensor["name"], tensor["shape"], tensor["datatype"]) == ("IMAGE_BYTES", [1, 1], "BYTES")
    assert tensor["parameters"]["binary_data_size"] == len(body.data) - split
    assert header["outputs"] == [
        {"name": name, "parameters": {"binary_data": False}} for name in ("CLASS_IDS", "SCORES")
    ]
    # the binary section is byte for byte what tritonclient sends Triton for the same image
    reference = InferInput("IMAGE_BYTES", [1, 1], "BYTES")
    reference.set_data_from_numpy(np.array([[photograph]], dtype=object))
    client_body, client_split = InferenceServerClient.generate_request_body([reference])
    assert body.data[split:] == client_body[client_split:]
    # and the alternative reads the image back
    lowered = {k.lower(): v for k, v in body.headers.items()}
    assert minimal_server.request_images(body.data, lowered) == [photograph]


def test_a_tabular_request_is_one_real_row_with_a_batch_axis(
    rows: list[dict[str, np.ndarray]], runner: OnnxRunner
) -> None:
    row = rows[0]
    body = json.loads(tensors_request(row).data)
    assert [(t["name"], t["shape"], t["datatype"]) for t in body["inputs"]] == [
        ("FEATURES", [1, 9], "FP32"),
        ("SEX", [1, 1], "INT64"),
    ]
    feeds = minimal_server.request_tensors(tensors_request(row).data, minimal_server.graph_inputs(runner))
    for name, value in row.items():
        np.testing.assert_array_equal(feeds[name], value[None])
        assert feeds[name].dtype == value.dtype


def test_the_tensors_pipeline_answers_every_output_of_the_file(
    rows: list[dict[str, np.ndarray]], runner: OnnxRunner
) -> None:
    answer = minimal_server.tensors_answer(runner)
    for row in rows[:3]:
        (output,) = answer(tensors_request(row).data, {})()
        expected = runner.run({name: value[None] for name, value in row.items()})[0]
        assert (output["name"], output["datatype"], output["shape"]) == ("LOGITS", "FP32", [1, 3])
        np.testing.assert_allclose(output["data"], expected.ravel(), rtol=1e-6)


def _bad(row: dict[str, np.ndarray], change: str) -> bytes:
    body = json.loads(tensors_request(row).data)
    features, sex = body["inputs"]
    if change == "unknown":
        body["inputs"].append(dict(sex, name="AGE"))
    elif change == "missing":
        body["inputs"] = [features]
    elif change == "shape":
        features["shape"] = [1, 8]
        features["data"] = features["data"][:8]
    elif change == "datatype":
        sex["datatype"] = "FP32"
    elif change == "count":
        features["data"] = features["data"][:8]
    return json.dumps(body).encode()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("unknown", r"unknown input\(s\) \['AGE'\]; the model's inputs are \['FEATURES', 'SEX'\]"),
        ("missing", r"missing input\(s\) \['SEX'\]"),
        ("shape", r"input FEATURES is FP32 of shape \[1, 8\]; the model takes FP32 of shape \[batch, 9\]"),
        ("datatype", r"input SEX is FP32 of shape \[1, 1\]; the model takes INT64"),
        ("count", r"input FEATURES has 8 values; its shape \[1, 9\] holds 9"),
    ],
)
def test_a_bad_tabular_request_is_refused_naming_what_was_wrong(
    rows: list[dict[str, np.ndarray]], runner: OnnxRunner, change: str, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        minimal_server.tensors_answer(runner)(_bad(rows[0], change), {})


@pytest.fixture
def tensors_server(runner: OnnxRunner) -> Iterator[str]:
    """The alternative's HTTP server on the tensors pipeline, in a thread of this process."""
    expects = minimal_server.TENSORS_REQUEST.format(
        minimal_server.inputs_text(minimal_server.graph_inputs(runner))
    )
    server = minimal_server.make_server(
        answer=minimal_server.tensors_answer(runner), model_name=TABULAR_MODEL, expects=expects
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v2/models/{TABULAR_MODEL}/infer"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_the_load_generator_sends_prebuilt_bodies_and_a_bad_request_gets_a_400(
    rows: list[dict[str, np.ndarray]], tensors_server: str
) -> None:
    bodies = [tensors_request(row) for row in rows[:5]]
    outcome = run_json_load(tensors_server, bodies, label="alternative", concurrency=4, requests=20, warmup=4)
    assert (len(outcome.latencies_ms), outcome.failures) == (20, 0)
    request = urllib.request.Request(tensors_server, data=_bad(rows[0], "missing"))
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 400
    error = json.loads(refused.value.read())["error"]
    assert error.startswith("expected a KServe v2 JSON request with the inputs FEATURES FP32 [batch, 9], SEX")
    assert "missing input(s) ['SEX']" in error


def test_the_shipped_services_send_real_rows_to_the_files_triton_serves(rows: list[dict]) -> None:
    (tabular,) = minimal.shipped_services(REPOSITORY, {"tabular": 40})
    assert (tabular.key, tabular.model, tabular.requests, len(tabular.bodies)) == (
        "tabular",
        TABULAR_MODEL,
        40,
        len(rows),
    )
    assert tabular.options(3) == [
        "--pipeline=tensors",
        f"--model={served_file(REPOSITORY, TABULAR_MODEL)}",
        f"--name={TABULAR_MODEL}",
        "--threads=3",
    ]
    with pytest.raises(
        ValueError, match=r"unknown services \['audio'\].*known: \['text', 'image', 'tabular'\]"
    ):
        minimal.shipped_services(REPOSITORY, {"audio": 1})
    # the served stage serves the tabular model when the experiment runs, not otherwise
    served = {
        c.served_name
        for c in served_clones(PLANS["quick"], REPOSITORY, Path("unused.onnx"), skip=("ragged",))
    }
    assert TABULAR_MODEL in served
    assert set(PLANS["quick"].minimal_requests) == set(minimal.SERVICES)


def _runs(service: str, model: str, rates: dict[tuple[int, str], float]) -> list[dict]:
    """Three alternating rounds of each arm; ``rates``: (concurrency, label) -> requests/s."""
    return [
        {
            "service": service,
            "label": label,
            "concurrency": concurrency,
            "round": round_,
            "requests": 100,
            "failures": 0,
            "wall_s": 1.0,
            "p50_ms": 5.0,
            "p99_ms": 9.0,
            "requests_per_s": rate * (1.0, 0.9, 1.1)[round_],
        }
        | ({} if label.startswith("Triton") else {"workers": 1 if label == ONE else 2})
        for (concurrency, label), rate in rates.items()
        for round_ in range(3)
    ]


def _three_services() -> dict:
    triton_text, triton_image = "Triton (text_embedder)", "Triton (image_classifier)"
    triton_tabular = f"Triton ({TABULAR_MODEL})"
    runs = _runs(
        "text",
        "text_embedder",
        {(1, triton_text): 150.0, (1, ONE): 140.0, (1, PER_CORE): 100.0}
        | {(32, triton_text): 300.0, (32, ONE): 150.0, (32, PER_CORE): 250.0},
    )
    runs += _runs(
        "image",
        "image_classifier",
        {(c, triton_image): 60.0 for c in (1, 8, 32)}
        | {(1, ONE): 50.0, (1, PER_CORE): 40.0, (8, ONE): 45.0, (8, PER_CORE): 70.0}
        | {(32, ONE): 40.0, (32, PER_CORE): 55.0},
    )
    runs += _runs(
        "tabular", TABULAR_MODEL, {(1, triton_tabular): 500.0, (1, ONE): 800.0, (1, PER_CORE): 700.0}
    )
    return {"minimal": runs, "machine": {"logical_cores": 2}}


def test_the_report_gives_each_service_its_table_and_holds_each_target_to_the_faster_deployment(
    tmp_path: Path,
) -> None:
    results = _three_services()
    section = ragged_section.minimal_section(results)
    headings = [line for line in section.splitlines() if line.startswith("### ")]
    assert headings == [
        "### text (`text_embedder`)",
        "### image (`image_classifier`)",
        f"### tabular (`{TABULAR_MODEL}`)",
    ]
    image_table = section.split("### image")[1].split("###")[0]
    assert f"| 8 | {PER_CORE} | 3 | 60.0 | 70.0 | 0.85x | 0.85x to 0.85x |" in image_table
    assert (
        "| image | 32 | 3 | Triton (image_classifier) | 100 | 0 | 66.0 |" in section
    )  # every run, by service
    verdicts = {v.name: v for v in findings.verdicts(results)}
    text_1, text_32 = (verdicts[f"text c={c} vs the simplest alternative"] for c in (1, 32))
    # at 1 in flight the one process is the faster deployment, at 32 the workers: each is the bound
    assert (text_1.met, text_1.measured.split(" (")[0]) == (True, f"1.07x against {ONE}")
    assert (text_32.met, text_32.measured.split(" (")[0]) == (False, f"1.20x against {PER_CORE}")
    assert text_32.required.startswith(">= 1.4x")
    image = [verdicts[f"image c={c} vs the simplest alternative"] for c in (1, 8, 32)]
    assert [(v.met, v.measured.split(" (")[0]) for v in image] == [
        (True, f"1.20x against {ONE}"),
        (False, f"0.85x against {PER_CORE}"),
        (True, f"1.09x against {PER_CORE}"),
    ]
    tabular = verdicts["tabular vs the simplest alternative"]
    assert (tabular.met, tabular.verdict) == (None, "reported, no target")
    assert tabular.measured.startswith(f"c=1: 0.62x against {ONE} (500.0 vs 800.0 req/s, medians of 3 rounds")
    # the docs' quoted table renders every service from a record
    (tmp_path / "results.json").write_text(json.dumps(results))
    quoted = doc_figures.minimal(tmp_path)
    assert f"| tabular | 1 | {ONE} | 500.0 | 800.0 | 0.62x | 0.62x to 0.62x |" in quoted
    assert rounds.best_alternative(rounds.minimal_comparisons(results), "image", 8).workers == 2
