"""What each benchmark mode measures: its settings (:class:`Plan`, one per mode in :data:`PLANS`) and the
served clones and arms each experiment compares.

:mod:`loadtest.experiments.stages` runs them; which experiment runs in which stage is
:mod:`loadtest.experiments.registry`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from export.precision import records
from loadtest.baselines.pipelines import ExportedModel
from loadtest.experiments import registry
from loadtest.experiments.budget_stage import BudgetPlan
from loadtest.load.model_rows import row_services
from loadtest.load.perf import PerfSettings
from tritonrepo.clones import Clone
from tritonrepo.configs import closure, exported_step, load_holding, load_repository, pipeline_steps
from tritonrepo.errors import RepositoryError

TEXT_MODEL, IMAGE_MODEL = "text_embedder", "image_classifier"
TEXT_ENCODER, IMAGE_ENCODER = "minilm_onnx", "efficientnet_lite0_onnx"


def tabular_model() -> str | None:
    """The `minimal` experiment's tabular service: the first described model that takes rows, served alone
    as ONNX (loadtest.load.model_rows.row_services); None where no description serves one."""
    return next(iter(row_services()), None)


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
# The image's unoptimised arm in the `ragged` experiment: the ONNX file with the exporter's Pad nodes (not
# folded into its convolutions), behind batchers that wait for more requests on a CPU.
PAD_NODES_AND_DELAYS_ARM = "unoptimised (image): fp32 file with the exporter's Pad nodes, 1-2 ms queue delays"
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
    # The models the `batching` experiment measures with dynamic batching on and off (each has a dynamic
    # batcher, or calls a model that has one).
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
    minimal_concurrency: tuple[int, ...] = (1, 8, 32)
    # The `minimal` experiment's services (loadtest.experiments.minimal.SERVICES) -> measured requests per
    # arm and round: a measurement lasts a few seconds on 2 cores at 1 in flight, where an image request
    # costs tens of milliseconds and a tabular row about one.
    minimal_requests: dict[str, int] = field(
        default_factory=lambda: {"text": 300, "image": 150, "tabular": 3000}
    )
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
    # The `budget` experiment: each service's time budget at 1 and 32 in flight, tiny counts by default.
    budget: BudgetPlan = BudgetPlan(requests=48, inprocess_repeats=3)
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
        minimal_requests={"text": 1200, "image": 300, "tabular": 8000},
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
        budget=BudgetPlan(requests=400, inprocess_repeats=9),
    ),
}


def with_models(plan: Plan, models: tuple[str, ...], source: Path) -> Plan:
    """``plan`` with its sweep and its `batching` experiment on ``models`` (any models of the repository
    at ``source``; the `batching` experiment takes those among them that batch: a dynamic batcher in the
    model or in a model it calls) instead of its defaults."""
    if not models:
        return plan
    try:
        repository = load_holding(source, models, named_by="--models", fix="name models it holds")
    except RepositoryError as e:
        raise ValueError(str(e)) from e
    for model in models:
        try:
            pipeline_steps(repository, model)
        except RepositoryError as e:
            raise ValueError(f"--models {model}: {e}") from e
    batching = tuple(
        m
        for m in models
        if any(repository[n].config.HasField("dynamic_batching") for n in closure(repository, m))
    )
    return replace(plan, sweep_models=models, batching_models=batching)


def served_clones(plan: Plan, source: Path, pad_nodes_image: Path, skip: tuple[str, ...] = ()) -> list[Clone]:
    """What the served stage serves for the experiments ``skip`` leaves in: the plan's models and their
    clones without batching, and where an experiment on the shipped models runs, the shipped ensembles
    and that experiment's clones (a run of the --models experiments alone serves nothing else)."""
    runs = set(registry.in_stage("served", skip))
    shipped = (TEXT_MODEL, IMAGE_MODEL) if runs - set(registry.MODEL_KEYS) else ()
    budget = plan.budget.services if "budget" in runs else ()
    tabular_served = tabular_model() if "minimal" in runs and "tabular" in plan.minimal_requests else None
    tabular = (tabular_served,) if tabular_served else ()
    clones = [Clone(model=m) for m in dict.fromkeys((*plan.sweep_models, *shipped, *budget, *tabular))]
    clones += [Clone(model=m, suffix=NOBATCH, batching=False) for m in plan.batching_models]
    if "ragged" in runs:
        arms = ragged_arms(source) | image_arms(pad_nodes_image)
        clones += [clone for clone, _ in arms.values()]
    if "instances" in runs:
        clones += [
            Clone(model=TEXT_MODEL, suffix=INSTANCE_SUFFIX.format(n), instances=n)
            for n in plan.instance_counts
        ]
    return clones


def ragged_arms(source: Path) -> dict[str, tuple[Clone, str]]:
    """The `ragged` experiment: arm label -> (clone, served model). On the default route's encoder: the
    unoptimised configuration (its fp32 file behind length buckets, equal-shape batches: what text_embedder
    served before), ragged batching alone (the fp32 file, ragged), the served precision alone (equal shapes),
    and as shipped; then the TorchScript route as shipped. The fp32 file is the one the export keeps
    beside its precision record (:mod:`export.precision.records`); where the served file is fp32 already, the
    shipped file stands in for it and the arms that would repeat another are left out."""
    encoder = text_encoder_of(source)
    served = records.served_variant(encoder)
    fp32 = records.kept_file(encoder, "fp32") if served != "fp32" else None
    fp32_file = ((encoder, "model_filename", str(fp32.resolve())),) if fp32 is not None else ()
    equal_shapes = ((TEXT_TOKENIZER, "length_buckets", EQUAL_SHAPE_BUCKETS),)
    arms = {
        "unoptimised: fp32, buckets, equal shapes": Clone(
            model=TEXT_MODEL, suffix="__unoptimised", ragged=False, parameters=equal_shapes + fp32_file
        ),
    }
    if fp32_file:
        arms["fp32, ragged"] = Clone(model=TEXT_MODEL, suffix="__fp32", parameters=fp32_file)
        arms[f"{served}, buckets, equal shapes"] = Clone(
            model=TEXT_MODEL, suffix="__equalshapes", ragged=False, parameters=equal_shapes
        )
    arms[f"{served}, ragged (shipped)"] = Clone(model=TEXT_MODEL)
    other = records.served_variant(text_encoder_of(source, TEXT_TORCHSCRIPT_MODEL))
    arms[f"TorchScript route, {other}, ragged"] = Clone(model=TEXT_TORCHSCRIPT_MODEL)
    return {label: (clone, clone.served_name) for label, clone in arms.items()}


def image_arms(pad_nodes_file: Path) -> dict[str, tuple[Clone, str]]:
    """The `ragged` experiment, images: the unoptimised configuration (``pad_nodes_file``, the fp32 file as
    exported before its ``Pad`` nodes were folded into the convolutions, behind the batchers it was served
    with), that file alone behind today's batchers, the clone serving the fp32 file where the export serves a
    reduced precision, and as shipped."""
    served = records.served_variant(IMAGE_ENCODER)
    pad_nodes = ((IMAGE_ENCODER, "model_filename", str(pad_nodes_file.resolve())),)
    arms = {
        PAD_NODES_AND_DELAYS_ARM: Clone(
            model=IMAGE_MODEL,
            suffix="__unoptimised",
            parameters=pad_nodes,
            batcher=QUEUE_DELAY_IMAGE_BATCHERS,
        ),
        registry.PAD_NODES_FILE_ARM: Clone(model=IMAGE_MODEL, suffix="__padnodes", parameters=pad_nodes),
    }
    fp32 = records.kept_file(IMAGE_ENCODER, "fp32") if served != "fp32" else None
    if fp32 is not None:
        arms["image, fp32"] = Clone(
            model=IMAGE_MODEL,
            suffix="__fp32",
            parameters=((IMAGE_ENCODER, "model_filename", str(fp32.resolve())),),
        )
    arms[f"image, {served} (shipped)"] = Clone(model=IMAGE_MODEL)
    return {label: (clone, clone.served_name) for label, clone in arms.items()}


def text_encoder_of(source: Path, ensemble: str = TEXT_MODEL) -> str:
    """The exported encoder a text ensemble calls (its step that is a native model)."""
    return exported_step(load_repository(source), ensemble)


def exported_models(source: Path, threads: int, runtime: str | None = None) -> list[ExportedModel]:
    """The exported encoders (of ``runtime``, else all), text before image, as run in this process."""
    return [
        ExportedModel(
            repository=source, model=model, runtime=model_runtime, pipeline=pipeline, threads=threads
        )
        for model, (model_runtime, pipeline) in EXPORTED.items()
        if runtime in (None, model_runtime)
    ]
