"""What each benchmark mode measures (:class:`Plan`) and the stages that measure it.

A stage returns a JSON-ready dict merged into results.json; which experiment runs in which stage is
:mod:`loadtest.experiments.registry`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import samples
from export import image as export_image
from export import records as precision
from loadtest.experiments import clients as client_experiments
from loadtest.experiments import inprocess, minimal, profiling, registry
from loadtest.experiments.served import PerfSession, arms_experiment, sweeps
from loadtest.load import environment, payloads, workers
from loadtest.load.locust_run import LocustRun, run_locust
from loadtest.load.perf import PerfSettings
from loadtest.load.pipelines import ExportedModel
from tritonlocal import LocalTritonServer, ServerConfig
from tritonrepo.configs import exported_step, load_repository, pipeline_steps
from tritonrepo.errors import RepositoryError
from tritonrepo.variants import Variant, build_repository

logger = logging.getLogger(__name__)

TEXT_MODEL, IMAGE_MODEL = "text_embedder", "image_classifier"
TEXT_ENCODER, IMAGE_ENCODER = "minilm_onnx", "efficientnet_lite0_onnx"
PUBLIC_MODELS = (
    "l2_normalize",
    "efficientnet_lite0_onnx",
    "efficientnet_lite0_torchscript",
    "minilm_onnx",
    "minilm_torchscript",
    "image_classifier",
    "image_classifier_torchscript",
    "text_embedder",
    "text_embedder_torchscript",
)
EXPORTED = {  # exported model -> (runtime, pipeline) for the in-process and profiling experiments
    "minilm_onnx": ("onnxruntime", "text"),
    "minilm_torchscript": ("torchscript", "text"),
    "efficientnet_lite0_onnx": ("onnxruntime", "image"),
    "efficientnet_lite0_torchscript": ("torchscript", "image"),
}
NOBATCH, INSTANCE_SUFFIX = "__nobatch", "__x{}"
TEXT_TOKENIZER, TEXT_TORCHSCRIPT_MODEL = "text_tokenizer", "text_embedder_torchscript"
# The equal-shape baseline arm of the `ragged` experiment (the configuration without ragged batching):
# the tokenizer pads each request to one of these lengths and the encoder's batcher merges equal shapes.
EQUAL_SHAPE_BUCKETS = "8,16,24,32,48,64,96,128,256"
# The `ragged` experiment runs the served text file in this process between its rounds at the targets'
# concurrency, in batches of these sizes.
RAGGED_INPROCESS_BATCHES = (8, 32)
# The image baseline arm of the `ragged` experiment: the ONNX file with the exporter's Pad nodes (not
# folded into its convolutions), behind batchers that wait for more requests on a CPU.
PAD_NODES_AND_DELAYS_ARM = "previous (image): fp32 file with the exporter's Pad nodes, 1-2 ms queue delays"
QUEUE_DELAY_IMAGE_BATCHERS = (
    (IMAGE_ENCODER, "preferred_batch_size: [16, 32, 64] max_queue_delay_microseconds: 2000"),
    ("image_preprocess", "max_queue_delay_microseconds: 1000"),
    ("image_postprocess", "max_queue_delay_microseconds: 1000"),
)


@dataclass(kw_only=True, frozen=True)
class Plan:
    perf: PerfSettings
    sweep_models: tuple[str, ...]
    sweep_concurrency: tuple[int, ...]
    # The ensembles the `batching` experiment measures with dynamic batching on and off.
    batching_models: tuple[str, ...] = (TEXT_MODEL,)
    batching_concurrency: tuple[int, ...] = (1, 8, 32, 64)
    batching_rounds: int = 2
    instance_counts: tuple[int, ...] = (1, 2, 4)
    instance_concurrency: tuple[int, ...] = (32,)
    instance_rounds: int = 2
    ragged_concurrency: tuple[int, ...] = (1, 32)
    ragged_rounds: int = 2
    # Sentences the served text file runs in this process after each round of the `ragged` experiment's
    # text arms at c=32: the figure served throughput is held to.
    ragged_inprocess_texts: int = 512
    minimal_concurrency: tuple[int, ...] = (1, 32)
    minimal_requests: int = 600
    # The alternative's rounds spread by a third at c=32 (onnxruntime's spinning thread pool, its fastest
    # setting, against the Python server's threads): the median of five steadies the ratio; longer
    # rounds did not (docs/benchmarks.md).
    minimal_rounds: int = 5
    protocols: tuple[str, ...] = ("http", "grpc")
    client_texts: int = 200
    client_in_flight: int = 32
    client_rounds: int = 3
    batch_cost_repeats: int = 9
    locust_users: int = 8
    locust_run_time_s: int = 15
    locust_shapes: tuple[str, ...] = ("steady",)
    central_images: int = 150
    central_in_flight: int = 16
    central_workers: int = 2
    central_rounds: int = 3
    inprocess_runtimes: tuple[str, ...] = ("onnxruntime",)
    inprocess_batches: tuple[int, ...] = (1, 8, 32, 64)
    inprocess_texts: int = 128
    inprocess_images: int = 64
    inprocess_rounds: int = 2
    profile_runs: int = 3
    profile_batch: int = 8
    notes: tuple[str, ...] = field(default_factory=tuple)


PLANS = {
    "quick": Plan(
        perf=PerfSettings(measurement_interval_ms=1500, max_trials=4, stability_percent=25, timeout_s=60),
        sweep_models=(TEXT_MODEL, IMAGE_MODEL),
        sweep_concurrency=(1, 8, 32),
        notes=("quick mode: the ONNX ensembles only, 150 images for `central`, short windows",),
    ),
    "full": Plan(
        perf=PerfSettings(measurement_interval_ms=3000, max_trials=6, stability_percent=15, timeout_s=150),
        sweep_models=PUBLIC_MODELS,
        sweep_concurrency=(1, 8, 32, 64),
        instance_concurrency=(8, 32),
        ragged_concurrency=(1, 8, 32),
        minimal_requests=2000,
        client_texts=1000,
        batch_cost_repeats=15,
        locust_users=16,
        locust_run_time_s=40,
        locust_shapes=("steady", "step", "spike"),
        central_images=1000,
        inprocess_runtimes=("onnxruntime", "torchscript"),
        inprocess_texts=512,
        inprocess_images=128,
        inprocess_rounds=3,
        profile_runs=10,
    ),
}


def with_models(plan: Plan, models: tuple[str, ...], source: Path) -> Plan:
    """``plan`` with its sweep and its `batching` experiment on ``models`` (any models of the repository
    at ``source``; the `batching` experiment takes the ensembles among them) instead of its defaults."""
    if not models:
        return plan
    repository = load_repository(source)
    unknown = [m for m in models if m not in repository]
    if unknown:
        raise ValueError(
            f"--models names models not in {source}: {', '.join(unknown)}; "
            f"available: {', '.join(sorted(repository))}"
        )
    for model in models:
        try:
            pipeline_steps(repository, model)
        except RepositoryError as e:
            raise ValueError(f"--models {model}: {e}") from e
    ensembles = tuple(m for m in models if repository[m].kind == "ensemble")
    return replace(plan, sweep_models=models, batching_models=ensembles)


def served_variants(plan: Plan, source: Path, previous_image: Path) -> list[Variant]:
    variants = [Variant(model=m) for m in dict.fromkeys((*plan.sweep_models, TEXT_MODEL, IMAGE_MODEL))]
    variants += [Variant(model=m, suffix=NOBATCH, batching=False) for m in plan.batching_models]
    arms = ragged_arms(source) | image_arms(previous_image)
    variants += [variant for variant, _ in arms.values()]
    variants += [
        Variant(model=TEXT_MODEL, suffix=INSTANCE_SUFFIX.format(n), instances=n) for n in plan.instance_counts
    ]
    return variants


def ragged_arms(source: Path) -> dict[str, tuple[Variant, str]]:
    """The `ragged` experiment: arm label -> (variant, served model). On the default route's encoder: the
    previous configuration (its fp32 file behind length buckets, equal-shape batches: what text_embedder
    served before), ragged batching alone (the fp32 file, ragged), the served precision alone (equal shapes),
    and as shipped; then the TorchScript route as shipped. The fp32 file is the one the export keeps
    beside its precision record (:mod:`export.precision`); where the served file is fp32 already, the
    shipped file stands in for it and the arms that would repeat another are left out."""
    encoder = text_encoder_of(source)
    served = precision.served_variant(encoder)
    fp32 = precision.kept_file(encoder, "fp32") if served != "fp32" else None
    fp32_file = ((encoder, "model_filename", str(fp32.resolve())),) if fp32 is not None else ()
    equal_shapes = ((TEXT_TOKENIZER, "length_buckets", EQUAL_SHAPE_BUCKETS),)
    arms = {
        "previous: fp32, buckets, equal shapes": Variant(
            model=TEXT_MODEL, suffix="__previous", ragged=False, parameters=equal_shapes + fp32_file
        ),
    }
    if fp32_file:
        arms["fp32, ragged"] = Variant(model=TEXT_MODEL, suffix="__fp32", parameters=fp32_file)
        arms[f"{served}, buckets, equal shapes"] = Variant(
            model=TEXT_MODEL, suffix="__equalshapes", ragged=False, parameters=equal_shapes
        )
    arms[f"{served}, ragged (shipped)"] = Variant(model=TEXT_MODEL)
    other = precision.served_variant(text_encoder_of(source, TEXT_TORCHSCRIPT_MODEL))
    arms[f"TorchScript route, {other}, ragged"] = Variant(model=TEXT_TORCHSCRIPT_MODEL)
    return {label: (variant, variant.served_name) for label, variant in arms.items()}


def image_arms(previous_file: Path) -> dict[str, tuple[Variant, str]]:
    """The `ragged` experiment, images: the previous configuration (``previous_file``, the fp32 file as
    exported before its ``Pad`` nodes were folded into the convolutions, behind the batchers it was served
    with), that file alone behind today's batchers, the clone serving the fp32 file where the export serves a
    reduced precision, and as shipped."""
    served = precision.served_variant(IMAGE_ENCODER)
    previous = ((IMAGE_ENCODER, "model_filename", str(previous_file.resolve())),)
    arms = {
        PAD_NODES_AND_DELAYS_ARM: Variant(
            model=IMAGE_MODEL, suffix="__previous", parameters=previous, batcher=QUEUE_DELAY_IMAGE_BATCHERS
        ),
        registry.PAD_NODES_FILE_ARM: Variant(model=IMAGE_MODEL, suffix="__padnodes", parameters=previous),
    }
    fp32 = precision.kept_file(IMAGE_ENCODER, "fp32") if served != "fp32" else None
    if fp32 is not None:
        arms["image, fp32"] = Variant(
            model=IMAGE_MODEL,
            suffix="__fp32",
            parameters=((IMAGE_ENCODER, "model_filename", str(fp32.resolve())),),
        )
    arms[f"image, {served} (shipped)"] = Variant(model=IMAGE_MODEL)
    return {label: (variant, variant.served_name) for label, variant in arms.items()}


def ragged_experiment(
    plan: Plan, session: PerfSession, source: Path, previous_image: Path, cores: int
) -> dict[str, list]:
    """The `ragged` experiment: the text arms at each concurrency, then the image arms at 32, every arm once
    per round.

    After each round of the text arms at the target concurrency, the served text file runs in this process
    (tokenise, forward, pool; the served layout, one single-thread pipeline per core; batches of 8 and
    32, in arrival order and sorted by length) while the server idles: the in-process figure that served
    throughput is held to is measured between the served rounds it is compared with, not an experiment
    (minutes of a shared machine) away."""
    text_arms = {label: served for label, (_, served) in ragged_arms(source).items()}
    encoder = next(e for e in exported_models(source, 1) if e.model == text_encoder_of(source))
    beside_arms = [
        arm
        for arm in inprocess.arms_for("text", cores)
        if arm.workers == cores and arm.threads == 1 and arm.order != inprocess.ONE_LENGTH
    ]
    points, beside = [], []
    for concurrency in plan.ragged_concurrency:
        for _ in range(plan.ragged_rounds):
            points += arms_experiment(session, "ragged", TEXT_MODEL, text_arms, concurrencies=[concurrency])
            if concurrency == registry.TARGET_CONCURRENCY:
                beside += inprocess.measure(
                    encoder,
                    batch_sizes=RAGGED_INPROCESS_BATCHES,
                    items=plan.ragged_inprocess_texts,
                    rounds=1,
                    arms=beside_arms,
                )
    image = {label: served for label, (_, served) in image_arms(previous_image).items()}
    # The image target is at c=32 only: spare the quick run the c=1 image arms.
    points += arms_experiment(
        session,
        "ragged",
        IMAGE_MODEL,
        image,
        concurrencies=[registry.TARGET_CONCURRENCY],
        rounds=plan.ragged_rounds,
    )
    return {"ragged": points, "ragged_inprocess": beside}


def text_encoder_of(source: Path, ensemble: str = TEXT_MODEL) -> str:
    """The exported encoder a text ensemble calls (its step that is a native model)."""
    return exported_step(load_repository(source), ensemble)


def served_stage(plan: Plan, source: Path, work: Path, raw: Path, cores: int, skip: tuple[str, ...]) -> dict:
    previous_image = work / "previous" / f"{IMAGE_ENCODER}.onnx"
    export_image.export_unfolded_onnx(source / IMAGE_ENCODER, previous_image)
    variants = served_variants(plan, source, previous_image)
    hashes = build_repository(source, work / "served", variants, total_threads=cores)
    encoder = text_encoder_of(source)
    result: dict = {
        "served_config_sha256": hashes,
        "text_encoder": encoder,
        "text_runtime": EXPORTED[encoder][0],
        "precision_section": precision.report_section(),
        "image_precision": precision.served_variant(IMAGE_ENCODER),
    }
    with _server(work / "served", raw / "tritonserver.log", startup_timeout_s=600) as server:
        result["versions"] = environment.versions(server.http_url)
        session = PerfSession(
            http_url=server.http_url,
            grpc_url=server.grpc_url,
            repository=source,
            out_dir=raw / "perf_analyzer",
            settings=plan.perf,
            server_pid=server.pid,
        )
        experiments = _served_experiments(
            plan,
            server,
            session,
            source=source,
            previous_image=previous_image,
            cores=cores,
            raw=raw,
            result=result,
        )
        for key, run in experiments.items():  # in this order: the sweeps reuse `batching`'s points
            if key not in skip:
                _attempt(result, registry.experiment(key).result_keys, run)
        result["server_statistics_end"] = _all_statistics(server.http_url, raw)
    return result


def batching_experiment(plan: Plan, session: PerfSession) -> list:
    """`batching`: each of the plan's batching models with dynamic batching on against its clone without."""
    return [
        point
        for model in plan.batching_models
        for point in arms_experiment(
            session,
            "batching",
            model,
            {"batching on": model, "batching off": model + NOBATCH},
            concurrencies=list(plan.batching_concurrency),
            rounds=plan.batching_rounds,
        )
    ]


def _arms_experiments(plan: Plan, session: PerfSession) -> dict[str, Callable[[], object]]:
    """`batching` and `instances` (the text ensemble): a model against its clones, arm by arm."""
    instance_arms = {
        f"{n} instance{'s' if n > 1 else ''}": TEXT_MODEL + INSTANCE_SUFFIX.format(n)
        for n in plan.instance_counts
    }
    return {
        "batching": lambda: batching_experiment(plan, session),
        "instances": lambda: arms_experiment(
            session,
            "instances",
            TEXT_MODEL,
            instance_arms,
            concurrencies=list(plan.instance_concurrency),
            rounds=plan.instance_rounds,
        ),
    }


def _served_experiments(
    plan: Plan,
    server: LocalTritonServer,
    session: PerfSession,
    *,
    source: Path,
    previous_image: Path,
    cores: int,
    raw: Path,
    result: dict,
) -> dict[str, Callable[[], object]]:
    """The served stage's experiments by registry key, in the order they run."""
    grpc_url = f"grpc://{server.grpc_url}"
    return {
        **_arms_experiments(plan, session),
        "ragged": lambda: ragged_experiment(plan, session, source, previous_image, cores),
        "minimal": lambda: minimal.compare(
            triton_http_url=server.http_url,
            model=TEXT_MODEL,
            encoder_file=minimal.served_file(source, text_encoder_of(source)),
            tokenizer_file=minimal.tokenizer_file(source),
            threads=cores,
            concurrencies=list(plan.minimal_concurrency),
            requests=plan.minimal_requests,
            rounds=plan.minimal_rounds,
            log_path=raw / "minimal_server.log",
            workers=minimal.worker_counts(cores),
        ),
        "sweeps": lambda: sweeps(
            session,
            models=list(plan.sweep_models),
            protocols=list(plan.protocols),
            concurrencies=list(plan.sweep_concurrency),
            measured=result.get("batching", []),
        ),
        "clients": lambda: client_experiments.alternating_embeds(
            grpc_url,
            TEXT_MODEL,
            samples.shuffled_sentences(plan.client_texts, seed=3),
            in_flight=plan.client_in_flight,
            rounds=plan.client_rounds,
        ),
        "batchcost": lambda: _served_batch_costs(plan, grpc_url, source),
        "locust": lambda: [_locust(plan, server, raw, shape) for shape in plan.locust_shapes],
    }


def _server(repository: Path, log_path: Path, *, startup_timeout_s: float) -> LocalTritonServer:
    """A stage's own tritonserver: given time to load the stage's variants, and 5 s to exit."""
    config = ServerConfig(
        model_repository=repository, log_path=log_path, exit_timeout_s=5, startup_timeout_s=startup_timeout_s
    )
    return LocalTritonServer(config)


def _attempt(result: dict, keys: tuple[str, ...], run: Callable[[], Any]) -> None:
    """Run one experiment; a failure is recorded (and reported) and the next experiment still runs."""
    key = keys[0]
    try:
        value = run()
        # an experiment that writes several results.json keys returns them by key
        result.update({k: value[k] for k in keys} if len(keys) > 1 else {key: value})
    except Exception as e:  # noqa: BLE001 - the report must say what failed, and the rest must run
        logger.exception("experiment %s failed", key)
        result.setdefault("experiment_errors", []).append(f"{key}: {type(e).__name__}: {e}")


def _served_batch_costs(plan: Plan, url: str, source: Path) -> list[dict]:
    texts = inprocess.same_length_texts(source)  # one length, so the shape plays no part
    images = [samples.photographs()[0]] * 32
    costs = []
    for model, kind, items in ((TEXT_MODEL, "text", texts), (IMAGE_MODEL, "image", images)):
        cost, server = client_experiments.served_batch_cost(
            url, model, items, kind=kind, repeats=plan.batch_cost_repeats
        )
        costs.append({"cost": cost, "server": server})
    return costs


def _locust(plan: Plan, server: LocalTritonServer, raw: Path, shape: str) -> dict:
    from loadtest.load.observe import statistics_delta, statistics_snapshot

    run = LocustRun(
        http_url=server.http_url,
        grpc_url=server.grpc_url,
        users=plan.locust_users,
        run_time_s=plan.locust_run_time_s,
        shape=shape,
    )
    before = statistics_snapshot(server.http_url)
    outcome = run_locust(run, raw / "locust", stem=f"locust_{shape}")
    return {
        "shape": shape,
        "users": plan.locust_users,
        "run_time_s": plan.locust_run_time_s,
        "result": outcome,
        "server": statistics_delta(before, statistics_snapshot(server.http_url)),
    }


def _all_statistics(url: str, raw: Path) -> str:
    import json

    from loadtest.load.observe import statistics_snapshot

    path = raw / "server_statistics.json"
    path.write_text(json.dumps({name: s.to_dict() for name, s in statistics_snapshot(url).items()}, indent=2))
    return path.name


def central_stage(plan: Plan, source: Path, work: Path, raw: Path, cores: int) -> dict:
    """The `central` experiment: one server for every image vs N processes each loading the model, in
    alternating rounds (the server stays up, idle, while the processes run)."""
    images = payloads.image_variants(plan.central_images, seed=7)
    build_repository(source, work / "central", [Variant(model=IMAGE_MODEL)], total_threads=cores)
    threads = max(1, cores // plan.central_workers)
    measured = []  # (central, pool) of each round
    with _server(work / "central", raw / "tritonserver_central.log", startup_timeout_s=300) as server:
        assert server.pid is not None
        for _ in range(plan.central_rounds):
            central = client_experiments.central_classify(
                f"grpc://{server.grpc_url}", server.pid, IMAGE_MODEL, images, in_flight=plan.central_in_flight
            )
            pool = workers.run_pool(
                source,
                model=IMAGE_ENCODER,
                runtime="onnxruntime",
                workers=plan.central_workers,
                threads=threads,
                images=images,
            )
            measured.append((central, pool))
    first_central, first_pool = measured[0]
    agree = sum(a == b for a, b in zip(first_central.top1, first_pool.top1, strict=True)) / len(images)
    return {
        "central": {
            "rounds": [
                {"round": round_, "server": central, "pool": pool}
                for round_, (central, pool) in enumerate(measured)
            ],
            "pool_threads_per_worker": threads,
            "top1_agreement": agree,
            "images": len(images),
        }
    }


def exported_models(source: Path, threads: int, runtime: str | None = None) -> list[ExportedModel]:
    """The exported encoders (of ``runtime``, else all), text before image, as run in this process."""
    return [
        ExportedModel(
            repository=source, model=model, runtime=model_runtime, pipeline=pipeline, threads=threads
        )
        for model, (model_runtime, pipeline) in EXPORTED.items()
        if runtime in (None, model_runtime)
    ]


def inprocess_stage(plan: Plan, source: Path, cores: int) -> dict:
    points, costs = [], []
    served_runtime = EXPORTED[text_encoder_of(source)][0]  # the served file is always measured in-process
    items = {"text": plan.inprocess_texts, "image": plan.inprocess_images}
    for runtime in dict.fromkeys((*plan.inprocess_runtimes, served_runtime)):
        encoders = exported_models(source, cores, runtime)
        for encoder in encoders:
            points += inprocess.measure(
                encoder,
                batch_sizes=plan.inprocess_batches,
                items=items[encoder.pipeline],
                rounds=plan.inprocess_rounds,
                arms=inprocess.arms_for(encoder.pipeline, cores),
            )
        costs += [inprocess.batch_cost(encoder, repeats=plan.batch_cost_repeats) for encoder in encoders]
    return {"inprocess": points, "inprocess_batch_costs": costs}


def profile_stage(plan: Plan, source: Path, raw: Path, cores: int) -> dict:
    return {
        "profiles": [
            profiling.profile_model(
                encoder, batch_size=plan.profile_batch, runs=plan.profile_runs, out_dir=raw / "profiles"
            )
            for encoder in exported_models(source, cores)
        ]
    }
