"""What the GPU benchmark measures, and the clones it serves side by side.

One plan, two sizes: :data:`GPU` for a CUDA machine (the export runs there, instances are KIND_GPU) and
:data:`DRY_RUN`, the same steps on the CPU with tiny counts, which the test suite runs: KIND_CPU, and the
export into the run's copy of the repository with the CPU standing in for the GPU (``--served-on cpu``),
pinned to fp32 and to the text encoder the benchmark serves, so that it takes a minute, not an hour.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from export.common import ExportError
from export.precision.records import kept_file, served_variant
from loadtest.experiments.budget_stage import BudgetPlan
from loadtest.load.perf import PerfSettings
from tritonrepo.atomic_files import sha256_file
from tritonrepo.choices import check_choice
from tritonrepo.clones import Clone, build_repository
from tritonrepo.configs import closure, exported_step, load_repository
from tritonrepo.files import exported_filename

ROUTES = {"onnx": "text_embedder", "torchscript": "text_embedder_torchscript"}  # route -> ensemble
TEXT_MODEL = ROUTES["onnx"]
# Routes measured only in the precision experiment: one that cannot be served loses its arm, not the run.
OPTIONAL_ROUTES = tuple(route for route in ROUTES if ROUTES[route] != TEXT_MODEL)
NOBATCH, INSTANCES, FP32 = "__nobatch", "__x{}", "__fp32"
KINDS = ("KIND_GPU", "KIND_CPU")


@dataclass(kw_only=True, frozen=True)
class GpuPlan:
    name: str
    kind: str  # the instance kind every exported model is served on
    export_args: tuple[str, ...]  # python -m export's options, besides the copy and the records it writes
    perf: PerfSettings
    batching_concurrency: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128)
    rounds: int = 2
    instance_counts: tuple[int, ...] = (1, 2)
    instance_concurrency: tuple[int, ...] = (64,)
    precision_concurrency: tuple[int, ...] = (1, 64)
    served_concurrency: int = 64  # served against in-process batches of the size the server formed
    inprocess_texts: int = 4096
    minimal_concurrency: tuple[int, ...] = (1, 64)
    minimal_requests: int = 4000
    minimal_rounds: int = 3
    analyzer_sweep: str = "gpu"
    analyzer_timeout_s: float = 1800.0
    budget: BudgetPlan = BudgetPlan(requests=200, inprocess_repeats=5)  # the `budget` experiment

    def __post_init__(self) -> None:
        check_choice("kind", self.kind, KINDS)
        if "--served-on" not in self.export_args or {"--repository", "--records"} & set(self.export_args):
            raise ValueError(
                f"plan {self.name}: export_args {self.export_args} must say where the models are served "
                "(--served-on) and leave --repository and --records to the run"
            )
        counts = {
            "batching_concurrency": self.batching_concurrency,
            "instance_counts": self.instance_counts,
            "instance_concurrency": self.instance_concurrency,
            "precision_concurrency": self.precision_concurrency,
            "minimal_concurrency": self.minimal_concurrency,
        }
        for label, values in counts.items():
            if not values or any(v < 1 for v in values):
                raise ValueError(f"plan {self.name}: {label} must be positive numbers, got {values}")
        if min(self.rounds, self.minimal_rounds, self.served_concurrency, self.inprocess_texts) < 1:
            raise ValueError(f"plan {self.name}: rounds, counts and concurrency must be at least 1")


GPU = GpuPlan(
    name="gpu",
    kind="KIND_GPU",
    export_args=("--served-on", "gpu"),
    perf=PerfSettings(measurement_interval_ms=3000, max_trials=6, stability_percent=15, timeout_s=150),
)
DRY_RUN = GpuPlan(
    name="gpu-dry-run",
    kind="KIND_CPU",
    # fp32 on the CPU, the text encoder alone, its batch-cost curve timed at two sizes: the plumbing of
    # the GPU run's export in well under a minute.
    export_args=("--served-on", "cpu", "--precision", "fp32", "--only", "text", "--timing-batches", "1,4"),
    perf=PerfSettings(measurement_interval_ms=300, max_trials=3, stability_percent=100, timeout_s=60),
    batching_concurrency=(1, 4),
    rounds=1,
    instance_concurrency=(4,),
    precision_concurrency=(4,),
    served_concurrency=4,
    inprocess_texts=32,
    minimal_concurrency=(2,),
    minimal_requests=24,
    minimal_rounds=1,
    analyzer_sweep="minimal",
    analyzer_timeout_s=600.0,
    budget=BudgetPlan(services=(TEXT_MODEL,), in_flight=(1, 4), requests=16, inprocess_repeats=1),
)


def encoder_of(source: Path, route: str) -> str:
    return exported_step(load_repository(source), ROUTES[route])


def served_clones(
    plan: GpuPlan, source: Path, records: Path, unavailable: Collection[str] = ()
) -> tuple[list[Clone], dict[str, dict[str, str]]]:
    """The clones served side by side, and per experiment its arms (label -> served model).

    ``records``: the export's precision records (the fp32 file it kept beside a reduced precision).
    ``unavailable``: models the server did not load; an optional route among them, or one whose export
    left no servable file, is left out (:func:`lost_routes` says why)."""
    served = [Clone(model=TEXT_MODEL), Clone(model=TEXT_MODEL, suffix=NOBATCH, batching=False)]
    served += [Clone(model=service) for service in plan.budget.services if service != TEXT_MODEL]
    served += [Clone(model=TEXT_MODEL, suffix=INSTANCES.format(n), instances=n) for n in plan.instance_counts]
    arms: dict[str, dict[str, str]] = {
        "batching": {"batching on": TEXT_MODEL, "batching off": TEXT_MODEL + NOBATCH},
        "instances": {
            f"{n} instance{'s' if n > 1 else ''} per device": TEXT_MODEL + INSTANCES.format(n)
            for n in plan.instance_counts
        },
        "precision": {},
    }
    lost = lost_routes(source, records, unavailable)
    for route, ensemble in ROUTES.items():
        if route in lost:
            continue
        encoder = encoder_of(source, route)
        chosen = served_variant(encoder, records)
        if route in OPTIONAL_ROUTES:
            served.append(Clone(model=ensemble))
        arms["precision"][f"{route}: {chosen} (served)"] = ensemble
        fp32, _ = fp32_arm(source, records, route)
        if fp32 is not None:
            parameters = ((encoder, "model_filename", str(fp32.resolve())),)
            served.append(Clone(model=ensemble, suffix=FP32, parameters=parameters))
            arms["precision"][f"{route}: fp32"] = ensemble + FP32
    return served, arms


def fp32_arm(source: Path, records: Path, route: str) -> tuple[Path | None, str | None]:
    """The fp32 file the export kept beside a route's served file, to serve as the precision experiment's
    fp32 arm; or None, and why not where that file is the served one byte for byte. Its clone differs
    from the served model only by that file (same config, the clone changes nothing else), so the same
    bytes would be one configuration presented as two precisions: the arm is left out and the report
    says so (``None`` reason: no kept file, fp32 itself served)."""
    encoder = encoder_of(source, route)
    chosen = served_variant(encoder, records)
    fp32 = kept_file(encoder, "fp32", records) if chosen != "fp32" else None
    if fp32 is None:
        return None, None
    config = load_repository(source)[encoder].config
    served = Path(source) / encoder / "1" / (exported_filename(config) or "")
    if served.is_file() and sha256_file(served) == sha256_file(fp32):
        return None, (
            f"{route}: the fp32 file kept beside the served {chosen} one ({fp32.name}) is the served file "
            f"byte for byte and would run under the same config: one arm, {chosen} (served), not two "
            "precisions"
        )
    return fp32, None


def precision_notes(source: Path, records: Path, lost: Collection[str] = ()) -> list[str]:
    """Why a route's precision experiment has no fp32 arm beside its served one (:func:`fp32_arm`); the
    routes in ``lost`` have no arm at all (:func:`lost_routes`)."""
    return [
        note
        for route in ROUTES
        if route not in lost and (note := fp32_arm(source, records, route)[1]) is not None
    ]


def lost_routes(source: Path, records: Path, unavailable: Collection[str] = ()) -> dict[str, str]:
    """Each optional route left out of the precision experiment, with why: the last export of its encoder
    wrote no servable file, or the server did not load its models (``unavailable``)."""
    lost = {}
    for route in OPTIONAL_ROUTES:
        try:
            served_variant(encoder_of(source, route), records)
        except ExportError as e:
            lost[route] = str(e)
            continue
        missing = [m for m in unavailable if m in (ROUTES[route], ROUTES[route] + FP32)]
        if missing:
            lost[route] = f"the server did not load {', '.join(missing)} (its log says why)"
    return lost


def optional_models() -> set[str]:
    """The models only an optional route's arm measures: a server may lack them."""
    return {model for route in OPTIONAL_ROUTES for model in (ROUTES[route], ROUTES[route] + FP32)}


def measured_models(arms: dict[str, dict[str, str]]) -> list[str]:
    """The models perf_analyzer is pointed at, each once: every arm of every experiment."""
    return list(dict.fromkeys(model for experiment in arms.values() for model in experiment.values()))


def served_models(served: list[Clone], source: Path) -> list[str]:
    """Every model the clones serve (each clone's steps included), each once."""
    models = load_repository(source)
    names = (name + v.suffix for v in served for name in closure(models, v.model))
    return list(dict.fromkeys(names))


def write_repository(target: Path, *, source: Path, records: Path, plan: GpuPlan = GPU) -> dict[str, str]:
    """The benchmark's clones of ``source`` for NVIDIA's container, in ``target``: each model's own
    configuration with only its clone's change, files copied (compose mounts it into the container).
    ``records``: the export's precision records (the fp32 file it kept beside a reduced precision).
    Returns served model -> sha256 of its config."""
    served, _ = served_clones(plan, source, records)
    return build_repository(source, target, served, total_threads=1, derive=False)
