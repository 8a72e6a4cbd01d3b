"""The no-server side of the `central` experiment: N worker processes that each load the model and classify a
shard.

Each worker is a fresh process (``spawn``) that imports the runtime, loads the exported classifier and
the preprocessing code itself (per-job model loading), then classifies its images one at a time. It
reports its own load time, run time and CPU time, so nothing is lost when it exits.
"""

from __future__ import annotations

import multiprocessing
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from loadtest.load.observe import ProcessSampler


@dataclass(kw_only=True)
class WorkerResult:
    images: int
    load_s: float
    run_s: float
    cpu_s: float
    top1: list[int] = field(default_factory=list)


def classify_shard(repository: str, model: str, runtime: str, threads: int, images: list[bytes]) -> dict:
    """Runs in a worker process: load everything, then classify ``images`` one by one."""
    started_cpu, started = time.process_time(), time.perf_counter()
    from loadtest.baselines.pipelines import ImagePipeline  # imports count as loading: a job pays for them

    pipeline = ImagePipeline(Path(repository), classifier_model=model, runtime=runtime, threads=threads)
    loaded = time.perf_counter()
    top1 = [int(pipeline([image])[0][0, 0]) for image in images]
    finished = time.perf_counter()
    result = WorkerResult(
        images=len(images),
        load_s=loaded - started,
        run_s=finished - loaded,
        cpu_s=time.process_time() - started_cpu,
        top1=top1,
    )
    return asdict(result)


@dataclass(kw_only=True)
class PoolResult:
    workers: int
    images: int
    wall_s: float
    cpu_s: float
    peak_rss_mb: float
    mean_load_s: float
    top1: list[int]

    @property
    def images_per_s(self) -> float:
        return self.images / self.wall_s if self.wall_s else 0.0


def run_pool(
    repository: Path, *, model: str, runtime: str, workers: int, threads: int, images: list[bytes]
) -> PoolResult:
    """Split ``images`` into ``workers`` contiguous shards and classify them in parallel processes."""
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    shards = [images[i::workers] for i in range(workers)]
    context = multiprocessing.get_context("spawn")
    started = time.perf_counter()
    with context.Pool(workers) as pool:
        sampler = ProcessSampler(select=lambda: list(_children()), interval_s=0.2)
        with sampler:
            results = pool.starmap(
                classify_shard, [(str(repository), model, runtime, threads, s) for s in shards]
            )
    wall_s = time.perf_counter() - started
    top1: list[int] = [0] * len(images)
    for index, result in enumerate(results):
        top1[index::workers] = result["top1"]
    return PoolResult(
        workers=workers,
        images=len(images),
        wall_s=wall_s,
        cpu_s=sum(r["cpu_s"] for r in results),
        peak_rss_mb=sampler.usage.peak_rss_mb,
        mean_load_s=sum(r["load_s"] for r in results) / len(results),
        top1=top1,
    )


def _children():  # noqa: ANN202 - psutil processes
    import psutil

    return psutil.Process().children(recursive=True)
