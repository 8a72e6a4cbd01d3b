"""What a tuning searches: the sweep per model, the load, the latency budget, and Model Analyzer's config.

Model Analyzer's brute search over an ensemble is not supported (ensembles only take its quick search,
which varies instance counts and max_batch_size alone), so a pipeline is tuned through the model that
dominates its cost: the exported encoder behind each ensemble (its ``onnxruntime_onnx`` or
``pytorch_libtorch`` step), found in the ensemble's config at run time. The sweep is a manual brute
search over what matters on a CPU: instance count (the cores divided between the instances), the dynamic
batcher's queue delay and preferred batch sizes. The shipped configuration is Model Analyzer's
``config_default``, measured in the same run under the same load.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from description.config_rules import QUEUE_INSTANCES_NOTE, QUEUE_MIN_INSTANCES
from tritonrepo.choices import check_choice
from tritonrepo.configs import ModelEntry, exported_step, load_repository
from tritonrepo.derive import derive_local_config
from tritonrepo.errors import RepositoryError
from tritonrepo.paths import REPOSITORY


@dataclass(frozen=True, kw_only=True)
class Sweep:
    """The configurations tried for each model (their cross product) and the load they get."""

    name: str
    instance_counts: tuple[int, ...]
    max_queue_delays_us: tuple[int, ...]
    preferred_batch_sizes: tuple[tuple[int, ...], ...]
    concurrency: tuple[int, ...]
    measurement_interval_ms: int

    def __post_init__(self) -> None:
        for label, values in (
            ("instance_counts", self.instance_counts),
            ("concurrency", self.concurrency),
        ):
            if not values or any(v < 1 for v in values):
                raise ValueError(f"sweep {self.name}: {label} must be positive numbers, got {values}")
        if min(self.instance_counts) < QUEUE_MIN_INSTANCES:
            raise ValueError(
                f"sweep {self.name}: instance_counts {self.instance_counts}; every batching model has a "
                f"bounded queue. {QUEUE_INSTANCES_NOTE}"
            )
        if not self.max_queue_delays_us or any(v < 0 for v in self.max_queue_delays_us):
            raise ValueError(
                f"sweep {self.name}: max_queue_delays_us must be >= 0, got {self.max_queue_delays_us}"
            )
        if not self.preferred_batch_sizes or any(not sizes for sizes in self.preferred_batch_sizes):
            raise ValueError(f"sweep {self.name}: give at least one non-empty preferred_batch_sizes set")
        if self.measurement_interval_ms < 500:
            raise ValueError(
                f"sweep {self.name}: measurement_interval_ms must be >= 500, "
                f"got {self.measurement_interval_ms}"
            )

    @property
    def variants(self) -> int:
        """Configurations per model besides the shipped one."""
        return len(self.instance_counts) * len(self.max_queue_delays_us) * len(self.preferred_batch_sizes)


SWEEPS = {
    # About 10 minutes on 2 cores for image_classifier and text_embedder: 8 variants + shipped per model.
    "quick": Sweep(
        name="quick",
        instance_counts=(2, 3),
        max_queue_delays_us=(500, 4000),
        preferred_batch_sizes=((4, 8), (16, 32)),
        concurrency=(8,),
        measurement_interval_ms=3000,
    ),
    # One variant beside the shipped configuration, seconds of load: what the end-to-end test runs.
    "minimal": Sweep(
        name="minimal",
        instance_counts=(2,),
        max_queue_delays_us=(1000,),
        preferred_batch_sizes=((4, 8),),
        concurrency=(2,),
        measurement_interval_ms=1000,
    ),
    # On a GPU (python -m loadtest.bench --mode gpu): batching pays at high load there, so the delays
    # reach further and the load is that of the GPU benchmark's targets.
    "gpu": Sweep(
        name="gpu",
        instance_counts=(2, 3, 4),
        max_queue_delays_us=(0, 500, 2000, 8000),
        preferred_batch_sizes=((16, 32), (32, 64)),
        concurrency=(64, 128),
        measurement_interval_ms=3000,
    ),
}
KINDS = ("KIND_CPU", "KIND_GPU")


@dataclass(frozen=True, kw_only=True)
class TunePlan:
    """One tuning: which pipelines, which sweep, which latency budget."""

    pipelines: tuple[str, ...]
    sweep: Sweep
    latency_budget_ms: float
    min_gain: float = 0.05  # a variant must beat the shipped throughput by this fraction to win
    source: Path = REPOSITORY
    targets: dict[str, str] = field(default_factory=dict)  # pipeline -> the model profiled for it
    kind: str = "KIND_CPU"  # the instances searched: the local CPU configuration, or on this machine's GPU

    def __post_init__(self) -> None:
        check_choice("kind", self.kind, KINDS)
        if not self.pipelines:
            raise ValueError("name at least one model to tune, e.g. --models image_classifier")
        if self.latency_budget_ms <= 0:
            raise ValueError(f"latency_budget_ms must be positive, got {self.latency_budget_ms}")
        if not 0 <= self.min_gain < 1:
            raise ValueError(f"min_gain is a fraction in [0, 1), e.g. 0.05 for 5%; got {self.min_gain}")

    def fingerprint(self, models: dict[str, ModelEntry]) -> str:
        """Changes when the plan or a profiled model's local config (adopted overlay included) does: the
        key of the checkpoint a re-run resumes from. The decision rule (min_gain) is not part of it."""
        configs = {
            name: str(derive_local_config(models[name], gpu_available=self.gpu, intra_op_threads=None))
            for name in sorted(self.targets.values())
        }
        text = json.dumps(
            [asdict(self.sweep), self.latency_budget_ms, sorted(self.targets.items()), configs],
            sort_keys=True,
        )
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    @property
    def gpu(self) -> bool:
        return self.kind == "KIND_GPU"

    @property
    def profiles(self) -> int:
        """The configurations Model Analyzer measures: each target's variants and its shipped
        configuration, at each concurrency of the sweep."""
        return len(set(self.targets.values())) * (self.sweep.variants + 1) * len(self.sweep.concurrency)


def make_plan(
    pipelines: list[str],
    *,
    sweep: str,
    latency_budget_ms: float,
    concurrency: Sequence[int] | None = None,
    min_gain: float = 0.05,
    source: Path = REPOSITORY,
    kind: str = "KIND_CPU",
) -> TunePlan:
    """Resolve each named model to the model profiled for it (an ensemble's exported encoder);
    ``concurrency`` replaces the sweep's load (the batcher's best settings depend on it)."""
    if sweep not in SWEEPS:
        raise ValueError(f"unknown sweep {sweep!r}; choose one of {', '.join(SWEEPS)}")
    models = load_repository(source)
    targets = {name: profiled_model(name, models) for name in pipelines}
    chosen = SWEEPS[sweep]
    for model in dict.fromkeys(targets.values()):
        check_sweep_fits(models[model], chosen)
    if concurrency:
        chosen = replace(chosen, concurrency=tuple(concurrency))
    return TunePlan(
        pipelines=tuple(pipelines),
        sweep=chosen,
        latency_budget_ms=latency_budget_ms,
        min_gain=min_gain,
        source=source,
        targets=targets,
        kind=kind,
    )


def profiled_model(name: str, models: dict[str, ModelEntry]) -> str:
    """``name`` itself when it runs an exported file, else the exported step of the ensemble ``name``."""
    if name not in models:
        raise ValueError(f"no model {name!r} in the repository; models: {', '.join(sorted(models))}")
    entry = models[name]
    if entry.is_native:
        return name
    if entry.kind == "ensemble":
        try:
            return exported_step(models, name)
        except RepositoryError as e:
            raise ValueError(f"{e}; name the one to tune instead") from e
    raise ValueError(
        f"{name!r} is a {entry.kind} model; tune an exported model or an ensemble with one exported step"
    )


def check_sweep_fits(entry: ModelEntry, sweep: Sweep) -> None:
    """Refuse a model the sweep cannot configure: without a batch dimension (max_batch_size 0) there is
    no dynamic batcher to vary, and a preferred batch size above max_batch_size is a configuration Triton
    refuses to load."""
    limit = entry.config.max_batch_size
    if limit < 1:
        raise ValueError(
            f"{entry.name!r} has max_batch_size {limit}: a model without a batch dimension has no dynamic "
            "batcher to tune; give it a batch dimension (max_batch_size >= 1) to tune it"
        )
    too_large = sorted({size for sizes in sweep.preferred_batch_sizes for size in sizes if size > limit})
    if too_large:
        fitting = [name for name, other in SWEEPS.items() if _largest(other) <= limit]
        raise ValueError(
            f"sweep {sweep.name!r} prefers batch sizes {too_large}, above {entry.name}'s max_batch_size "
            f"{limit}, which Triton refuses to load; choose a sweep whose sizes fit "
            f"({', '.join(fitting) or 'none fits'}) or raise the model's max_batch_size"
        )


def _largest(sweep: Sweep) -> int:
    return max(size for sizes in sweep.preferred_batch_sizes for size in sizes)


def model_config_parameters(sweep: Sweep, kind: str = "KIND_CPU") -> dict:
    """Model Analyzer's manual sweep (a list at a leaf is swept; the cross product is measured)."""
    return {
        "instance_group": [[{"kind": kind, "count": count}] for count in sweep.instance_counts],
        "dynamic_batching": {
            "max_queue_delay_microseconds": list(sweep.max_queue_delays_us),
            "preferred_batch_size": [list(sizes) for sizes in sweep.preferred_batch_sizes],
        },
    }
