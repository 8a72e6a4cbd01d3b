"""The GPU benchmark's steps, in one run: export on the GPU into a copy of the repository, serve the
clones side by side with KIND_GPU instances, measure, stop the server, then let Model Analyzer search
queue delay and instances. The dry run takes the same steps on the CPU (its export pinned to fp32).

Every experiment is a function of the running server; one that fails is recorded with its message and
the next still runs, as in the CPU benchmark (:mod:`loadtest.experiments.stages`).
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loadtest.baselines.pipelines import ExportedModel, served_file
from loadtest.bench.gpu import server as server_facts
from loadtest.bench.gpu.plan import (
    TEXT_MODEL,
    GpuPlan,
    encoder_of,
    measured_models,
    served_clones,
    served_models,
)
from loadtest.bench.gpu.server import ServerUrls
from loadtest.experiments import inprocess, minimal
from loadtest.experiments.budget_runs import Target
from loadtest.experiments.budget_stage import run_budgets
from loadtest.experiments.served import PerfSession, ServedPoint, arms_experiment
from loadtest.load import environment
from loadtest.load.preprocessing import tokenizer_file
from loadtest.load.stub_timings import server_environment
from tritonlocal import LocalTritonServer, ServerConfig
from tritonrepo.clones import build_repository
from tritonrepo.configs import load_repository
from tritonrepo.files import EXPORT_OUTPUTS

logger = logging.getLogger(__name__)

RUNTIMES = {"minilm_onnx": "onnxruntime", "minilm_torchscript": "torchscript"}


class GpuBenchError(RuntimeError):
    """The GPU benchmark cannot run here (no CUDA device, a failed export)."""


def device_facts(plan: GpuPlan) -> dict[str, Any]:
    """The device the plan serves on; a KIND_GPU plan refuses a machine without CUDA."""
    import torch

    if plan.kind == "KIND_CPU":
        return {"device": "cpu", "cuda_available": bool(torch.cuda.is_available())}
    if not torch.cuda.is_available():
        raise GpuBenchError(
            "no CUDA device here (torch.cuda.is_available() is False): run `make bench-gpu` on a machine "
            "with an NVIDIA GPU and a CUDA build of torch, or `python -m loadtest.bench --mode gpu "
            "--dry-run` to run the same plan on the CPU"
        )
    major, minor = torch.cuda.get_device_capability(0)
    return {
        "device": "cuda",
        "gpu": torch.cuda.get_device_name(0),
        "gpus": torch.cuda.device_count(),
        "compute_capability": f"{major}.{minor}",
        "cuda": torch.version.cuda,
        "torch": torch.__version__,
    }


def export_command(plan: GpuPlan, repository: Path, records: Path) -> list[str]:
    return [
        sys.executable, "-m", "export", *plan.export_args,
        "--repository", str(repository), "--records", str(records),
    ]  # fmt: skip


def prepare_repository(plan: GpuPlan, source: Path, work: Path, raw: Path) -> tuple[Path, Path, dict]:
    """(repository, precision records, what was done): the repository's own files copied without their
    exported files, and the export run into the copy (on this GPU; in the dry run on the CPU, pinned to
    fp32), its records beside it, its log in ``raw/export.log``. The source is left as it is."""
    repository = work / "repository"
    if repository.exists():
        shutil.rmtree(repository)
    shutil.copytree(source, repository, ignore=shutil.ignore_patterns(*EXPORT_OUTPUTS))
    records = work / "precision"
    command = export_command(plan, repository.resolve(), records.resolve())
    log = raw / "export.log"
    started = time.monotonic()
    with open(log, "wb") as out:
        done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, check=False)
    seconds = round(time.monotonic() - started, 1)
    if done.returncode != 0:
        raise GpuBenchError(f"the export failed (exit {done.returncode}) after {seconds} s; see {log}")
    return (
        repository,
        records,
        {"command": "python " + " ".join(command[1:]), "log": log.name, "seconds": seconds},
    )


def serve_and_measure(plan: GpuPlan, repository: Path, records: Path, work: Path, raw: Path) -> dict:
    """The clones derived into one local tritonserver (the nvidia-pytriton wheel's) and measured; a
    model that fails to load leaves the server serving the rest (its arm is left out, or fails)."""
    cores = os.cpu_count() or 1
    served, arms = served_clones(plan, repository, records)
    hashes = build_repository(
        repository, work / "served", served, total_threads=cores, gpu_available=plan.kind == "KIND_GPU"
    )
    timings = work / "timings"  # the Python models' own timings, for the `budget` experiment
    timings.mkdir(parents=True, exist_ok=True)
    config = ServerConfig(
        model_repository=work / "served",
        log_path=raw / "tritonserver.log",
        exit_timeout_s=5,
        startup_timeout_s=900,
        environment=server_environment(timings),
        exit_on_error=False,
    )
    with LocalTritonServer(config) as server:
        unavailable = [model for model in measured_models(arms) if model in server.failed_models]
        _, arms = served_clones(plan, repository, records, unavailable)
        models = served_models(served, repository)
        result = {
            "server": server_facts.describe(server.http_url, models, label=server_facts.LOCAL_LABEL),
            "served_config_sha256": hashes,
            "unavailable": unavailable,
        }
        session = PerfSession.for_server(server, repository=repository, raw=raw, settings=plan.perf)
        target = Target(
            http_url=server.http_url, grpc_url=server.grpc_url, timings=timings, repository=work / "served"
        )
        result |= measure(plan, session, repository, arms, raw, target=target)
    return result


def measure_at(
    plan: GpuPlan,
    urls: ServerUrls,
    repository: Path,
    records: Path,
    raw: Path,
    access: tuple[str | None, list[str]],
) -> dict:
    """The plan measured against the running server at ``urls``, which serves the clones (checked by
    the caller) but the models ``access`` names after its admin key; ``repository`` holds the files it
    serves, for the in-process half and the alternative. The server's processes are not this machine's
    to sample: no server CPU figures."""
    admin_key, unavailable = access
    served, arms = served_clones(plan, repository, records, unavailable)
    models = served_models(served, repository)
    label = server_facts.URL_LABEL.format(url=f"http://{urls.http_url}")
    result = {
        "server": server_facts.describe(urls.http_url, models, label=label, admin_key=admin_key),
        "unavailable": unavailable,
    }
    session = PerfSession.for_urls(
        urls.http_url, urls.grpc_url, repository=repository, raw=raw, settings=plan.perf, admin_key=admin_key
    )
    target = Target(http_url=urls.http_url, grpc_url=urls.grpc_url)
    return result | measure(plan, session, repository, arms, raw, target=target)


def measure(
    plan: GpuPlan, session: PerfSession, repository: Path, arms: dict, raw: Path, *, target: Target
) -> dict:
    """Every experiment against ``session``'s server (``target``: the same server, for the `budget`
    experiment); one that fails is recorded and the next runs."""
    result: dict[str, Any] = {"arms": arms, "versions": environment.versions(session.http_url)}
    experiments = _experiments(plan, session, repository, arms, session.http_url, raw)
    experiments["budget"] = lambda: [
        budget.to_dict()
        for budget in run_budgets(plan.budget, repository=repository, raw=raw / "budget", target=target)
    ]
    for key, run in experiments.items():
        _attempt(result, key, run)
    return result


def _experiments(
    plan: GpuPlan, session: PerfSession, repository: Path, arms: dict, http_url: str, raw: Path
) -> dict[str, Callable[[], object]]:
    def measured(key: str, concurrencies: tuple[int, ...]) -> Callable[[], list[ServedPoint]]:
        return lambda: arms_experiment(
            session, key, TEXT_MODEL, arms[key], concurrencies=list(concurrencies), rounds=plan.rounds
        )

    return {
        "batching": measured("batching", plan.batching_concurrency),
        "precision": measured("precision", plan.precision_concurrency),
        "instances": measured("instances", plan.instance_concurrency),
        "served_vs_inprocess": lambda: served_vs_inprocess(plan, session, repository),
        # the text service only: the GPU plan's comparison is of the text ensemble
        "minimal": lambda: minimal.compare(
            triton_http_url=http_url,
            services=[
                minimal.text_service(
                    model=TEXT_MODEL,
                    encoder_file=served_file(repository, encoder_of(repository, "onnx")),
                    tokenizer_file=tokenizer_file(repository),
                    requests=plan.minimal_requests,
                )
            ],
            threads=os.cpu_count() or 1,
            concurrencies=list(plan.minimal_concurrency),
            rounds=plan.minimal_rounds,
            log_path=raw / "minimal_server.log",
            workers=alternative_workers(plan),
        ),
    }


def alternative_workers(plan: GpuPlan) -> tuple[int, ...]:
    """One process; one per GPU; one per core (what a pre-fork server deploys), each once."""
    cores = os.cpu_count() or 1
    if plan.kind == "KIND_CPU":
        return minimal.worker_counts(cores)
    import torch

    return minimal.worker_counts(cores, torch.cuda.device_count())


def served_vs_inprocess(plan: GpuPlan, session: PerfSession, repository: Path) -> dict:
    """The served encoder's file run in this process in batches of the size the server formed at
    ``served_concurrency``, with as many pipelines as the server has instances, beside the served rate."""
    encoder = encoder_of(repository, "onnx")
    served = []
    inprocess_points = []
    cores = os.cpu_count() or 1
    for _ in range(plan.rounds):  # alternating: served, in process, served, in process...
        (point,) = arms_experiment(
            session,
            "served_vs_inprocess",
            TEXT_MODEL,
            {"served": TEXT_MODEL},
            concurrencies=[plan.served_concurrency],
        )
        served.append(point)
        stats = point.server.get(encoder, {})
        batch = max(1, round(stats.get("average_batch_size") or 1))
        instances = served_instances(repository, encoder)
        inprocess_points += inprocess.measure(
            ExportedModel(
                repository=repository,
                model=encoder,
                runtime=RUNTIMES[encoder],
                pipeline="text",
                threads=cores,
            ),
            batch_sizes=[batch],
            items=plan.inprocess_texts,
            rounds=1,
            arms=[inprocess.Arm(workers=instances, threads=max(1, cores // instances))],
        )
    return {"served": served, "inprocess": inprocess_points}


def served_instances(repository: Path, model: str) -> int:
    """The instances the served configuration gives ``model`` (every instance group together)."""
    groups = load_repository(repository)[model].config.instance_group
    return sum(max(1, group.count) for group in groups) or 1


def analyzer(plan: GpuPlan, repository: Path, folder: Path, work: Path, raw: Path) -> dict:
    """Model Analyzer's search of queue delay and instance count for the text encoder on this device
    (``python -m loadtest.tune``), after the benchmark's server has stopped."""
    command = [
        sys.executable,
        "-m",
        "loadtest.tune",
        "--models",
        TEXT_MODEL,
        "--sweep",
        plan.analyzer_sweep,
        "--kind",
        plan.kind,
        "--source",
        str(repository),
        "--output",
        str(folder / "analyzer"),
        "--work",
        str(work / "tune"),
        "--timeout-s",
        str(plan.analyzer_timeout_s),
    ]
    with open(raw / "model_analyzer.log", "wb") as out:
        done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, check=False)
    summary = folder / "analyzer" / "summary.md"
    if done.returncode != 0 or not summary.is_file():
        raise GpuBenchError(
            f"Model Analyzer's search failed (exit {done.returncode}); see raw/model_analyzer.log"
        )
    return {"command": "python " + " ".join(command[1:]), "summary": str(summary.relative_to(folder))}


def _attempt(result: dict, key: str, run: Callable[[], Any]) -> None:
    """Run one experiment; a failure is recorded (and reported) and the next experiment still runs."""
    try:
        result[key] = run()
    except Exception as e:  # noqa: BLE001 - the report must say what failed, and the rest must run
        logger.exception("experiment %s failed", key)
        result.setdefault("errors", []).append(f"{key}: {type(e).__name__}: {e}")
