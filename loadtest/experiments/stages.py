"""The stages that run a mode's plan (:mod:`loadtest.experiments.plans`): each starts what it measures,
runs its experiments and returns a JSON-ready dict merged into results.json.

Which experiment runs in which stage is :mod:`loadtest.experiments.registry`; an experiment that fails is
recorded with its message and the next one still runs.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import samples
from export.efficientnet_lite import kind as export_image
from export.precision import records
from loadtest.baselines import workers
from loadtest.experiments import clients as client_experiments
from loadtest.experiments import inprocess, minimal, profiling, registry
from loadtest.experiments.budget_runs import Target
from loadtest.experiments.budget_stage import run_budgets
from loadtest.experiments.plans import (
    EXPORTED,
    IMAGE_ENCODER,
    IMAGE_MODEL,
    INSTANCE_SUFFIX,
    NOBATCH,
    RAGGED_INPROCESS_BATCHES,
    TEXT_MODEL,
    Plan,
    exported_models,
    image_arms,
    ragged_arms,
    served_clones,
    text_encoder_of,
)
from loadtest.experiments.served import PerfSession, arms_experiment, sweeps
from loadtest.load import environment, payloads
from loadtest.load.locust_run import LocustRun, run_locust
from loadtest.load.observe import statistics_delta, statistics_snapshot
from loadtest.load.stub_timings import server_environment
from tritonlocal import LocalTritonServer, ServerConfig
from tritonrepo.clones import Clone, build_repository

logger = logging.getLogger(__name__)


def ragged_experiment(
    plan: Plan, session: PerfSession, source: Path, pad_nodes_image: Path, cores: int
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
    image = {label: served for label, (_, served) in image_arms(pad_nodes_image).items()}
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


def served_stage(plan: Plan, source: Path, work: Path, raw: Path, cores: int, skip: tuple[str, ...]) -> dict:
    pad_nodes_image = work / "pad_nodes" / f"{IMAGE_ENCODER}.onnx"
    runs = registry.in_stage("served", skip)
    if "ragged" in runs:
        export_image.export_unfolded_onnx(source / IMAGE_ENCODER, pad_nodes_image)
    clones = served_clones(plan, source, pad_nodes_image, skip)
    hashes = build_repository(source, work / "served", clones, total_threads=cores)
    result: dict = {"served_config_sha256": hashes}
    if set(runs) - set(registry.MODEL_KEYS):  # an experiment on the shipped models: what they serve
        encoder = text_encoder_of(source)
        result |= {
            "text_encoder": encoder,
            "text_runtime": EXPORTED[encoder][0],
            "precision_section": records.report_section(),
            "image_precision": records.served_variant(IMAGE_ENCODER),
        }
    timings = work / "timings"  # the Python models' own timings, for the `budget` experiment
    timings.mkdir(parents=True, exist_ok=True)
    log = raw / "tritonserver.log"
    with _server(
        work / "served", log, startup_timeout_s=600, environment=server_environment(timings)
    ) as server:
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
            pad_nodes_image=pad_nodes_image,
            cores=cores,
            raw=raw,
            result=result,
        )
        target = Target(
            http_url=server.http_url, grpc_url=server.grpc_url, timings=timings, repository=work / "served"
        )
        experiments["budget"] = lambda: [
            budget.to_dict()
            for budget in run_budgets(plan.budget, repository=source, raw=raw / "budget", target=target)
        ]
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
    pad_nodes_image: Path,
    cores: int,
    raw: Path,
    result: dict,
) -> dict[str, Callable[[], object]]:
    """The served stage's experiments by registry key, in the order they run."""
    grpc_url = f"grpc://{server.grpc_url}"
    return {
        **_arms_experiments(plan, session),
        "ragged": lambda: ragged_experiment(plan, session, source, pad_nodes_image, cores),
        "minimal": lambda: minimal.compare(
            triton_http_url=server.http_url,
            services=minimal.shipped_services(source, plan.minimal_requests),
            threads=cores,
            concurrencies=list(plan.minimal_concurrency),
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


def _server(
    repository: Path, log_path: Path, *, startup_timeout_s: float, environment: dict[str, str] | None = None
) -> LocalTritonServer:
    """A stage's own tritonserver: given time to load the stage's clones, and 5 s to exit."""
    config = ServerConfig(
        model_repository=repository,
        log_path=log_path,
        exit_timeout_s=5,
        startup_timeout_s=startup_timeout_s,
        environment=environment or {},
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
    path = raw / "server_statistics.json"
    path.write_text(json.dumps({name: s.to_dict() for name, s in statistics_snapshot(url).items()}, indent=2))
    return path.name


def central_stage(plan: Plan, source: Path, work: Path, raw: Path, cores: int) -> dict:
    """The `central` experiment: one server for every image vs N processes each loading the model, in
    alternating rounds (the server stays up, idle, while the processes run)."""
    images = payloads.image_variants(plan.central_images, seed=7)
    build_repository(source, work / "central", [Clone(model=IMAGE_MODEL)], total_threads=cores)
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
