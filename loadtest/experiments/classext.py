"""The `classext` experiment: Triton's classification extension in place of the Python top-k step.

Three arms serve the same photographs with the same exported classifier file, driven by one asyncio
``tritonclient`` HTTP load (perf_analyzer cannot ask for ``class_count``):

- ``A``: the shipped 3-step ensemble ``image_classifier`` (image_preprocess -> efficientnet_lite0_onnx ->
  image_postprocess: softmax, top-5, labels in a Python-backend model);
- ``B``: a 2-step ensemble (image_preprocess -> efficientnet_lite0_onnx) whose ``LOGITS`` output has
  ``label_filename``; the request asks ``class_count=5`` and Triton's core returns ``"score:index:label"``
  strings. The scores are the raw logits, not softmax probabilities;
- ``C``: the simplest alternative (:mod:`loadtest.baselines.minimal_server`, image pipeline) as two
  worker processes sharing a port, one request at a time each, one intra-op thread each.

A and B share one server (B's ensemble calls the same image_preprocess and classifier instances; the
labels on the classifier's output change nothing for a request that does not ask for a classification).
Each concurrency runs A, B, C, A, B, C... for ``rounds`` rounds after one unmeasured warm-up of each arm,
so background load hits the arms alike; :mod:`loadtest.experiments.classext_report` takes the medians,
ranges and the ratios round by round.

``python -m loadtest.experiments.classext --output reports/classext`` writes ``results.json`` and
``report.md`` there.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import tritonclient.http.aio as httpaio
from tritonclient.grpc.model_config_pb2 import ModelConfig
from tritonclient.http import InferInput, InferRequestedOutput

from loadtest.experiments import classext_report, minimal
from loadtest.experiments.clients import ClientRun
from loadtest.experiments.plans import IMAGE_ENCODER, IMAGE_MODEL
from loadtest.load.payloads import image_variants
from tritonlocal import LocalTritonServer, ServerConfig
from tritonrepo.clones import Clone, clone_models
from tritonrepo.commands import command_parser
from tritonrepo.configs import ModelEntry, load_repository
from tritonrepo.paths import REPOSITORY
from tritonrepo.writer import LINK, DerivedModel, write_repository

logger = logging.getLogger(__name__)

CLASSIFICATION_MODEL = f"{IMAGE_MODEL}__classext"
LABELS_FILE = REPOSITORY / "image_postprocess" / "1" / "imagenet_labels.txt"
TOP_K = 5
ARM_A = "A: 3-step ensemble, Python top-5"
ARM_B = "B: 2-step ensemble, class_count=5"
ARM_C = "C: simplest server, 2 workers"


@dataclass(kw_only=True, frozen=True)
class Arm:
    """Where one arm's requests go and what they ask for: ``outputs`` by name, or with ``class_count``
    the first output as Triton's classification."""

    label: str
    url: str  # host:port of the HTTP endpoint
    model: str
    outputs: tuple[str, ...]
    class_count: int = 0


def parse_classification(entry: bytes | str) -> tuple[float, int, str]:
    """One element of a classification output, ``"score:index:label"`` (``"score:index"`` where the output
    has no labels), as (score, class index, label); a label may itself hold colons."""
    text = entry.decode() if isinstance(entry, bytes) else entry
    parts = text.split(":", 2)
    if len(parts) < 2:
        raise ValueError(f"a classification is 'score:index[:label]', got {text!r}")
    return float(parts[0]), int(parts[1]), parts[2] if len(parts) == 3 else ""


def classification_models(models: dict[str, ModelEntry], *, threads: int) -> list[DerivedModel]:
    """The shipped image classifier as the local server serves it, with labels on its classifier's
    logits, and :data:`CLASSIFICATION_MODEL`: the same ensemble without its last step, returning those
    logits as ``LOGITS`` (the labels file beside both)."""
    derived = clone_models(models, [Clone(model=IMAGE_MODEL)], total_threads=threads)
    by_name = {model.config.name: model for model in derived}
    labels = {LABELS_FILE.name: LABELS_FILE}
    classifier = ModelConfig()
    classifier.CopyFrom(by_name[IMAGE_ENCODER].config)
    classifier.output[0].label_filename = LABELS_FILE.name
    by_name[IMAGE_ENCODER] = replace(
        by_name[IMAGE_ENCODER], config=classifier, note="labels on its logits", files=labels
    )
    ensemble = ModelConfig()
    ensemble.CopyFrom(by_name[IMAGE_MODEL].config)
    ensemble.name = CLASSIFICATION_MODEL
    steps = ensemble.ensemble_scheduling.step
    if [s.model_name for s in steps][1:] != [IMAGE_ENCODER, "image_postprocess"]:
        raise ValueError(f"{IMAGE_MODEL} is not preprocess -> {IMAGE_ENCODER} -> image_postprocess")
    del steps[2]
    steps[1].output_map[classifier.output[0].name] = "LOGITS"
    del ensemble.output[:]
    output = ensemble.output.add()
    output.CopyFrom(classifier.output[0])
    output.name = "LOGITS"
    route = DerivedModel(
        entry=models[IMAGE_MODEL], config=ensemble, note="without its Python top-k step", files=labels
    )
    return [*by_name.values(), route]


def top1_of(arm: Arm, result: object) -> int:
    """The first class of one response: its ``CLASS_IDS`` or its first classification."""
    if arm.class_count:
        return parse_classification(result.as_numpy(arm.outputs[0]).ravel()[0])[1]  # type: ignore[attr-defined]
    return int(result.as_numpy("CLASS_IDS").ravel()[0])  # type: ignore[attr-defined]


async def _drive(arm: Arm, images: Sequence[bytes], *, in_flight: int, requests: int, round_: int) -> dict:
    """``requests`` single-image requests, ``in_flight`` outstanding at every moment (closed loop): the
    run's record, with ``top1`` by request index (-1 where it failed)."""
    run = ClientRun(
        label=arm.label, model=arm.model, items=requests, in_flight=in_flight, wall_s=0.0, round=round_
    )
    top1 = [-1] * requests
    outputs = [InferRequestedOutput(name, class_count=arm.class_count) for name in arm.outputs]
    next_index = iter(range(requests))
    client = httpaio.InferenceServerClient(arm.url, conn_limit=in_flight)

    async def worker() -> None:
        for index in next_index:
            tensor = InferInput("IMAGE_BYTES", [1, 1], "BYTES")
            tensor.set_data_from_numpy(np.array([[images[index % len(images)]]], dtype=object))
            sent = time.perf_counter()
            try:
                result = await client.infer(arm.model, [tensor], outputs=outputs)
            except Exception:  # noqa: BLE001 - a failed request is counted, the load goes on
                run.failures += 1
                continue
            run.latencies_ms.append(1000.0 * (time.perf_counter() - sent))
            top1[index] = top1_of(arm, result)

    try:
        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(in_flight)))
        run.wall_s = time.perf_counter() - started
    finally:
        await client.close()
    return asdict(run) | {"images_per_s": run.items_per_s, "top1": top1}


def alternate(
    arms: list[Arm], images: Sequence[bytes], *, in_flight: int, requests: int, rounds: int
) -> list[dict]:
    """One unmeasured warm-up of each arm, then A, B, C, A, B, C... for ``rounds`` rounds."""
    for arm in arms:
        asyncio.run(
            _drive(arm, images, in_flight=in_flight, requests=max(in_flight, requests // 5), round_=-1)
        )
    runs = []
    for round_ in range(rounds):
        for arm in arms:
            runs.append(
                asyncio.run(_drive(arm, images, in_flight=in_flight, requests=requests, round_=round_))
            )
            logger.info(
                "%s, %d in flight, round %d: %.1f images/s",
                arm.label,
                in_flight,
                round_,
                runs[-1]["images_per_s"],
            )
    return runs


@contextlib.contextmanager
def served_arms(work: Path, *, workers: int, threads: int) -> Iterator[list[Arm]]:
    """Triton serving A and B from one repository built in ``work``, the alternative serving C."""
    repository = work / "repository"
    served = classification_models(load_repository(REPOSITORY), threads=threads)
    write_repository(REPOSITORY, repository, served, placement=LINK, made_by="loadtest.experiments.classext")
    config = ServerConfig(model_repository=repository, log_path=work / "tritonserver.log")
    options = minimal.image_options(
        repository=REPOSITORY, classifier=IMAGE_ENCODER, model=IMAGE_MODEL, threads=max(1, threads // workers)
    )
    with (
        LocalTritonServer(config) as server,
        minimal.running(
            options=options, log_path=work / "minimal_server.log", workers=workers
        ) as alternative,
    ):
        yield [
            Arm(
                label=ARM_A, url=server.http_url, model=IMAGE_MODEL, outputs=("CLASS_IDS", "SCORES", "LABELS")
            ),
            Arm(
                label=ARM_B,
                url=server.http_url,
                model=CLASSIFICATION_MODEL,
                outputs=("LOGITS",),
                class_count=TOP_K,
            ),
            Arm(
                label=ARM_C,
                url=alternative.removeprefix("http://"),
                model=IMAGE_MODEL,
                outputs=("CLASS_IDS",),
            ),
        ]


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    args.output.mkdir(parents=True, exist_ok=True)
    images = image_variants(args.images, seed=7)
    records: list[dict] = []
    with served_arms(args.output, workers=args.workers, threads=args.threads) as arms:
        for in_flight in args.in_flight:
            records += alternate(
                arms, images, in_flight=in_flight, requests=args.requests, rounds=args.rounds
            )
    (args.output / "results.json").write_text(json.dumps({"argv": sys.argv, "runs": records}, indent=1))
    report = classext_report.markdown(
        records, command=" ".join(["python -m loadtest.experiments.classext", *(argv or sys.argv[1:])])
    )
    (args.output / "report.md").write_text(report)
    print(report)
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = command_parser(
        "python -m loadtest.experiments.classext", __doc__, exit_codes="0 measured, 2 a usage error"
    )
    parser.add_argument(
        "--output", type=Path, required=True, help="folder for results.json, report.md and logs"
    )
    parser.add_argument(
        "--in-flight", type=int, nargs="+", default=[32, 1], help="concurrencies, in this order"
    )
    parser.add_argument("--requests", type=int, default=600, help="measured requests per arm per round")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds per concurrency")
    parser.add_argument("--images", type=int, default=150, help="distinct JPEGs cut from the photographs")
    parser.add_argument("--workers", type=int, default=2, help="worker processes of the simplest server")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="intra-op threads in all")
    return parser


if __name__ == "__main__":
    sys.exit(main())
