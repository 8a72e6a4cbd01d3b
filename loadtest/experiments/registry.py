"""The one list of experiments: the key that ``--skip``/``--only`` and results.json use, the title the
report prints, and the stage that runs it.

Stages: ``served`` (one server holding the public models and their clones), ``central`` (a server for
the images against a pool of worker processes), ``inprocess`` and ``profile`` (no server; they run
after it has stopped so that they do not compete with it for the cores).
"""

from __future__ import annotations

from dataclasses import dataclass

STAGES = ("served", "central", "inprocess", "profile")
# An arm label of the `ragged` experiment that the report looks up: the ONNX file with the exporter's Pad
# nodes behind the shipped batchers.
PAD_NODES_FILE_ARM = "image: fp32 file with the exporter's Pad nodes alone"
# The concurrency the report's targets are read at; the `ragged` experiment measures in process beside its
# rounds there.
TARGET_CONCURRENCY = 32


@dataclass(kw_only=True, frozen=True)
class Experiment:
    key: str
    title: str
    stage: str = "served"  # one of STAGES
    number: int | None = None  # its number in the report; the sweeps and Locust runs have none
    results: tuple[str, ...] = ()  # the results.json keys it writes, when not its own key alone
    any_model: bool = False  # measures the models --models names; the others, the shipped models

    @property
    def heading(self) -> str:
        return f"## {self.number}. {self.title}" if self.number is not None else f"## {self.title}"

    @property
    def result_keys(self) -> tuple[str, ...]:
        return self.results or (self.key,)


EXPERIMENTS = (
    Experiment(key="sweeps", title="perf_analyzer sweeps", any_model=True),
    Experiment(key="batching", number=1, title="Dynamic batching on vs off", any_model=True),
    Experiment(key="instances", number=2, title="Model instances"),
    Experiment(
        key="ragged",
        number=8,
        title="Length-aware (ragged) batching and precision, arm by arm",
        results=("ragged", "ragged_inprocess"),
    ),
    Experiment(
        key="minimal",
        number=9,
        title="Triton against the simplest alternative (one request at a time, one process or one per core)",
    ),
    Experiment(key="clients", number=4, title="Sequential synchronous client vs asyncio client"),
    Experiment(
        key="batchcost",
        number=6,
        title="Cost of a batch of 32 against a batch of 1",
        results=("served_batch_costs",),
    ),
    Experiment(key="locust", title="Locust scenarios"),
    Experiment(key="budget", title="Where the time goes"),
    Experiment(key="central", number=3, title="Central server vs parallel processes", stage="central"),
    Experiment(
        key="inprocess",
        number=5,
        title="The in-process limit",
        stage="inprocess",
        results=("inprocess", "inprocess_batch_costs"),
    ),
    Experiment(key="profile", number=7, title="Per-layer profiles", stage="profile", results=("profiles",)),
)
BY_KEY = {e.key: e for e in EXPERIMENTS}
KEYS = tuple(BY_KEY)
MODEL_KEYS = tuple(e.key for e in EXPERIMENTS if e.any_model)  # what a run with --models measures


def experiment(key: str) -> Experiment:
    try:
        return BY_KEY[key]
    except KeyError:
        raise ValueError(f"unknown experiment {key!r}; known: {', '.join(KEYS)}") from None


def in_stage(stage: str, skip: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The keys of the experiments of ``stage`` that ``skip`` leaves in, in registry order."""
    return tuple(e.key for e in EXPERIMENTS if e.stage == stage and e.key not in skip)
